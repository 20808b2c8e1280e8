//! Unit tests of the JVM store: records built with `jp_common::wire::Writer`.
