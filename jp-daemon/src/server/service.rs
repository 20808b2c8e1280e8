//! The `jp.v1.Jp` service over the stores (kernel and JVM).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use jp_proto::v1 as pb;
use jp_proto::v1::jp_server::Jp;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::caller::{self, AddressView, Caller};
use super::heavy;
use super::jvm as jvmconv;
use super::jvm_watch::JvmWatch;
use super::kernel;
use super::kernel_watch::{interval, WatchState};
use super::watch_quota::WatchQuota;
use super::windows as winconv;
use super::Api;
use crate::store::jvm::idle::{self, IdlePatterns};
use crate::store::jvm::{JvmSnapshot, JvmSummary, SharedJvmStore};
use crate::store::kernel::KernelStore;
use crate::store::read::{ReadJvm, ReadWindows};
use crate::store::windows::SharedWindowStore;
use crate::windows::Windows;

pub struct JpService {
    store: Arc<KernelStore>,
    jvm: SharedJvmStore,
    window_store: SharedWindowStore,
    windows: Option<Windows>,
    started: Instant,
    started_at: SystemTime,
    /// Becomes true when jpd shuts down: Watch streams end so that the server's
    /// graceful shutdown does not wait for them forever.
    stopping: watch::Receiver<bool>,
    watch_quota: WatchQuota,
    otlp_attributes: crate::export::operator_attributes::OperatorAttributes,
}

impl JpService {
    pub fn new(api: Api, stopping: watch::Receiver<bool>) -> JpService {
        let sources = api.sources;
        JpService {
            store: sources.kernel,
            jvm: sources.jvm,
            window_store: sources.windows,
            windows: api.windows,
            started: Instant::now(),
            started_at: SystemTime::now(),
            stopping,
            watch_quota: WatchQuota::new(api.watch_limits),
            otlp_attributes: api.otlp_attributes,
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchUpdate, Status>> + Send>>;
type ExportStream = Pin<Box<dyn Stream<Item = Result<pb::JvmExportChunk, Status>> + Send>>;
type WindowStream = Pin<Box<dyn Stream<Item = Result<pb::JvmWindowProfile, Status>> + Send>>;

/// A window's answer as a stream of its messages (built on a blocking thread).
async fn window_stream(
    w: Arc<crate::windows::WindowProfile>,
    format: Option<pb::JvmExportFormat>,
    otlp_extra: BTreeMap<String, String>,
) -> Result<WindowStream, Status> {
    let messages = heavy::run(move |_| winconv::answer(&w, format, &otlp_extra)).await?;
    Ok(Box::pin(tokio_stream::iter(messages.into_iter().map(Ok))))
}

/// The JVM's summary and snapshot at one moment; trees are built from the snapshot
/// (frozen, see `store::read`). NOT_FOUND if the store holds no such pid.
fn jvm_snapshot(jvm: &SharedJvmStore, pid: u32) -> Result<(JvmSummary, JvmSnapshot), Status> {
    jvm.summary_and_snapshot(pid)
        .map_err(|held| jvmconv::not_found(pid, &held))
}

/// The idle patterns a view of off-CPU time applies (jpd's and the request's), or
/// none when the caller asked to see everything.
fn idle_patterns(
    jvm: &SharedJvmStore,
    show_idle: bool,
    extra: &[String],
) -> Result<Option<IdlePatterns>, Status> {
    if show_idle {
        return Ok(None);
    }
    idle::check_patterns(extra).map_err(Status::invalid_argument)?;
    Ok(Some(jvm.with_store(|s| s.offcpu_idle().and(extra))))
}

/// The JVMs a Watch update announces, as an anonymous caller sees them.
fn redact_watch(update: &mut pb::WatchUpdate) {
    if let Some(jvm) = &mut update.jvm {
        jvm.new_jvms.iter_mut().for_each(caller::redact);
    }
}

/// Runs `f` on tokio's blocking pool: the calls that do not build a tree (listing
/// the host's JVMs, a JVM's kept windows), which [`heavy`] need not bound.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("the query failed: {e}")))?
}

#[tonic::async_trait]
impl Jp for JpService {
    async fn get_status(
        &self,
        req: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::Status>, Status> {
        let view = self.store.kernel_view();
        let addresses = AddressView::for_caller(&Caller::of(&req), kernel::text_range(&view).0);
        let mut status = kernel::status(&view, env!("CARGO_PKG_VERSION"), self.started.elapsed());
        status.jvm = Some(jvmconv::status(&self.jvm.stats()));
        status.refusals = crate::refusals::snapshot()
            .into_iter()
            .map(|(what, count)| pb::Refusal {
                subsystem: what.subsystem.to_string(),
                reason: what.reason.to_string(),
                count,
            })
            .collect();
        status.subsystems = crate::liveness::check()
            .into_iter()
            .map(|h| pb::SubsystemHealth {
                name: h.part.0.to_string(),
                idle_ms: u64::try_from(h.idle.as_millis()).unwrap_or(u64::MAX),
                stuck: h.stuck,
                detail: h.detail,
            })
            .collect();
        addresses.status(&mut status);
        Ok(Response::new(status))
    }

    async fn get_kernel_profile(
        &self,
        req: Request<pb::GetKernelProfileRequest>,
    ) -> Result<Response<pb::KernelProfile>, Status> {
        let caller = Caller::of(&req);
        let req = req.into_inner();
        if pb::ProfileSource::try_from(req.source).is_err() {
            return Err(Status::invalid_argument(format!(
                "unknown profile source {}",
                req.source
            )));
        }
        if req.otlp && req.source != pb::ProfileSource::Timer as i32 {
            return Err(Status::invalid_argument(
                "OTLP profiles are of the timer source only",
            ));
        }
        let view = self.store.kernel_view();
        let mut profile = kernel::kernel_profile_message(&view, &req);
        AddressView::for_caller(&caller, kernel::text_range(&view).0).kernel_profile(&mut profile);
        if req.otlp {
            let start = view.reset_at.unwrap_or(self.started_at);
            let extra = self.otlp_attributes.get();
            profile.otlp =
                crate::export::otlp::kernel_message(&view, start, SystemTime::now(), &extra)
                    .ok_or_else(|| Status::unavailable("kernel symbols are not loaded yet"))?;
        }
        Ok(Response::new(profile))
    }

    async fn get_irq_stats(
        &self,
        req: Request<pb::GetIrqStatsRequest>,
    ) -> Result<Response<pb::IrqStats>, Status> {
        let view = self.store.kernel_view();
        let mut stats = kernel::irq_stats(&view);
        AddressView::for_caller(&Caller::of(&req), kernel::text_range(&view).0)
            .irq_stats(&mut stats);
        Ok(Response::new(stats))
    }

    async fn reset(
        &self,
        _: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        self.store.reset();
        let at = self.store.kernel_view().reset_at;
        log::info!("counts reset by a client");
        Ok(Response::new(pb::ResetResponse {
            reset_unix_ms: kernel::unix_ms(at),
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = Caller::of(&req);
        let slot = self.watch_quota.acquire(caller.quota_key())?;
        let period = interval(req.into_inner().interval_ms);
        let (tx, rx) = mpsc::channel(4);
        let store = Arc::clone(&self.store);
        let jvm = Arc::clone(&self.jvm);
        let mut stopping = self.stopping.clone();
        let started_at = self.started_at;
        tokio::spawn(async move {
            // The stream's place in the quota, freed when the stream ends.
            let _slot = slot;
            let mut state = WatchState::new(started_at);
            let mut jvm_state = JvmWatch::default();
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                if *stopping.borrow() {
                    break;
                }
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stopping.changed() => break,
                    _ = tx.closed() => break,
                }
                let view = store.kernel_view();
                let mut update = state.next(&view, Instant::now());
                AddressView::for_caller(&caller, kernel::text_range(&view).0)
                    .watch_update(&mut update);
                // Off the runtime's threads: a big JVM's method totals take a while.
                let shared = Arc::clone(&jvm);
                let (delta, back) = match tokio::task::spawn_blocking(move || {
                    let d = shared.with_store(|store| jvm_state.next(store, Instant::now()));
                    (d, jvm_state)
                })
                .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        let msg = format!("the JVM part of the update failed: {e}");
                        let _ = tx.send(Err(Status::internal(msg))).await;
                        break;
                    }
                };
                jvm_state = back;
                update.jvm = delta;
                if caller.anonymous() {
                    redact_watch(&mut update);
                }
                if tx.send(Ok(update)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_jvms(
        &self,
        req: Request<pb::ListJvmsRequest>,
    ) -> Result<Response<pb::JvmList>, Status> {
        let anonymous = Caller::of(&req).anonymous();
        let held = jvmconv::list(&self.jvm.list());
        let mut list = if req.into_inner().all {
            let hotspot = blocking(|| Ok(crate::windows::hotspot::list_hotspot_jvms())).await?;
            super::jvm_hotspot::list_all(held, &hotspot)
        } else {
            held
        };
        if anonymous {
            list.jvms.iter_mut().for_each(caller::redact);
        }
        Ok(Response::new(list))
    }

    async fn get_jvm_profile(
        &self,
        req: Request<pb::GetJvmProfileRequest>,
    ) -> Result<Response<pb::JvmProfile>, Status> {
        let anonymous = Caller::of(&req).anonymous();
        let req = req.into_inner();
        jvmconv::check_profile_request(&req)?;
        let idle = idle_patterns(&self.jvm, req.show_idle, &req.idle)?;
        let jvm = Arc::clone(&self.jvm);
        let mut profile = heavy::run(move |cancelled| {
            let (summary, mut snapshot) = jvm_snapshot(&jvm, req.pid)?;
            let hidden = idle.map_or(0, |p| snapshot.hide_idle_offcpu(&p));
            cancelled.check()?;
            let tree = snapshot.mct();
            cancelled.check()?;
            let times = snapshot
                .cpu()
                .map_or_else(Default::default, |c| jvmconv::NodeTimes {
                    cpu: c.self_ns(tree.nodes.len()),
                    offcpu: c.offcpu_self_ns(tree.nodes.len()),
                });
            cancelled.check()?;
            let mut profile =
                jvmconv::profile(&summary, &tree, &times, req.max_depth, req.min_share);
            profile.offcpu_idle_hidden_ns = hidden;
            Ok(profile)
        })
        .await?;
        if anonymous {
            profile.jvm.iter_mut().for_each(caller::redact);
        }
        Ok(Response::new(profile))
    }

    async fn get_jvm_top(
        &self,
        req: Request<pb::GetJvmTopRequest>,
    ) -> Result<Response<pb::JvmTop>, Status> {
        let anonymous = Caller::of(&req).anonymous();
        let req = req.into_inner();
        let order = pb::JvmTopOrder::try_from(req.order)
            .map_err(|_| Status::invalid_argument(format!("unknown order {}", req.order)))?;
        let idle = idle_patterns(&self.jvm, req.show_idle, &req.idle)?;
        let jvm = Arc::clone(&self.jvm);
        let mut top = heavy::run(move |cancelled| {
            let (summary, mut snapshot) = jvm_snapshot(&jvm, req.pid)?;
            let hidden = idle.map_or(0, |p| snapshot.hide_idle_offcpu(&p));
            cancelled.check()?;
            // The inclusive counts need a walk of the tree: after the lock.
            let methods = snapshot.top_methods();
            cancelled.check()?;
            let mut top = jvmconv::top(&summary, methods, order, req.limit);
            top.offcpu_idle_hidden_ns = hidden;
            Ok(top)
        })
        .await?;
        if anonymous {
            top.jvm.iter_mut().for_each(caller::redact);
        }
        Ok(Response::new(top))
    }

    type ExportJvmProfileStream = ExportStream;

    async fn export_jvm_profile(
        &self,
        req: Request<pb::ExportJvmProfileRequest>,
    ) -> Result<Response<Self::ExportJvmProfileStream>, Status> {
        let req = req.into_inner();
        let format = pb::JvmExportFormat::try_from(req.format)
            .map_err(|_| Status::invalid_argument(format!("unknown format {}", req.format)))?;
        let idle = idle_patterns(&self.jvm, req.show_idle, &req.idle)?;
        let jvm = Arc::clone(&self.jvm);
        let symbols = self.store.symbols();
        let otlp_extra = self.otlp_attributes.get();
        let chunks = heavy::run(move |cancelled| {
            let (summary, mut snapshot) = jvm_snapshot(&jvm, req.pid)?;
            let hidden = idle.map_or(0, |p| snapshot.hide_idle_offcpu(&p));
            cancelled.check()?;
            let tree = snapshot.mct();
            cancelled.check()?;
            let cpu = snapshot.cpu().map(|c| c.mct_cpu(&tree, symbols.as_deref()));
            cancelled.check()?;
            let data = jvmconv::export(
                &tree,
                cpu.as_ref(),
                format,
                Some((&summary).into()),
                &otlp_extra,
            )
            .map_err(|e| Status::internal(format!("cannot write the profile: {e}")))?;
            let mut chunks = jvmconv::chunks(&data);
            if let Some(last) = chunks.last_mut() {
                last.offcpu_idle_hidden_ns = hidden;
            }
            Ok(chunks)
        })
        .await?;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            chunks.into_iter().map(Ok),
        ))))
    }

    type ProfileJvmStream = WindowStream;

    async fn profile_jvm(
        &self,
        req: Request<pb::ProfileJvmRequest>,
    ) -> Result<Response<Self::ProfileJvmStream>, Status> {
        let (request, format) = winconv::request(&req.into_inner())?;
        let windows = self
            .windows
            .clone()
            .ok_or_else(|| Status::unavailable("jpd runs without its windows service"))?;
        let (tx, rx) = mpsc::channel(4);
        let mut stopping = self.stopping.clone();
        let otlp_extra = self.otlp_attributes.get();
        // The answer comes after the window's seconds: a stream, whose messages the
        // server's time limit on one answer does not cut.
        tokio::spawn(async move {
            let stopped = async move {
                let _ = stopping.wait_for(|s| *s).await;
            };
            let window = tokio::select! {
                r = windows.profile(request) => Some(r),
                () = stopped => None,
            };
            let answer = match window {
                Some(Ok(w)) => window_stream(w, format, otlp_extra).await,
                Some(Err(e)) => Err(winconv::status(e)),
                None => Err(Status::unavailable(
                    "jpd is stopping: the window goes on in the JVM and ends at its deadline",
                )),
            };
            match answer {
                Ok(mut messages) => {
                    while let Some(m) = tokio_stream::StreamExt::next(&mut messages).await {
                        if tx.send(m).await.is_err() {
                            break;
                        }
                    }
                }
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_jvm_windows(
        &self,
        req: Request<pb::ListJvmWindowsRequest>,
    ) -> Result<Response<pb::JvmWindowList>, Status> {
        let pid = req.into_inner().pid;
        let kept = self.window_store.windows(pid);
        let list = blocking(move || {
            Ok(pb::JvmWindowList {
                windows: kept.iter().map(|w| winconv::window(w)).collect(),
            })
        })
        .await?;
        Ok(Response::new(list))
    }

    type GetJvmWindowStream = WindowStream;

    async fn get_jvm_window(
        &self,
        req: Request<pb::GetJvmWindowRequest>,
    ) -> Result<Response<Self::GetJvmWindowStream>, Status> {
        let req = req.into_inner();
        let format = winconv::format(req.format)?;
        let w = self
            .window_store
            .window(req.pid, req.id)
            .ok_or_else(|| winconv::not_found(req.pid, req.id))?;
        Ok(Response::new(
            window_stream(w, format, self.otlp_attributes.get()).await?,
        ))
    }
}
