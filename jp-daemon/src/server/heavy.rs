//! The calls that build a JVM's tree (profile, top, export, windows' answers) run
//! on tokio's blocking pool, a few at a time. The pool grows to hundreds of
//! threads, and each such call copies a tree that may take hundreds of MB: without
//! a bound, a burst of calls is a burst of threads and memory. A call waits a short
//! while for a place, then is refused with RESOURCE_EXHAUSTED (`grpc/busy`).
//!
//! A call's work stops when the call goes away (the client cancelled, the deadline
//! passed, the connection dropped): tonic drops the call's future, which raises its
//! [`Cancelled`] flag, and the work checks the flag between its stages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::Semaphore;
use tonic::Status;

use crate::refusals::{self, Refusal};

pub const BUSY: Refusal = Refusal::new("grpc", "busy");

/// Heavy calls at once: jpd's share of a host is a couple of CPUs.
pub const MAX_HEAVY_CALLS: usize = 4;
/// How long a heavy call waits for a place before it is refused.
pub const HEAVY_CALL_WAIT: Duration = Duration::from_secs(5);

static PLACES: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_HEAVY_CALLS)));

/// Raised when the call that started the work is gone.
#[derive(Clone, Default)]
pub struct Cancelled(Arc<AtomicBool>);

impl Cancelled {
    /// A CANCELLED status once the call is gone: the work's `?` between stages.
    pub fn check(&self) -> Result<(), Status> {
        if self.0.load(Ordering::Acquire) {
            return Err(Status::cancelled("jpd: the call went away"));
        }
        Ok(())
    }
}

/// Raises the flag when dropped with the call's future (after the work ended,
/// raising it changes nothing).
struct RaiseOnDrop(Cancelled);

impl Drop for RaiseOnDrop {
    fn drop(&mut self) {
        self.0 .0.store(true, Ordering::Release);
    }
}

/// Runs `f` on the blocking pool holding one of the places; `f` checks the flag
/// between its stages.
pub async fn run<T: Send + 'static>(
    f: impl FnOnce(&Cancelled) -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    run_within(&PLACES, HEAVY_CALL_WAIT, f).await
}

async fn run_within<T: Send + 'static>(
    places: &Arc<Semaphore>,
    wait: Duration,
    f: impl FnOnce(&Cancelled) -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    let place = match tokio::time::timeout(wait, Arc::clone(places).acquire_owned()).await {
        Ok(Ok(place)) => place,
        Ok(Err(_)) | Err(_) => {
            refusals::count(BUSY, 1);
            return Err(Status::resource_exhausted(format!(
                "jpd: {MAX_HEAVY_CALLS} profile calls are in progress; try again later"
            )));
        }
    };
    let cancelled = Cancelled::default();
    let _raise = RaiseOnDrop(cancelled.clone());
    let work = tokio::task::spawn_blocking(move || {
        // The place is held until the work ends, also when the call went away.
        let _place = place;
        f(&cancelled)
    });
    work.await
        .map_err(|e| Status::internal(format!("the query failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_and_cancelled_with_the_call() {
        let places = Arc::new(Semaphore::new(1));
        let (started_tx, started) = std::sync::mpsc::channel();
        let (stages_tx, stages) = std::sync::mpsc::channel::<u32>();
        let (go_tx, go) = std::sync::mpsc::channel::<()>();
        let p = Arc::clone(&places);
        let call = tokio::spawn(async move {
            run_within(&p, Duration::from_secs(5), move |c| {
                started_tx.send(()).unwrap();
                for stage in 0..100 {
                    go.recv().unwrap();
                    c.check()?;
                    stages_tx.send(stage).unwrap();
                }
                Ok(())
            })
            .await
        });
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();
        // The one place is taken: the next call is refused after its wait.
        let busy = refusals::get(BUSY);
        let e = run_within(&places, Duration::from_millis(50), |_| Ok(()))
            .await
            .err()
            .unwrap();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(refusals::get(BUSY) - busy, 1);
        go_tx.send(()).unwrap();
        assert_eq!(stages.recv().unwrap(), 0);
        // The call goes away: its work stops at the next stage.
        call.abort();
        let _ = call.await;
        go_tx.send(()).unwrap();
        assert!(stages.recv().is_err(), "no stage after the cancellation");
        // And its place is free again.
        assert_eq!(
            run_within(&places, Duration::from_secs(5), |_| Ok(7))
                .await
                .unwrap(),
            7
        );
    }
}
