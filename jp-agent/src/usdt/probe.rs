//! The USDT probe `jp:record(addr, len)`, its semaphore, and the control block jpd writes.
//!
//! Why not the `probe` crate: it emits the same SystemTap SDT v3 note, but keeps the
//! semaphore private to its macro and only offers "is it enabled?" as a Rust call. The Java
//! runtime must read the semaphore itself, through a direct `ByteBuffer` over its address,
//! so that a report point with no tracer is one load and a compare with no JNI transition.
//! So the note is written here with `asm!` (the layout of `sys/sdt.h`, x86-64) and the
//! semaphore is an exported `u16` whose address we hand to Java.

use jp_common::wire::{Control, CONTROL_MAGIC};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

/// The probe's semaphore (`sys/sdt.h` naming: `PROVIDER_NAME_semaphore`). The kernel
/// increments it for every uprobe attached with this `ref_ctr_offset` and decrements it on
/// detach, so it is non-zero exactly while someone listens. It must be a 2-byte aligned
/// `u16` in a writable, file-backed section (`.probes`, PROGBITS: the kernel finds it
/// through the library's file mapping).
///
/// Page-aligned, so that the file page holding it belongs to no other segment. In a process
/// that maps the library after jpd attached, the kernel increments the semaphore at the
/// first writable mapping of its file offset. The RELRO segment's last page is the same
/// file page as the start of the data segment, mapped again below it (and made read-only
/// later): when the semaphore fell into that page, the kernel raised the copy in the RELRO
/// mapping, and every JVM started after jpd stayed silent (seen once a change elsewhere
/// moved `.data` by 0x2d0 bytes: docs/journal/semaphore-page.md; `usdt.rs` checks the
/// layout).
#[no_mangle]
#[used]
#[allow(non_upper_case_globals)]
#[link_section = ".probes"]
pub static jp_record_semaphore: PageAligned = PageAligned(AtomicU16::new(0));

/// A `u16` at the start of a page of its own (see [`jp_record_semaphore`]).
#[repr(C, align(4096))]
pub struct PageAligned(pub AtomicU16);

/// [`Control`] shared with a process outside: jpd writes `generation` through
/// `/proc/PID/mem`, so every access goes through atomics (never a plain load the compiler
/// could keep in a register).
#[repr(transparent)]
pub struct SharedControl(UnsafeCell<Control>);

// SAFETY: all access to the inner Control goes through AtomicU64 views of its 8-aligned
// fields (see `field`); writes from other processes are of whole 8-byte words.
unsafe impl Sync for SharedControl {}

/// The control block jpd finds by this name in `.dynsym` (`wire::CONTROL_SYMBOL`).
#[no_mangle]
#[used]
#[allow(non_upper_case_globals)]
pub static jp_usdt_control: SharedControl = SharedControl(UnsafeCell::new(Control {
    magic: CONTROL_MAGIC,
    generation: 0,
    agent_state: 0,
    window_id: 0,
    _reserved: [0; 4],
}));

impl SharedControl {
    fn generation_cell(&self) -> &AtomicU64 {
        let p = self.0.get();
        // SAFETY: `p` points at a live static Control; `generation` is a u64 at offset 8 of
        // an 8-aligned repr(C) struct, so it meets AtomicU64's alignment, and it is only ever
        // accessed atomically from this process.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*p).generation)) }
    }

    /// `agent_state` and `window_id`, which jpd reads to know what a window request meets.
    pub fn set_agent_state(&self, state: u64, window_id: u64) {
        let p = self.0.get();
        // SAFETY: as in generation_cell: u64 fields at offsets 16 and 24 of the 8-aligned
        // static block, accessed only atomically from this process.
        let (s, w) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*p).agent_state)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*p).window_id)),
            )
        };
        w.store(window_id, Ordering::Release);
        s.store(state, Ordering::Release);
    }

    /// The agent state last written (`wire::AGENT_STATE_*`).
    pub fn agent_state(&self) -> u64 {
        let p = self.0.get();
        // SAFETY: as in set_agent_state.
        unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*p).agent_state)) }
            .load(Ordering::Acquire)
    }

    /// The generation last written by jpd (0 before any).
    pub fn generation(&self) -> u64 {
        self.generation_cell().load(Ordering::Acquire)
    }

    /// For `usdt_tap`: pretend a tracer wrote `g`.
    pub fn set_generation(&self, g: u64) {
        self.generation_cell().store(g, Ordering::Release)
    }

    /// The block's address and size, for Java's direct ByteBuffer.
    pub fn as_mut_ptr(&self) -> *mut Control {
        self.0.get()
    }
}

/// Whether a tracer (or the tap) listens.
pub fn enabled() -> bool {
    jp_record_semaphore.0.load(Ordering::Relaxed) != 0
}

/// Fires `jp:record(addr, len)`: a `nop` that a tracer turns into a breakpoint. `addr` must
/// point at `len` readable bytes until this returns (the uprobe copies them synchronously).
///
/// One site only (`inline(never)`), so the library has exactly one `jp:record` note.
#[inline(never)]
pub fn fire(addr: u64, len: u64) {
    // SAFETY: the asm executes a single `nop`; everything else only emits data into the
    // non-allocated note section and the one-byte `.stapsdt.base` section. No stack, no
    // flags; it is not marked `nomem` so that it orders as a compiler barrier after the
    // stores that filled the record.
    unsafe {
        std::arch::asm!(
            "990: nop",
            ".pushsection .note.stapsdt,\"\",@note",
            ".balign 4",
            ".4byte 992f-991f, 994f-993f, 3",
            "991: .asciz \"stapsdt\"",
            "992: .balign 4",
            "993: .8byte 990b",
            ".8byte _.stapsdt.base",
            ".8byte {sem}",
            ".asciz \"jp\"",
            ".asciz \"record\"",
            ".asciz \"8@{addr} 8@{len}\"",
            "994: .balign 4",
            ".popsection",
            // The base section lets tracers detect prelinking; "R" (retain) keeps it under
            // --gc-sections since only the non-allocated note refers to it.
            ".ifndef _.stapsdt.base",
            ".pushsection .stapsdt.base,\"aGR\",@progbits,.stapsdt.base,comdat",
            ".weak _.stapsdt.base",
            ".hidden _.stapsdt.base",
            "_.stapsdt.base: .space 1",
            ".size _.stapsdt.base, 1",
            ".popsection",
            ".endif",
            addr = in(reg) addr,
            len = in(reg) len,
            sem = sym jp_record_semaphore,
            options(att_syntax, nostack, preserves_flags)
        );
    }
}
