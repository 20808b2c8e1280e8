//! jpctl's commands, one module each: its arguments, the calls to jpd, and which of
//! [`crate::output`]'s renderings goes to which [`destination::Destination`]. `top` is
//! the live view in [`crate::top`]; `diff` reads files and needs no jpd.

pub mod destination;
pub mod diff;
pub mod export_format;
pub mod irq;
pub mod jvm;
pub mod kernel;
pub mod reset;
pub mod status;
pub mod top;
pub mod window;

use crate::client::status_message;

/// A failed RPC as the error the command ends with.
pub(crate) fn rpc(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!(status_message(&s))
}
