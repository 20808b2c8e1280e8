//! The cap on profile and flame-graph requests in progress (`export.max_inflight`).
//! Each of them holds a tree, or sleeps through its window with a snapshot held;
//! without a cap, a local user asking for a few hundred long profiles at once makes
//! jpd hold a few hundred snapshots. Over the cap a request is answered 503 at once
//! (`Retry-After: 1`) and counted, rather than queued: a queue would hold the same
//! connections and memory, only later.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::refusals::{self, Refusal};

pub const TOO_MANY_REQUESTS: Refusal = Refusal::new("http", "too_many_requests");

#[derive(Clone)]
pub struct Inflight {
    slots: Arc<Semaphore>,
    max: u64,
}

impl Inflight {
    pub fn new(max: u64) -> Inflight {
        Inflight {
            slots: Arc::new(Semaphore::new(usize::try_from(max).unwrap_or(usize::MAX))),
            max,
        }
    }
}

/// The middleware: the request runs holding one of the slots, or is refused.
pub async fn limit(State(inflight): State<Inflight>, req: Request, next: Next) -> Response {
    let Ok(_slot) = inflight.slots.try_acquire() else {
        refusals::count(TOO_MANY_REQUESTS, 1);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            format!(
                "jpd: {} profile requests are in progress (export.max_inflight); try again later\n",
                inflight.max
            ),
        )
            .into_response();
    };
    next.run(req).await
}
