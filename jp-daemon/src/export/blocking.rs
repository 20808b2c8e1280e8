//! The exporters' heavy work, building a profile's tree or a flame page and
//! gzipping it, runs on tokio's blocking pool. jpd's runtime has two threads: a
//! big JVM's tree built on one of them would stall the gRPC server, the ring
//! readers and every other HTTP request for as long as it takes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `work`'s response, computed off the runtime's threads.
pub async fn off_runtime(work: impl FnOnce() -> Response + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(work).await {
        Ok(response) => response,
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("building the response failed: {e}\n"),
        )
            .into_response(),
    }
}
