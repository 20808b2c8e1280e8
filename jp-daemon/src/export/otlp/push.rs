//! Exports profiles to an OTLP receiver on an interval (`[otlp]`), through the same
//! machinery as the Pyroscope pusher (`export::pyroscope`): per interval one request,
//! the kernel profile and each JVM's tree since its last export (the same baselines, so
//! the exported deltas of a JVM add up to its tree), queued within `max_backlog` /
//! `max_backlog_mb` (the oldest dropped and counted), delivered by a sender task with
//! exponential back-off. A receiver that is down, slow or answers garbage only grows the
//! queue: it never delays collection, the gRPC API or `/metrics`.
//!
//! One request carries every resource (the kernel's, one per JVM) and one dictionary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jp_mct::otlp::{add_mct, OtlpBuilder};
use jp_mct::pprof::Profile;
use jp_mct::{Mct, PprofOptions};
use prost::Message;

use super::config::{OtlpConfig, Protocol};
use super::resource::{jvm_resource, kernel_resource};
use super::transport::{GrpcClient, HttpClient};
use crate::export::mct_pprof::DEPTH_CAPPED;
use crate::export::pyroscope::collect::{collect_into, IntervalSink, Sources};
use crate::export::pyroscope::{host_name, CollectFn, PushPlan, Pusher};
use crate::export::ExportState;
use crate::refusals;
use crate::store::jvm::JvmSummary;

/// One interval's resources, into one builder.
struct Request<'a> {
    builder: OtlpBuilder,
    host: &'a str,
    extra: &'a BTreeMap<String, String>,
}

impl IntervalSink for Request<'_> {
    fn kernel(&mut self, p: &Profile) -> std::io::Result<()> {
        self.builder.add(kernel_resource(self.host, self.extra), p);
        Ok(())
    }

    fn jvm(
        &mut self,
        s: &JvmSummary,
        delta: &Mct,
        options: PprofOptions<'_>,
    ) -> std::io::Result<()> {
        let resource = jvm_resource(s.into(), self.host, self.extra);
        let folded = add_mct(&mut self.builder, delta, options, resource);
        refusals::count(DEPTH_CAPPED, folded);
        Ok(())
    }
}

/// Starts the exporter's tasks (inside a tokio runtime). Fails when the endpoint or
/// TLS cannot be set up; the message names the key.
pub fn start(cfg: &OtlpConfig, sources: ExportState) -> Result<Pusher, String> {
    let what = Sources {
        kernel: cfg.kernel,
        jvms: cfg.jvms,
    };
    let host = host_name();
    let extra = cfg.resource_attributes.clone();
    let collect: Arc<CollectFn> = Arc::new(move |sources, b, now| {
        let mut request = Request {
            builder: OtlpBuilder::default(),
            host: &host,
            extra: &extra,
        };
        collect_into(b, sources, what, now, &mut request);
        let profiles = request.builder.profiles() as u64;
        (profiles > 0).then(|| (request.builder.finish().encode_to_vec(), profiles))
    });
    let plan = PushPlan {
        who: "otlp",
        shared: Arc::clone(&sources.otlp),
        interval: Duration::from_secs(cfg.interval_s),
        max: cfg.max_backlog,
        max_bytes: usize::try_from(cfg.max_backlog_mb << 20).unwrap_or(usize::MAX),
    };
    Ok(match cfg.protocol {
        Protocol::Grpc => Pusher::spawn(plan, sources, GrpcClient::new(cfg)?, collect),
        Protocol::HttpProtobuf => Pusher::spawn(plan, sources, HttpClient::new(cfg)?, collect),
    })
}
