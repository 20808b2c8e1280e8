//! The `jp.v1.Jp` service over the store.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use jp_proto::v1 as pb;
use jp_proto::v1::jp_server::Jp;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert;
use super::watch::{interval, WatchState};
use crate::store::Store;

pub struct JpService {
    store: Arc<Store>,
    started: Instant,
    started_at: SystemTime,
    /// Becomes true when jpd shuts down: Watch streams end so that the server's
    /// graceful shutdown does not wait for them forever.
    stopping: watch::Receiver<bool>,
}

impl JpService {
    pub fn new(store: Arc<Store>, stopping: watch::Receiver<bool>) -> JpService {
        JpService {
            store,
            started: Instant::now(),
            started_at: SystemTime::now(),
            stopping,
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl Jp for JpService {
    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::Status>, Status> {
        let view = self.store.kernel_view();
        Ok(Response::new(convert::status(
            &view,
            env!("CARGO_PKG_VERSION"),
            self.started.elapsed(),
        )))
    }

    async fn get_kernel_profile(
        &self,
        req: Request<pb::GetKernelProfileRequest>,
    ) -> Result<Response<pb::KernelProfile>, Status> {
        let req = req.into_inner();
        if pb::ProfileSource::try_from(req.source).is_err() {
            return Err(Status::invalid_argument(format!(
                "unknown profile source {}",
                req.source
            )));
        }
        let view = self.store.kernel_view();
        Ok(Response::new(convert::kernel_profile(&view, &req)))
    }

    async fn get_irq_stats(
        &self,
        _: Request<pb::GetIrqStatsRequest>,
    ) -> Result<Response<pb::IrqStats>, Status> {
        Ok(Response::new(convert::irq_stats(&self.store.kernel_view())))
    }

    async fn reset(
        &self,
        _: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        self.store.reset();
        let at = self.store.kernel_view().reset_at;
        log::info!("counts reset by a client");
        Ok(Response::new(pb::ResetResponse {
            reset_unix_ms: convert::unix_ms(at),
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let period = interval(req.into_inner().interval_ms);
        let (tx, rx) = mpsc::channel(4);
        let store = Arc::clone(&self.store);
        let mut stopping = self.stopping.clone();
        let started_at = self.started_at;
        tokio::spawn(async move {
            let mut state = WatchState::new(started_at);
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
                let update = state.next(&store.kernel_view(), Instant::now());
                if tx.send(Ok(update)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
