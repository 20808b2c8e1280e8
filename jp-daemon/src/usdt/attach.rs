//! Uprobe perf events whose USDT semaphore the kernel manages.
//!
//! aya attaches uprobes without the kernel's reference-counter (`ref_ctr_offset`)
//! support, so jpd opens the event itself: `perf_event_open` with the dynamic `uprobe`
//! PMU, the file path in `config1`, the probe's file offset in `config2` and the
//! semaphore's file offset in the `config` bits the PMU's `ref_ctr_offset` format names.
//! The kernel increments the semaphore in each process where the probe is installed and
//! decrements it when the event is closed, even if jpd dies, so no target is left
//! believing someone listens. A BPF program is attached to the event through a BPF
//! link, which carries the attach cookie.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_ATTR_SIZE_VER1`: the attribute up to `config2`, all a uprobe needs.
const PERF_ATTR_SIZE_VER1: u32 = 72;

/// The first fields of the kernel's `struct perf_event_attr`, through `config2`.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bit field: `disabled` is bit 0, `exclude_kernel` …; all clear here.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    /// `uprobe_path`: pointer to the NUL-terminated path of the probed file.
    config1: u64,
    /// `probe_offset`: file offset of the probe.
    config2: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("cannot read {path}: {source} (kernel without CONFIG_UPROBE_EVENTS?)")]
    Pmu { path: String, source: io::Error },
    #[error("unexpected content {content:?} in {path}")]
    PmuFormat { path: String, content: String },
    #[error("semaphore offset {offset:#x} does not fit in the {bits} bits of ref_ctr_offset")]
    RefCtrTooLarge { offset: u64, bits: u32 },
    #[error("path {0:?} contains a NUL byte")]
    Path(String),
    #[error("BPF_LINK_CREATE on a uprobe event: {0}")]
    Link(io::Error),
    #[error("perf_event_open(uprobe {path}+{offset:#x}): {source}")]
    Open {
        path: String,
        offset: u64,
        source: io::Error,
    },
}

/// The `uprobe` PMU's event type and where `ref_ctr_offset` goes in `config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobePmu {
    pub type_: u32,
    /// First bit of `config` holding the semaphore's offset.
    pub ref_ctr_shift: u32,
    /// Number of bits it has.
    pub ref_ctr_bits: u32,
}

impl UprobePmu {
    /// Reads the PMU description from sysfs.
    pub fn from_sysfs() -> Result<UprobePmu, AttachError> {
        let read = |name: &str| {
            let path = format!("{UPROBE_PMU}/{name}");
            fs::read_to_string(&path)
                .map(|content| (path.clone(), content.trim().to_owned()))
                .map_err(|source| AttachError::Pmu { path, source })
        };
        let (path, content) = read("type")?;
        let type_ = content.parse().map_err(|_| AttachError::PmuFormat {
            path,
            content: content.clone(),
        })?;
        let (path, content) = read("format/ref_ctr_offset")?;
        let (ref_ctr_shift, ref_ctr_bits) =
            parse_config_bits(&content).ok_or(AttachError::PmuFormat {
                path,
                content: content.clone(),
            })?;
        Ok(UprobePmu {
            type_,
            ref_ctr_shift,
            ref_ctr_bits,
        })
    }
}

/// `config:32-63` → (32, 32); `config:5` → (5, 1).
fn parse_config_bits(format: &str) -> Option<(u32, u32)> {
    let bits = format.strip_prefix("config:")?;
    let (low, high) = match bits.split_once('-') {
        Some((low, high)) => (low.parse::<u32>().ok()?, high.parse::<u32>().ok()?),
        None => {
            let bit = bits.parse::<u32>().ok()?;
            (bit, bit)
        }
    };
    if low <= high && high < 64 {
        Some((low, high - low + 1))
    } else {
        None
    }
}

/// An open uprobe perf event, counting hits. Closing it (drop) removes the probe and,
/// for a USDT probe with a semaphore, decrements the semaphore.
#[derive(Debug)]
pub struct UprobeEvent {
    fd: OwnedFd,
}

impl UprobeEvent {
    /// Opens an enabled uprobe on `path` at file offset `offset` in process `pid`
    /// (`None`: every process, on CPU `cpu`). With `ref_ctr_offset` (the semaphore's
    /// file offset) the kernel maintains the USDT semaphore.
    pub fn open(
        pmu: &UprobePmu,
        path: &Path,
        offset: u64,
        ref_ctr_offset: Option<u64>,
        pid: Option<libc::pid_t>,
        cpu: libc::c_int,
    ) -> Result<UprobeEvent, AttachError> {
        let shown = || path.display().to_string();
        let c_path =
            CString::new(path.as_os_str().as_bytes()).map_err(|_| AttachError::Path(shown()))?;
        let mut config = 0;
        if let Some(ref_ctr) = ref_ctr_offset {
            let fits = pmu.ref_ctr_bits >= 64 || ref_ctr >> pmu.ref_ctr_bits == 0;
            if !fits {
                return Err(AttachError::RefCtrTooLarge {
                    offset: ref_ctr,
                    bits: pmu.ref_ctr_bits,
                });
            }
            config = ref_ctr << pmu.ref_ctr_shift;
        }
        let attr = PerfEventAttr {
            type_: pmu.type_,
            size: PERF_ATTR_SIZE_VER1,
            config,
            config1: c_path.as_ptr() as u64,
            config2: offset,
            ..PerfEventAttr::default()
        };
        let (pid, cpu) = match pid {
            Some(pid) => (pid, -1),
            None => (-1, cpu),
        };
        // SAFETY: `attr` is a valid `perf_event_attr` prefix whose `size` says how much
        // of it the kernel may read; `config1` points to `c_path`, a NUL-terminated
        // string alive for the whole call (the kernel copies it). No group fd.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                pid,
                cpu,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if ret < 0 {
            return Err(AttachError::Open {
                path: shown(),
                offset,
                source: io::Error::last_os_error(),
            });
        }
        let raw = libc::c_int::try_from(ret).map_err(|_| AttachError::Open {
            path: shown(),
            offset,
            source: io::Error::other("perf_event_open returned an out-of-range fd"),
        })?;
        // SAFETY: `raw` is a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(UprobeEvent { fd })
    }

    /// Hits counted so far.
    pub fn count(&self) -> io::Result<u64> {
        let mut value = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `value`, which is 8 bytes long; the fd is
        // open for the lifetime of `self`.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), value.as_mut_ptr().cast(), value.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n != 8 {
            return Err(io::Error::other(format!(
                "perf event read gave {n} bytes, not 8"
            )));
        }
        Ok(u64::from_ne_bytes(value))
    }
}

/// `BPF_LINK_CREATE` command of the `bpf` syscall.
const BPF_LINK_CREATE: libc::c_int = 28;
/// `BPF_PERF_EVENT` attach type: a program on a perf event, with a cookie.
const BPF_PERF_EVENT: u32 = 41;

/// The `link_create` member of the kernel's `union bpf_attr`, for perf events, padded
/// with zeros (the kernel accepts a shorter attribute than its own if the rest is 0).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    /// `perf_event.bpf_cookie`: what `bpf_get_attach_cookie` returns in the program.
    bpf_cookie: u64,
    _zero: [u64; 4],
}

/// A BPF program attached to a [`UprobeEvent`]. Closing it (drop) detaches the
/// program; the link holds the event, so the probe (and its semaphore count) lives
/// until both are closed.
#[derive(Debug)]
pub struct BpfLink {
    fd: OwnedFd,
}

impl AsFd for BpfLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl UprobeEvent {
    /// Attaches `program` (a kprobe-type program, which uprobes run) with `cookie`, which
    /// the program reads with `bpf_get_attach_cookie` — for USDT, the key of the
    /// probe's argument spec. `PERF_EVENT_IOC_SET_BPF` has no cookie; a BPF link has.
    pub fn attach_bpf(&self, program: BorrowedFd<'_>, cookie: u64) -> Result<BpfLink, AttachError> {
        let to_u32 = |fd: BorrowedFd<'_>| u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX);
        let attr = LinkCreateAttr {
            prog_fd: to_u32(program),
            target_fd: to_u32(self.fd.as_fd()),
            attach_type: BPF_PERF_EVENT,
            bpf_cookie: cookie,
            ..LinkCreateAttr::default()
        };
        // SAFETY: `attr` is a valid, fully initialised `bpf_attr` prefix of the size
        // passed; both fds are open for the duration of the call (borrowed).
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_LINK_CREATE,
                &attr as *const LinkCreateAttr,
                std::mem::size_of::<LinkCreateAttr>() as libc::c_uint,
            )
        };
        if ret < 0 {
            return Err(AttachError::Link(io::Error::last_os_error()));
        }
        let raw = libc::c_int::try_from(ret).map_err(|_| {
            AttachError::Link(io::Error::other(
                "BPF_LINK_CREATE returned an out-of-range fd",
            ))
        })?;
        // SAFETY: `raw` is a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(BpfLink { fd })
    }
}

impl AsFd for UprobeEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_bit_ranges() {
        assert_eq!(parse_config_bits("config:32-63"), Some((32, 32)));
        assert_eq!(parse_config_bits("config:0"), Some((0, 1)));
        assert_eq!(parse_config_bits("config1:0-63"), None);
        assert_eq!(parse_config_bits("config:40-32"), None);
        assert_eq!(parse_config_bits("config:0-64"), None);
        assert_eq!(parse_config_bits("config:x"), None);
    }

    #[test]
    fn attr_layout_is_perf_attr_size_ver1() {
        assert_eq!(
            std::mem::size_of::<PerfEventAttr>(),
            PERF_ATTR_SIZE_VER1 as usize
        );
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config2), 64);
        // `link_create.perf_event.bpf_cookie` follows four u32 in the kernel's union.
        assert_eq!(std::mem::offset_of!(LinkCreateAttr, bpf_cookie), 16);
    }
}
