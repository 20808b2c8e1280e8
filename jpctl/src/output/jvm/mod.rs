//! What `jpctl jvm list|top|tree|export` print, one module per view; [`summary`] is the
//! JVM's summary they all show. Pure functions; `now_ms` is passed in so that outputs are
//! exact.

pub mod export;
pub mod list;
pub mod summary;
pub mod top;
pub mod tree;
pub mod window;
