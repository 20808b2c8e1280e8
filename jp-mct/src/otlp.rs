//! OTLP profiles: OpenTelemetry's profiles signal, opentelemetry-proto v1.10.0
//! (`opentelemetry.proto.profiles.v1development`, public alpha), in its dictionary-based
//! encoding: the profiles of every resource in one message index one shared set of
//! tables (strings, mappings, functions, locations, stacks), each entry written once.
//!
//! [`OtlpBuilder`] is the one encoder. It takes jp's profiles as jp builds them for every
//! format — the tree's samples with their stacks ([`crate::pprof::Profile`], before any
//! encoding) and jpd's kernel profile — and writes one OTLP profile per sample type (OTLP
//! has one sample type per profile): a JVM's `calls`, `bytecodes` and, when joined,
//! `cpu` are three profiles over the same stacks. A sample whose value is 0 for a type
//! is left out of that type's profile.
//!
//! The message written to a file ([`proto::profiles::v1development::ProfilesData`]) and
//! the collector's `ExportProfilesServiceRequest` have the same fields and numbers: the
//! bytes are the same. Check a file with the official classes (PyPI
//! `opentelemetry-proto` 1.45): `ProfilesData.FromString(open(F, "rb").read())`.

mod builder;

pub use builder::OtlpBuilder;

use std::io::{self, Write};

use crate::pprof::{mct_profile, PprofOptions};
use crate::Mct;
use proto::common::v1::{any_value, AnyValue, KeyValue};

/// The opentelemetry-proto release whose profiles messages jp writes.
pub const PROTO_VERSION: &str = "1.10.0";

/// The instrumentation scope's name on every profile jp writes.
pub const SCOPE_NAME: &str = "jp";

/// The generated messages (prost), in modules named after their packages
/// (`opentelemetry.proto.*`) as the generated code refers to them.
pub mod proto {
    pub mod common {
        pub mod v1 {
            #![allow(clippy::all, clippy::pedantic)]
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.common.v1.rs"
            ));
        }
    }
    pub mod resource {
        pub mod v1 {
            #![allow(clippy::all, clippy::pedantic)]
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.resource.v1.rs"
            ));
        }
    }
    pub mod profiles {
        pub mod v1development {
            #![allow(clippy::all, clippy::pedantic)]
            include!(concat!(
                env!("OUT_DIR"),
                "/opentelemetry.proto.profiles.v1development.rs"
            ));
        }
    }
}

/// A resource attribute with a string value.
pub fn string_attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
    }
}

/// A resource attribute with an integer value.
pub fn int_attribute(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
    }
}

/// Adds the tree's profiles to `builder` as one resource; returns how many contexts were
/// deeper than [`crate::MAX_STACK_FRAMES`] and went into folded samples (as in pprof).
pub fn add_mct(
    builder: &mut OtlpBuilder,
    t: &Mct,
    options: PprofOptions<'_>,
    resource: Vec<KeyValue>,
) -> u64 {
    let (profile, folded) = mct_profile(t, options);
    builder.add(resource, &profile);
    folded
}

/// Writes the tree's profiles as one resource in a `ProfilesData` message (not
/// compressed); returns the contexts folded below the depth cap.
pub fn write_otlp(
    t: &Mct,
    options: PprofOptions<'_>,
    resource: Vec<KeyValue>,
    w: &mut dyn Write,
) -> io::Result<u64> {
    let mut builder = OtlpBuilder::default();
    let folded = add_mct(&mut builder, t, options, resource);
    w.write_all(&prost::Message::encode_to_vec(&builder.finish()))?;
    Ok(folded)
}

#[cfg(test)]
mod tests;
