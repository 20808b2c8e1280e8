//! readprofile's array in user space: the core-text counters (`JP_TEXT_COUNTS`,
//! `JP_IRQ_TEXT_COUNTS`) are `BPF_F_MMAPABLE` arrays that jpd maps into its memory, so
//! a read costs no syscall at all. The eBPF side sets a dirty flag per 4 KiB page of
//! counters; a read exchanges each set flag for zero and diffs only those pages
//! against what it saw last time, so an idle host costs a scan of the flags only.
//!
//! Counters are `u32` and wrap: a diff is `now.wrapping_sub(last)`, exact as long as a
//! bucket gains fewer than 2^32 samples between two reads (at 997 Hz that takes more
//! than 4 Mi CPU-seconds). Totals are kept as `u64` here.
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use anyhow::{bail, Context as _};
use jp_common::{TextBlock, TEXT_BLOCK_BUCKETS, TEXT_PAGE_BLOCKS, TEXT_PAGE_BUCKETS};

use super::mapping::Mapping;

/// Every this many reads, every page is diffed, set flag or not: a safety net that
/// bounds how late a count could show if a flag were ever missed. On x86-64 (the only
/// architecture the probes read registers for) no flag is missed: the eBPF side's
/// locked add comes before its flag check, and our exchange before our counter reads.
/// A full scan reads every counter (1.2 M per array on a 19 MB kernel text at shift
/// 4): every 64 reads, as it was, that was about a fifth of jpd's idle CPU (idle jpd,
/// 128 s windows, twice each way: 458 and 477 µs/s at 64, 356 and 374 at 600 with the
/// status and batch savings of the same change); every 600 reads (ten minutes at the
/// default interval) it is a few per cent.
const FULL_SCAN_EVERY: u64 = 600;

/// Sizes of the two arrays for `buckets` buckets of core text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextLayout {
    pub buckets: u64,
    /// Elements of the counter array (`TextBlock`s).
    pub blocks: u32,
    /// Elements of the dirty-flag array.
    pub pages: u32,
}

impl TextLayout {
    /// For `[text_start, text_end)` in buckets of `2^shift` bytes.
    pub fn new(text_start: u64, text_end: u64, shift: u32) -> anyhow::Result<TextLayout> {
        if text_end <= text_start {
            bail!("empty core kernel text [{text_start:#x}, {text_end:#x})");
        }
        let buckets = ((text_end - text_start - 1) >> shift) + 1;
        let blocks = buckets.div_ceil(u64::from(TEXT_BLOCK_BUCKETS));
        let pages = blocks.div_ceil(u64::from(TEXT_PAGE_BLOCKS));
        let blocks = u32::try_from(blocks)
            .with_context(|| format!("shift {shift} makes {buckets} buckets: too many"))?;
        let pages = u32::try_from(pages).context("too many pages of counters")?;
        Ok(TextLayout {
            buckets,
            blocks,
            pages,
        })
    }

    /// Bytes of kernel memory the counters and flags take (shared by all CPUs).
    pub fn bytes(&self) -> u64 {
        u64::from(self.blocks) * std::mem::size_of::<TextBlock>() as u64 + u64::from(self.pages) * 8
    }
}

/// The cumulative per-bucket counts of one core-text array, kept up to date by diffs.
pub struct TextCounts {
    layout: TextLayout,
    counts: Mapping,
    dirty: Mapping,
    /// Last value seen per bucket, per page (allocated when the page is first dirty).
    last: Vec<Option<Box<[u32]>>>,
    /// Bucket → samples since attach (non-zero buckets only).
    totals: HashMap<u64, u64>,
    reads: u64,
}

impl TextCounts {
    /// Maps the counter and flag arrays (their fds, sized as `layout`).
    pub fn map(
        counts: BorrowedFd<'_>,
        dirty: BorrowedFd<'_>,
        layout: TextLayout,
        what: &str,
    ) -> anyhow::Result<TextCounts> {
        let counts = Mapping::new(
            counts,
            layout.blocks as usize * std::mem::size_of::<TextBlock>(),
            what,
        )?;
        let dirty = Mapping::new(dirty, layout.pages as usize * 8, what)?;
        Ok(TextCounts {
            layout,
            counts,
            dirty,
            last: (0..layout.pages).map(|_| None).collect(),
            totals: HashMap::new(),
            reads: 0,
        })
    }

    /// Folds in what changed since the last read; returns the totals.
    pub fn read(&mut self) -> &HashMap<u64, u64> {
        let full = self.reads.is_multiple_of(FULL_SCAN_EVERY);
        self.reads += 1;
        for page in 0..self.layout.pages as usize {
            // SAFETY: `page < pages`, so the u64 is inside the flag mapping; the eBPF
            // side writes it concurrently, hence the atomic. The exchange (a full
            // barrier) happens before the page's counters are read, so an increment
            // we miss here sets the flag again.
            let flag = unsafe { &*(self.dirty.ptr() as *const AtomicU64).add(page) };
            // A plain load first: most pages are clean, and an exchange (a locked
            // instruction) per page of a 1200-page array was most of an idle pass. A flag
            // set after this load is seen by the next read.
            let was_dirty =
                flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::SeqCst) != 0;
            if was_dirty || full {
                self.diff_page(page);
            }
        }
        &self.totals
    }

    fn diff_page(&mut self, page: usize) {
        let first = page * TEXT_PAGE_BUCKETS as usize;
        let n = (self.layout.buckets as usize)
            .saturating_sub(first)
            .min(TEXT_PAGE_BUCKETS as usize);
        let Some(last) = self.last.get_mut(page) else {
            return;
        };
        let last = last.get_or_insert_with(|| vec![0u32; TEXT_PAGE_BUCKETS as usize].into());
        let base = self.counts.ptr() as *const AtomicU32;
        for (i, seen) in last.iter_mut().enumerate().take(n) {
            // SAFETY: `first + i < buckets <= blocks * TEXT_BLOCK_BUCKETS`, inside the
            // counter mapping; the eBPF side adds to it atomically.
            let now = unsafe { &*base.add(first + i) }.load(Ordering::Relaxed);
            let delta = now.wrapping_sub(*seen);
            if delta != 0 {
                *seen = now;
                *self.totals.entry((first + i) as u64).or_insert(0) += u64::from(delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_covers_every_byte_of_text() {
        let l = TextLayout::new(0x1000, 0x1000 + 16 * 1024 + 1, 4).unwrap();
        assert_eq!(l.buckets, 1025);
        assert_eq!(l.blocks, 65);
        assert_eq!(l.pages, 2);
        // A 6.x kernel: 19.3 MB of text at shift 4 is 4.8 MB of counters.
        let l = TextLayout::new(0xffffffff81000000, 0xffffffff82277288, 4).unwrap();
        assert_eq!(l.buckets, 0x127729);
        assert_eq!(l.bytes(), u64::from(l.blocks) * 64 + u64::from(l.pages) * 8);
        assert!(TextLayout::new(5, 5, 4).is_err());
    }
}
