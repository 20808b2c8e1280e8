//! OTLP profiles (opentelemetry-proto v1.10.0, `v1development`): the exporter of
//! `[otlp]` ([`push`], [`transport`]), and what jpd writes for `jpctl jvm export
//! --format otlp` and `jpctl kernel --format otlp`, with the resources of [`resource`].
//! The encoding is jp-mct's ([`jp_mct::otlp`]).

pub mod config;
pub mod push;
pub mod resource;
mod transport;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::SystemTime;

use jp_mct::{Mct, PprofOptions};

use super::kernel_pprof;
use super::mct_pprof::DEPTH_CAPPED;
use super::pyroscope::host_name;
use crate::refusals;
use crate::store::kernel::KernelView;
pub use resource::JvmIdentity;

/// A JVM's tree as a `ProfilesData` message, its resource [`resource::jvm_resource`]
/// with the operator's `extra` attributes (without a JVM: `host.name` alone). Contexts
/// folded below the depth cap are counted as pprof's are.
pub fn write_mct(
    t: &Mct,
    options: PprofOptions<'_>,
    jvm: Option<JvmIdentity<'_>>,
    extra: &BTreeMap<String, String>,
    w: &mut dyn Write,
) -> io::Result<()> {
    let host = host_name();
    let resource = match jvm {
        Some(id) => resource::jvm_resource(id, &host, extra),
        None => vec![jp_mct::otlp::string_attribute("host.name", &host)],
    };
    let folded = jp_mct::otlp::write_otlp(t, options, resource, w)?;
    refusals::count(DEPTH_CAPPED, folded);
    Ok(())
}

/// The kernel samples of `view` (counted since `start`) as a `ProfilesData` message, the
/// kernel's resource with the operator's `extra` attributes; `None` before the kernel
/// symbols are loaded.
pub fn kernel_message(
    view: &KernelView,
    start: SystemTime,
    now: SystemTime,
    extra: &BTreeMap<String, String>,
) -> Option<Vec<u8>> {
    let symbols = view.symbols.as_ref()?;
    let p = kernel_pprof::window_profile(&view.counts, &view.status, symbols, start, now);
    let mut builder = jp_mct::otlp::OtlpBuilder::default();
    builder.add(resource::kernel_resource(&host_name(), extra), &p);
    Some(prost::Message::encode_to_vec(&builder.finish()))
}
