//! The programs the `switch` part reads: the EMPTY program the bench attaches itself to
//! `sched_switch` (the baseline: what any program at that attach point costs), and jpd's
//! `jp_offcpu`, found among the programs jpd holds. Both are read through the kernel's
//! BPF run-time statistics at the same moments. Raw syscalls: xtask has no aya.
use std::os::fd::{FromRawFd as _, OwnedFd};

use anyhow::{bail, Context, Result};

use crate::bench::floor::{bpf, prog_info, run_stats};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_RAW_TP: u32 = 23;
/// Offset of `name` (16 bytes) in `struct bpf_prog_info`.
const PROG_INFO_NAME: usize = 64;
/// `union bpf_attr`'s `BPF_PROG_LOAD` member, up to `attach_btf_obj_fd`, as bytes:
/// offsets of the fields set here.
const LOAD_ATTR_LEN: usize = 120;
const AT_PROG_TYPE: usize = 0;
const AT_INSN_CNT: usize = 4;
const AT_INSNS: usize = 8;
const AT_LICENSE: usize = 16;
const AT_PROG_NAME: usize = 48;
const AT_EXPECTED_ATTACH_TYPE: usize = 68;
const AT_ATTACH_BTF_ID: usize = 108;

/// A program the bench loaded and attached: detached when dropped.
pub(super) struct Attached {
    prog: OwnedFd,
    _link: OwnedFd,
}

impl Attached {
    /// An empty program (`r0 = 0; exit`) on the `sched_switch` raw tracepoint, as
    /// `jp_offcpu` is attached.
    pub(super) fn empty_raw_tp() -> Result<Attached> {
        let prog = load_empty(BPF_PROG_TYPE_RAW_TRACEPOINT, None, b"jpb_empty_raw\0")?;
        let name = b"sched_switch\0";
        let link = raw_tracepoint_open(&prog, name.as_ptr() as u64)?;
        Ok(Attached { prog, _link: link })
    }

    /// An empty `tp_btf` program on `sched_switch` (the BTF-typed attach of the same
    /// tracepoint).
    pub(super) fn empty_tp_btf() -> Result<Attached> {
        let id = super::btf::type_id("btf_trace_sched_switch")?;
        let prog = load_empty(
            BPF_PROG_TYPE_TRACING,
            Some((BPF_TRACE_RAW_TP, id)),
            b"jpb_empty_btf\0",
        )?;
        let link = raw_tracepoint_open(&prog, 0)?;
        Ok(Attached { prog, _link: link })
    }

    /// (runs, run time ns) so far.
    pub(super) fn stats(&self) -> Result<(u64, u64)> {
        Ok(run_stats(&prog_info(&self.prog)?))
    }
}

/// `r0 = 0; exit`, of `prog_type` (with its attach type and BTF id, for tracing).
fn load_empty(prog_type: u32, attach: Option<(u32, u32)>, name: &[u8]) -> Result<OwnedFd> {
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = b"GPL\0";
    let mut attr = [0u8; LOAD_ATTR_LEN];
    let mut put = |at: usize, bytes: &[u8]| attr[at..at + bytes.len()].copy_from_slice(bytes);
    put(AT_PROG_TYPE, &prog_type.to_ne_bytes());
    put(AT_INSN_CNT, &2u32.to_ne_bytes());
    put(AT_INSNS, &(insns.as_ptr() as u64).to_ne_bytes());
    put(AT_LICENSE, &(license.as_ptr() as u64).to_ne_bytes());
    put(AT_PROG_NAME, &name[..name.len().min(16)]);
    if let Some((attach_type, btf_id)) = attach {
        put(AT_EXPECTED_ATTACH_TYPE, &attach_type.to_ne_bytes());
        put(AT_ATTACH_BTF_ID, &btf_id.to_ne_bytes());
    }
    bpf(BPF_PROG_LOAD, attr.as_mut_ptr().cast(), attr.len())
        .with_context(|| format!("loading the empty program of type {prog_type}"))
}

/// Attaches `prog` to the raw tracepoint named at `name` (0: a tracing program's own).
fn raw_tracepoint_open(prog: &OwnedFd, name: u64) -> Result<OwnedFd> {
    #[repr(C)]
    struct OpenAttr {
        name: u64,
        prog_fd: u32,
        _pad: u32,
    }
    let mut attr = OpenAttr {
        name,
        prog_fd: std::os::fd::AsRawFd::as_raw_fd(prog) as u32,
        _pad: 0,
    };
    bpf(
        BPF_RAW_TRACEPOINT_OPEN,
        (&mut attr as *mut OpenAttr).cast(),
        std::mem::size_of::<OpenAttr>(),
    )
    .context("attaching to sched_switch")
}

/// The program named `name` that process `pid` holds (by its fds' `prog_id`).
pub(super) fn held_by(pid: u32, name: &str) -> Result<OwnedFd> {
    let dir = format!("/proc/{pid}/fdinfo");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        let Ok(info) = std::fs::read_to_string(entry?.path()) else {
            continue;
        };
        let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("prog_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let prog = fd_by_id(id)?;
        let info = prog_info(&prog)?;
        let held = &info[PROG_INFO_NAME..PROG_INFO_NAME + 16];
        let held = held.split(|&b| b == 0).next().unwrap_or(&[]);
        if held == name.as_bytes() {
            return Ok(prog);
        }
    }
    bail!("process {pid} holds no BPF program named {name}")
}

fn fd_by_id(id: u32) -> Result<OwnedFd> {
    // `prog_id`, `next_id`, `open_flags`.
    let mut attr = [id, 0, 0];
    // SAFETY: a valid get_fd_by_id attr of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_GET_FD_BY_ID,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr) as libc::c_uint,
        )
    };
    if fd < 0 {
        bail!(
            "BPF_PROG_GET_FD_BY_ID {id}: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `prog` is a tracing program (`tp_btf`), not a raw tracepoint program: what
/// it is compared with.
pub(super) fn is_tracing(prog: &OwnedFd) -> Result<bool> {
    let info = prog_info(prog)?;
    let prog_type = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
    Ok(prog_type == BPF_PROG_TYPE_TRACING)
}

/// (runs, run time ns) of a program held as `prog`.
pub(super) fn stats_of(prog: &OwnedFd) -> Result<(u64, u64)> {
    Ok(run_stats(&prog_info(prog)?))
}
