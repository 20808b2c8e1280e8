//! Reading the USDT ring buffer: each item is a kernel-filled [`EventHeader`] and, if
//! its status is [`EVENT_OK`], the record bytes the probe fired. Items go to the sink
//! in batches, under one lock per batch held at most [`MAX_HOLD`]. Nothing in the
//! ring can panic the reader.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aya::maps::{MapData, RingBuf};
use jp_common::wire::{EventHeader, EVENT_HEADER_LEN, EVENT_OK};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::liveness::fault::{self, Fault};
use crate::liveness::{Heartbeat, RING_READER};
use crate::lock::lock;
use crate::store::jvm::sink::RecordSink;

/// Most items handed to the sink under one lock.
pub const BATCH: usize = 1024;

/// Longest the reader holds the sink's lock: a batch that takes longer ends early and
/// the rest of the ring is read after yielding to other tasks. The JVM store's
/// mutex is also what gRPC calls, Watch streams and the exporters wait on; a full
/// batch of big tree records could otherwise hold them up for many milliseconds.
pub const MAX_HOLD: Duration = Duration::from_millis(1);

/// How long the reader waits after draining before it listens for the ring again.
/// The kernel wakes a waiting reader for the first record after it caught up, so a
/// reader that always waits is woken once per record when records trickle in from many
/// threads: bench fleet (1000 reporting threads) measured most of jpd's CPU in those
/// context switches. Waiting a few milliseconds first lets records gather and bounds the
/// wake-ups to a few hundred a second, for at most this much added delay.
pub const COALESCE: Duration = Duration::from_millis(5);

/// Longest the reader waits for the ring before it beats its heartbeat anyway: on an
/// idle host no record comes, and quiet must not look stuck to the watchdog.
pub const IDLE_BEAT: Duration = Duration::from_secs(1);

/// What the reader has seen.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Items handed to the sink.
    pub items: AtomicU64,
    /// Record bytes handed to the sink.
    pub bytes: AtomicU64,
    /// Items shorter than an event header (never written by jp's program).
    pub malformed: AtomicU64,
    /// Batches (sink locks).
    pub batches: AtomicU64,
}

/// Splits one ring item. The record is empty unless the status is [`EVENT_OK`], and
/// never longer than what the item holds.
pub fn split_event(item: &[u8]) -> Option<(EventHeader, &[u8])> {
    let head = item.get(..EVENT_HEADER_LEN)?;
    let u32_at = |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    let header = EventHeader {
        tgid: u32_at(0),
        tid: u32_at(4),
        ktime_ns: u64::from(u32_at(8)) | u64::from(u32_at(12)) << 32,
        len: u32_at(16),
        status: u32_at(20),
    };
    let rest = &item[EVENT_HEADER_LEN..];
    let record = if header.status == EVENT_OK {
        let len = usize::try_from(header.len).unwrap_or(usize::MAX);
        &rest[..len.min(rest.len())]
    } else {
        &[]
    };
    Some((header, record))
}

/// What one [`drain_batch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Items consumed from the ring.
    pub items: usize,
    /// It stopped before the ring was empty (at `max` items, or after holding the
    /// lock for [`MAX_HOLD`]): there may be more to read.
    pub more: bool,
}

/// Hands up to `max` items to the sink, locking it once (and not at all if the ring
/// is empty), and for no longer than `max_hold` plus one item.
pub fn drain_batch<S: RecordSink + ?Sized>(
    ring: &mut RingBuf<MapData>,
    sink: &Mutex<S>,
    max: usize,
    max_hold: Duration,
    stats: &ReaderStats,
) -> Drained {
    let mut guard = None;
    let mut locked_at = None;
    let now = SystemTime::now();
    let mut n = 0;
    let mut bytes = 0u64;
    let mut more = false;
    while n < max {
        let Some(item) = ring.next() else { break };
        n += 1;
        match split_event(&item) {
            Some((header, record)) => {
                bytes += record.len() as u64;
                guard
                    .get_or_insert_with(|| {
                        locked_at = Some(Instant::now());
                        lock(sink)
                    })
                    .ingest(&header, record, now);
            }
            None => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
            }
        }
        if locked_at.is_some_and(|t: Instant| t.elapsed() >= max_hold) {
            more = true;
            break;
        }
    }
    drop(guard);
    if n > 0 {
        stats.items.fetch_add(n as u64, Ordering::Relaxed);
        stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
    }
    Drained {
        items: n,
        more: more || n == max,
    }
}

/// Reads the ring until the task is aborted, waking on the ring's epoll readiness (or
/// after [`IDLE_BEAT`] without any, to beat). The heartbeat ends with the task: a
/// reader that returns, panics or is cancelled is seen gone by the watchdog.
pub async fn run<S: RecordSink + ?Sized>(
    ring: RingBuf<MapData>,
    sink: Arc<Mutex<S>>,
    stats: Arc<ReaderStats>,
) {
    let heartbeat = Heartbeat::register(RING_READER, IDLE_BEAT);
    if fault::injected(Fault::RingReaderExit) {
        log::error!("{}: the USDT ring reader ends now", fault::ENV);
        heartbeat.end("injected fault ring_reader_exit");
        return;
    }
    // SAFETY: the ring buffer owns its map fd, which stays open and unchanged until
    // the RingBuf is dropped, and the AsyncFd owns the RingBuf.
    let registered = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) };
    let mut fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            log::error!("USDT ring buffer cannot be polled: {e}; no JVM records will arrive");
            heartbeat.end("the ring buffer cannot be polled");
            return;
        }
    };
    loop {
        heartbeat.beat();
        let mut guard = match tokio::time::timeout(IDLE_BEAT, fd.readable_mut()).await {
            Err(_idle) => continue,
            Ok(Ok(g)) => g,
            Ok(Err(e)) => {
                log::error!("USDT ring buffer poll failed: {e}; no JVM records will arrive");
                heartbeat.end("the ring buffer poll failed");
                return;
            }
        };
        // Drain everything before clearing readiness: the kernel wakes us only when
        // we had caught up.
        while drain_batch(guard.get_inner_mut(), &sink, BATCH, MAX_HOLD, &stats).more {
            heartbeat.beat();
            // Let other tasks (and the lock's waiters) run between batches.
            tokio::task::yield_now().await;
        }
        guard.clear_ready();
        drop(guard);
        tokio::time::sleep(COALESCE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jp_common::wire::{EVENT_FAULT, EVENT_TOO_LONG};

    fn item(tgid: u32, len: u32, status: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&tgid.to_le_bytes());
        v.extend_from_slice(&(tgid + 1).to_le_bytes());
        v.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&status.to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn items_split_into_header_and_bounded_record() {
        let ok = item(7, 3, EVENT_OK, b"abc");
        let (h, r) = split_event(&ok).unwrap();
        assert_eq!(
            (h.tgid, h.tid, h.ktime_ns, h.len),
            (7, 8, 0x1122_3344_5566_7788, 3)
        );
        assert_eq!(r, b"abc");
        // A header claiming more than the item holds gets what is there.
        let short = item(7, 1000, EVENT_OK, b"ab");
        assert_eq!(split_event(&short).unwrap().1, b"ab");
        // Fewer bytes claimed than present (ring padding): only those.
        let padded = item(7, 1, EVENT_OK, b"abcdefgh");
        assert_eq!(split_event(&padded).unwrap().1, b"a");
        for status in [EVENT_TOO_LONG, EVENT_FAULT, 99] {
            let e = item(7, 5, status, b"hello");
            let (h, r) = split_event(&e).unwrap();
            assert_eq!(h.status, status);
            assert!(r.is_empty());
        }
        assert!(split_event(&ok[..EVENT_HEADER_LEN - 1]).is_none());
        assert!(split_event(&[]).is_none());
    }
}
