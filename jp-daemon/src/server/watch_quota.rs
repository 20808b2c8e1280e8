//! Watch streams per caller and in all. A Watch stream is a task, a queue of
//! updates and a walk of the JVM store every interval; HTTP/2 bounds the streams
//! of one connection only, so one local user opening connections could hold any
//! number. Over either cap a new stream is refused with RESOURCE_EXHAUSTED.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

use super::caller::QuotaKey;
use crate::lock::lock;
use crate::refusals::{self, Refusal};

pub const WATCH_QUOTA: Refusal = Refusal::new("grpc", "watch_quota");

/// `server.max_watch_streams_per_uid` and `server.max_watch_streams`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchLimits {
    pub per_caller: usize,
    pub total: usize,
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits::from(&super::config::ServerConfig::default())
    }
}

impl From<&super::config::ServerConfig> for WatchLimits {
    fn from(s: &super::config::ServerConfig) -> Self {
        WatchLimits {
            per_caller: usize::try_from(s.max_watch_streams_per_uid).unwrap_or(usize::MAX),
            total: usize::try_from(s.max_watch_streams).unwrap_or(usize::MAX),
        }
    }
}

#[derive(Default)]
struct Open {
    by_caller: HashMap<QuotaKey, usize>,
    total: usize,
}

/// The streams open now.
#[derive(Clone, Default)]
pub struct WatchQuota {
    limits: WatchLimits,
    open: Arc<Mutex<Open>>,
}

/// One open stream; dropping it (the stream's task ends) frees its place.
pub struct WatchSlot {
    key: QuotaKey,
    open: Arc<Mutex<Open>>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_caller.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_caller.remove(&self.key);
            }
        }
    }
}

impl WatchQuota {
    pub fn new(limits: WatchLimits) -> WatchQuota {
        WatchQuota {
            limits,
            open: Arc::default(),
        }
    }

    /// A place for one more stream of `key`'s, or the refusal.
    pub fn acquire(&self, key: QuotaKey) -> Result<WatchSlot, Status> {
        let mut open = lock(&self.open);
        let mine = open.by_caller.get(&key).copied().unwrap_or(0);
        let refused = if mine >= self.limits.per_caller {
            Some(format!(
                "jpd: this caller has {mine} Watch streams open (server.max_watch_streams_per_uid); close one first"
            ))
        } else if open.total >= self.limits.total {
            Some(format!(
                "jpd: {} Watch streams are open (server.max_watch_streams); try again later",
                open.total
            ))
        } else {
            None
        };
        if let Some(message) = refused {
            refusals::count(WATCH_QUOTA, 1);
            return Err(Status::resource_exhausted(message));
        }
        open.total += 1;
        *open.by_caller.entry(key.clone()).or_insert(0) += 1;
        Ok(WatchSlot {
            key,
            open: Arc::clone(&self.open),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_caller_and_total() {
        let q = WatchQuota::new(WatchLimits {
            per_caller: 2,
            total: 3,
        });
        let before = refusals::get(WATCH_QUOTA);
        let a1 = q.acquire(QuotaKey::Uid(1000)).unwrap();
        let _a2 = q.acquire(QuotaKey::Uid(1000)).unwrap();
        let e = q.acquire(QuotaKey::Uid(1000)).err().unwrap();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            e.message(),
            "jpd: this caller has 2 Watch streams open (server.max_watch_streams_per_uid); close one first"
        );
        let _b1 = q.acquire(QuotaKey::Uid(0)).unwrap();
        let e = q.acquire(QuotaKey::Uid(0)).err().unwrap();
        assert_eq!(
            e.message(),
            "jpd: 3 Watch streams are open (server.max_watch_streams); try again later"
        );
        assert_eq!(refusals::get(WATCH_QUOTA) - before, 2);
        drop(a1);
        let _a3 = q.acquire(QuotaKey::Uid(1000)).unwrap();
        assert_eq!(refusals::get(WATCH_QUOTA) - before, 2);
    }
}
