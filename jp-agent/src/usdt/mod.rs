//! The agent's side of the live view (`profiler=usdt`): the probe and control block
//! ([`probe`]), and the JVM stream (stream 0: hello, method table, end) that Rust builds
//! itself. Thread streams (and the ended threads' snapshot) are serialized by the Java
//! runtime (`jp.rt.UsdtProfiler`), which answers a new generation through
//! [`answer_generation`] first, and are fired through [`fire_thread_record`], which first
//! sends the methods registered since, so that a tracer always has the hello and every
//! method a tree names before the tree.
//!
//! `usdt_tap=FILE` ([`start_tap`]) pretends a tracer is attached and appends every fired
//! record to FILE behind its `u32` little-endian length.

pub mod probe;

use crate::methods::{self, MethodEntry};
use jp_common::wire::{self, MethodDef, Writer, MAX_RECORD};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Mutex, OnceLock};

use crate::sync::lock;

/// What the hello record says about the JVM; set once at VM init.
#[derive(Clone, Debug, Default)]
pub struct HelloInfo {
    pub start_time_ms: u64,
    pub granularity: u64,
    /// 0 default, 1 precise.
    pub bba: u64,
    pub jdk_version: String,
    pub main: String,
}

static HELLO: OnceLock<HelloInfo> = OnceLock::new();

pub fn set_hello_info(info: HelloInfo) {
    let _ = HELLO.set(info);
}

/// The JVM stream's sender state.
struct JvmStream {
    /// The control generation the last hello answered (None: no hello yet).
    answered: Option<u64>,
    seq: u32,
    /// Methods `0..methods_sent` went out since the last hello.
    methods_sent: usize,
    buf: Vec<u8>,
}

static JVM: Mutex<Option<JvmStream>> = Mutex::new(None);

static TAP: Mutex<Option<BufWriter<File>>> = Mutex::new(None);

/// `usdt_tap=FILE`: creates FILE (truncating it), sets the semaphore and generation 1 as
/// a tracer would. Call before any Java code can report.
pub fn start_tap(path: &str) -> Result<(), String> {
    let f = File::create(path).map_err(|e| format!("usdt_tap: cannot create {path}: {e}"))?;
    *lock(&TAP) = Some(BufWriter::with_capacity(1 << 16, f));
    probe::jp_record_semaphore
        .0
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    probe::jp_usdt_control.set_generation(1);
    Ok(())
}

/// Fires one record (and appends it to the tap file, if any).
fn emit(rec: &[u8]) {
    if let Some(tap) = lock(&TAP).as_mut() {
        let len = (rec.len() as u32).to_le_bytes();
        if tap
            .write_all(&len)
            .and_then(|_| tap.write_all(rec))
            .is_err()
        {
            crate::log::warn_once("usdt_tap: write failed; the tap file is incomplete");
        }
    }
    probe::fire(rec.as_ptr() as u64, rec.len() as u64);
}

/// Flushes the tap file (at VM death).
pub fn flush_tap() {
    if let Some(tap) = lock(&TAP).as_mut() {
        if tap.flush().is_err() {
            crate::log::warn_once("usdt_tap: write failed; the tap file is incomplete");
        }
    }
}

fn pid() -> u32 {
    std::process::id()
}

impl JvmStream {
    fn new() -> JvmStream {
        JvmStream {
            answered: None,
            seq: 0,
            methods_sent: 0,
            buf: vec![0; MAX_RECORD],
        }
    }

    /// Answers `generation`: HELLO, then the whole method table. The Java runtime calls this
    /// (through `Rt.usdtHello`) when it sees a generation it has not answered, and then sends
    /// the ended threads' snapshot, before any thread record of that generation.
    fn answer(&mut self, generation: u64, live_threads: u64) {
        self.answered = Some(generation);
        self.seq = 0;
        self.methods_sent = 0;
        self.hello(generation, live_threads);
        self.methods(generation);
    }

    /// Sends the methods registered since the last METHODS record (all of them, after a
    /// hello, if none was sent yet: the runtime always answers first, this is a fallback).
    fn catch_up(&mut self, live_threads: u64) {
        match self.answered {
            Some(generation) => self.methods(generation),
            None => self.answer(probe::jp_usdt_control.generation(), live_threads),
        }
    }

    fn next_header(&mut self, kind: u16, flags: u32, generation: u64) -> wire::RecordHeader {
        let h = wire::header(kind, pid(), generation, 0, self.seq, flags);
        self.seq = self.seq.wrapping_add(1);
        h
    }

    fn hello(&mut self, generation: u64, live_threads: u64) {
        let info = HELLO.get().cloned().unwrap_or_default();
        let h = self.next_header(
            wire::KIND_HELLO,
            wire::FLAG_RESYNC | wire::FLAG_ABSOLUTE,
            generation,
        );
        let Ok(mut w) = Writer::new(&mut self.buf, &h) else {
            return;
        };
        // Four varints and three strings of at most MAX_STRING each always fit.
        let r = (|| {
            for v in [info.start_time_ms, info.granularity, info.bba, live_threads] {
                w.varint(v)?;
            }
            w.string(info.jdk_version.as_bytes())?;
            w.string(info.main.as_bytes())?;
            w.string(env!("CARGO_PKG_VERSION").as_bytes())
        })();
        if r.is_ok() {
            emit(w.finish());
        }
    }

    fn methods(&mut self, generation: u64) {
        let table = methods::table();
        let Some(t) = table.as_ref() else {
            return;
        };
        while self.methods_sent < t.len() {
            let h = self.next_header(wire::KIND_METHODS, 0, generation);
            let Ok(mut w) = Writer::new(&mut self.buf, &h) else {
                return;
            };
            if w.begin_entries().is_err() {
                return;
            }
            let mut n = 0;
            while let Some(e) = t.get(self.methods_sent as i32) {
                if add_method(&mut w, self.methods_sent as u32, e, n == 0).is_err() {
                    break;
                }
                self.methods_sent += 1;
                n += 1;
            }
            if n == 0 {
                // Cannot happen (see add_method); never loop on it, and leave no seq gap.
                self.methods_sent += 1;
                self.seq = self.seq.wrapping_sub(1);
                continue;
            }
            emit(w.finish());
        }
    }

    fn end(&mut self) {
        let generation = self.answered.unwrap_or(0);
        let h = self.next_header(wire::KIND_JVM_END, wire::FLAG_END, generation);
        if let Ok(w) = Writer::new(&mut self.buf, &h) {
            emit(w.finish());
        }
    }
}

/// Appends one method; the first of a record always fits (its strings are cut further if
/// four strings of MAX_STRING bytes would not).
fn add_method(
    w: &mut Writer<'_>,
    mid: u32,
    e: &MethodEntry,
    first: bool,
) -> Result<(), wire::Full> {
    let class = e.class.replace('/', ".");
    let file = e.file_path().unwrap_or_default();
    let def = MethodDef {
        mid,
        class: class.as_bytes(),
        name: e.name.as_bytes(),
        descriptor: e.descriptor.as_bytes(),
        source_file: file.as_bytes(),
    };
    match w.method(&def) {
        Err(wire::Full) if first => {
            const SHORT: usize = 2048;
            let short = MethodDef {
                mid,
                class: &def.class[..def.class.len().min(SHORT)],
                name: &def.name[..def.name.len().min(SHORT)],
                descriptor: &def.descriptor[..def.descriptor.len().min(SHORT)],
                source_file: &def.source_file[..def.source_file.len().min(SHORT)],
            };
            w.method(&short)
        }
        r => r,
    }
}

fn with_jvm<R>(f: impl FnOnce(&mut JvmStream) -> R) -> R {
    let mut g = lock(&JVM);
    f(g.get_or_insert_with(JvmStream::new))
}

/// `Rt.usdtHello`: answers a new control generation on the JVM stream.
pub fn answer_generation(generation: u64, live_threads: u64) {
    with_jvm(|j| j.answer(generation, live_threads));
}

/// Fires a record a Java thread serialized at `addr` (`len` bytes), after sending the
/// methods registered since the last METHODS record.
///
/// # Safety
/// `addr` must point at `len` readable bytes that stay unchanged until this returns.
pub unsafe fn fire_thread_record(addr: *const u8, len: usize, live_threads: u64) {
    if addr.is_null() || !(wire::HEADER_LEN..=MAX_RECORD).contains(&len) {
        return;
    }
    with_jvm(|j| j.catch_up(live_threads));
    // SAFETY: the caller guarantees len readable bytes at addr.
    let rec = unsafe { std::slice::from_raw_parts(addr, len) };
    emit(rec);
}

/// VM death, after every thread's last record: the JVM stream's end (with a hello and the
/// methods first if this JVM never sent them). Nothing when no tracer listens.
pub fn jvm_end(live_threads: u64) {
    if probe::enabled() {
        with_jvm(|j| {
            j.catch_up(live_threads);
            j.end();
        });
    }
    flush_tap();
}

/// The JVM's start time in Unix milliseconds, from `/proc/self/stat` and the boot time;
/// `None` if /proc cannot tell.
pub fn process_start_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which may contain spaces and parentheses) start at state.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start_ticks: u64 = rest.split(' ').nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if hz == 0 {
        return None;
    }
    Some(btime * 1000 + start_ticks * 1000 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_recent_and_not_in_the_future() {
        let ms = process_start_ms().expect("/proc/self/stat");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        // Clock ticks are 10 ms and btime is whole seconds.
        assert!(ms <= now + 1000, "start {ms} after now {now}");
        assert!(
            now - ms < 3_600_000,
            "test process started an hour ago? {ms} {now}"
        );
    }

    #[test]
    fn a_huge_method_still_fits_a_record_alone() {
        let long = "x".repeat(5000);
        let e = MethodEntry {
            class: long.clone(),
            name: long.clone(),
            descriptor: long.clone(),
            source_file: Some(long),
        };
        let mut buf = vec![0; MAX_RECORD];
        let h = wire::header(wire::KIND_METHODS, 1, 1, 0, 0, 0);
        let mut w = Writer::new(&mut buf, &h).unwrap();
        w.begin_entries().unwrap();
        add_method(&mut w, 7, &e, true).unwrap();
        assert_eq!(add_method(&mut w, 8, &e, false), Err(wire::Full));
        let rec = w.finish().to_vec();
        let r = wire::split_record(&rec).unwrap();
        let got: Vec<_> = wire::MethodIter::new(r.body)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].mid, 7);
        assert_eq!(got[0].name.len(), 2048);
    }
}
