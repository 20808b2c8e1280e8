//! The timer-interrupt floor that jp and perf record share: a `cpu-clock` perf event
//! per CPU at the same frequency with an empty BPF program attached (it returns 0, so
//! like jp's sampler it writes no perf sample). Also the kernel's BPF run-time
//! statistics, held on for a measuring window only. Raw syscalls: xtask has no aya.
use std::os::fd::{FromRawFd as _, OwnedFd};

use anyhow::{bail, Result};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `perf_event_attr` flags: `disabled` (bit 0) and `freq` (bit 10).
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_FREQ: u64 = 1 << 10;
const PERF_ATTR_SIZE_VER5: u32 = 112;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// Offsets of `run_time_ns` and `run_cnt` in `struct bpf_prog_info` (uapi/linux/bpf.h).
const PROG_INFO_RUN_TIME_NS: usize = 192;
const PROG_INFO_RUN_CNT: usize = 200;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;

/// The first fields of `struct perf_event_attr` (the rest must be zero).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 8],
}

/// The `BPF_PROG_LOAD` member of `union bpf_attr`, up to `kern_version`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    _pad: u32,
}

pub fn bpf(cmd: libc::c_long, attr: *mut libc::c_void, size: usize) -> Result<OwnedFd> {
    // SAFETY: `attr` points to a bpf_attr prefix of `size` bytes owned by the caller.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size as libc::c_uint) };
    if fd < 0 {
        bail!("bpf({cmd}): {}", std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// cpu-clock events on every CPU with an empty BPF program; disabled until `enable`.
pub struct Floor {
    events: Vec<OwnedFd>,
    prog: OwnedFd,
}

impl Floor {
    pub fn open(hz: u64, cpus: usize) -> Result<Floor> {
        // r0 = 0; exit
        let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
        let license = b"GPL\0";
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_PERF_EVENT,
            insn_cnt: 2,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            ..ProgLoadAttr::default()
        };
        let prog = bpf(
            BPF_PROG_LOAD,
            (&mut attr as *mut ProgLoadAttr).cast(),
            std::mem::size_of::<ProgLoadAttr>(),
        )?;
        let mut events = Vec::new();
        for cpu in 0..cpus {
            let mut attr = PerfEventAttr {
                kind: PERF_TYPE_SOFTWARE,
                size: PERF_ATTR_SIZE_VER5,
                config: PERF_COUNT_SW_CPU_CLOCK,
                sample_freq: hz,
                flags: ATTR_DISABLED | ATTR_FREQ,
                ..PerfEventAttr::default()
            };
            // SAFETY: a valid perf_event_attr of the size it declares; pid -1 + cpu:
            // every task on that CPU.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &mut attr as *mut PerfEventAttr,
                    -1,
                    cpu as libc::c_int,
                    -1,
                    0,
                )
            };
            if fd < 0 {
                bail!(
                    "perf_event_open cpu-clock on CPU {cpu}: {}",
                    std::io::Error::last_os_error()
                );
            }
            // SAFETY: the kernel just returned this fd to us.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            ioctl(
                &fd,
                PERF_EVENT_IOC_SET_BPF,
                std::os::fd::AsRawFd::as_raw_fd(&prog) as _,
            )?;
            events.push(fd);
        }
        Ok(Floor { events, prog })
    }

    pub fn enable(&self) -> Result<()> {
        self.events
            .iter()
            .try_for_each(|e| ioctl(e, PERF_EVENT_IOC_ENABLE, 0))
    }

    pub fn disable(&self) -> Result<()> {
        self.events
            .iter()
            .try_for_each(|e| ioctl(e, PERF_EVENT_IOC_DISABLE, 0))
    }

    /// The empty program's (runs, run time ns) so far (moving only while the BPF
    /// statistics are on).
    pub fn program_stats(&self) -> Result<(u64, u64)> {
        Ok(run_stats(&prog_info(&self.prog)?))
    }
}

/// `struct bpf_prog_info` of the program `prog` (its first 256 bytes).
pub fn prog_info(prog: &OwnedFd) -> Result<[u8; 256]> {
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = [0u8; 256];
    let mut attr = InfoAttr {
        bpf_fd: std::os::fd::AsRawFd::as_raw_fd(prog) as u32,
        info_len: info.len() as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: a valid info_by_fd attr; the kernel writes at most `info_len` bytes
    // into `info`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut InfoAttr,
            std::mem::size_of::<InfoAttr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        bail!(
            "BPF_OBJ_GET_INFO_BY_FD: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(info)
}

/// (runs, run time ns) from a `bpf_prog_info` (moving only while the statistics are on).
pub fn run_stats(info: &[u8; 256]) -> (u64, u64) {
    let field = |at: usize| -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&info[at..at + 8]);
        u64::from_ne_bytes(b)
    };
    (field(PROG_INFO_RUN_CNT), field(PROG_INFO_RUN_TIME_NS))
}

fn ioctl(fd: &OwnedFd, request: libc::c_ulong, arg: libc::c_ulong) -> Result<()> {
    // SAFETY: perf event ioctls that take an integer argument.
    let rc = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(fd), request, arg) };
    if rc < 0 {
        bail!(
            "perf ioctl {request:#x}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// BPF run-time statistics on for as long as the returned fd lives.
pub fn bpf_stats_on() -> Result<OwnedFd> {
    // The `enable_stats` member: one u32, BPF_STATS_RUN_TIME = 0.
    let mut attr = [0u32; 2];
    bpf(BPF_ENABLE_STATS, attr.as_mut_ptr().cast(), 8)
}
