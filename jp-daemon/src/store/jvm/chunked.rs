//! A growable array that never moves what it holds: the first chunk grows like a vector
//! (small trees stay small), later chunks are allocated whole, [`CHUNK`] elements each.
//!
//! Why: trees of millions of nodes grow for the whole life of a JVM. Reallocating one
//! big vector leaves its old block behind in the allocator's heap (glibc stops using
//! mmap for big blocks once one was freed), which cost 15–25 bytes per node of resident
//! memory beyond the arrays themselves; fixed chunks are never freed or moved.
//!
//! Snapshots: [`ChunkVec::freeze`] moves the chunks behind `Arc`s (no copy), so a
//! query can walk the array without the store's lock. A frozen chunk leaves an empty
//! vector in its place: the next write takes the chunks back, copying those that a
//! snapshot still holds ("copy on write", once per snapshot). Reads and writes when
//! nothing is frozen cost one predictable branch more than a plain chunked vector.

use std::ops::{Index, IndexMut};
use std::sync::Arc;

/// "No element" in arrays of indexes (the trees' links and index slots, a method's
/// first node). Node indexes stay below `nodes::MAX_NODES`.
pub(crate) const NONE: u32 = u32::MAX;

/// Asks the CPU to load `x` into the cache (a hint). Tree updates jump around big
/// arrays; loading a few entries ahead hides the misses.
#[inline(always)]
pub(crate) fn prefetch<T>(x: Option<&T>) {
    if let Some(x) = x {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch only hints the cache; the pointer comes from a reference.
        unsafe {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = x;
    }
}

const SHIFT: u32 = 14;
/// Elements per chunk.
pub(crate) const CHUNK: usize = 1 << SHIFT;
const MASK: usize = CHUNK - 1;

pub(crate) struct ChunkVec<T> {
    /// Every chunk but the last holds exactly CHUNK elements, except a frozen one,
    /// which is empty here and whole in `frozen`.
    chunks: Vec<Vec<T>>,
    /// Per chunk, when frozen: its elements, shared with snapshots.
    frozen: Vec<Option<Arc<Vec<T>>>>,
    /// Some chunk is frozen.
    any_frozen: bool,
    len: usize,
}

/// An immutable copy of a [`ChunkVec`] as it was when frozen, sharing its chunks.
pub(crate) struct Frozen<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Clone for Frozen<T> {
    fn clone(&self) -> Frozen<T> {
        Frozen {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T: Copy> Frozen<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> SHIFT).and_then(|c| c.get(i & MASK))
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Copy> ChunkVec<T> {
    pub fn new() -> ChunkVec<T> {
        ChunkVec::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Takes the chunks back from the snapshots before a write: a chunk that a
    /// snapshot still holds is copied. All at once, so that writes need no check per
    /// chunk (a record of random updates touches every chunk anyway).
    #[cold]
    #[inline(never)]
    fn thaw_all(&mut self) {
        for (c, f) in self.chunks.iter_mut().zip(self.frozen.iter_mut()) {
            if let Some(a) = f.take() {
                *c = Arc::unwrap_or_clone(a);
            }
        }
        self.any_frozen = false;
    }

    /// Makes the array writable again after [`ChunkVec::freeze`]: the writer calls it
    /// before [`ChunkVec::get`] and [`ChunkVec::get_mut`], which then cost nothing more
    /// than those of a plain chunked vector.
    #[inline]
    pub fn thaw(&mut self) {
        if self.any_frozen {
            self.thaw_all();
        }
    }

    pub fn push(&mut self, x: T) {
        self.thaw();
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => {
                if c.len() == c.capacity() {
                    // The first chunk grows by a quarter; later ones are allocated whole.
                    let more = (c.len() / 4).max(16).min(CHUNK - c.len());
                    c.reserve_exact(more);
                }
                c.push(x);
            }
            _ => {
                let mut c = if self.chunks.is_empty() {
                    Vec::with_capacity(16)
                } else {
                    Vec::with_capacity(CHUNK)
                };
                c.push(x);
                self.chunks.push(c);
                self.frozen.push(None);
            }
        }
        self.len += 1;
    }

    /// For the writer, after [`ChunkVec::thaw`] (a frozen chunk reads as missing).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        debug_assert!(!self.any_frozen, "thaw() before the writer reads");
        self.chunks.get(i >> SHIFT).and_then(|c| c.get(i & MASK))
    }

    /// For readers: whether frozen or not.
    pub fn read(&self, i: usize) -> Option<&T> {
        let c = i >> SHIFT;
        match self.frozen.get(c) {
            Some(Some(f)) => f.get(i & MASK),
            _ => self.chunks.get(c).and_then(|v| v.get(i & MASK)),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        debug_assert!(!self.any_frozen, "thaw() before writing");
        self.chunks
            .get_mut(i >> SHIFT)
            .and_then(|v| v.get_mut(i & MASK))
    }

    pub fn truncate(&mut self, len: usize) {
        self.thaw();
        while self.len > len {
            let Some(last) = self.chunks.last_mut() else {
                break;
            };
            let keep = last.len().saturating_sub(self.len - len);
            self.len -= last.len() - keep;
            last.truncate(keep);
            if last.is_empty() {
                self.chunks.pop();
                self.frozen.pop();
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks
            .iter()
            .zip(&self.frozen)
            .flat_map(|(c, f)| f.as_deref().unwrap_or(c).iter())
    }

    /// The array as it is now, sharing its chunks: O(chunks), no element is copied.
    pub fn freeze(&mut self) -> Frozen<T> {
        let chunks = self
            .chunks
            .iter_mut()
            .zip(self.frozen.iter_mut())
            .map(|(c, f)| Arc::clone(f.get_or_insert_with(|| Arc::new(std::mem::take(c)))))
            .collect();
        self.any_frozen = !self.chunks.is_empty();
        Frozen {
            chunks,
            len: self.len,
        }
    }

    /// Bytes allocated for elements and chunk pointers (a chunk shared with a snapshot
    /// counts here, as the array's). O(1): every chunk but the last holds [`CHUNK`]
    /// elements (the first grows to exactly that), so only the last one is looked at.
    pub fn memory_bytes(&self) -> usize {
        let last = match (self.chunks.last(), self.frozen.last()) {
            (_, Some(Some(f))) => f.capacity(),
            (Some(c), _) => c.capacity(),
            _ => 0,
        };
        let full = self.chunks.len().saturating_sub(1);
        (full * CHUNK + last) * std::mem::size_of::<T>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<T>>()
            + self.frozen.capacity() * std::mem::size_of::<Option<Arc<Vec<T>>>>()
    }
}

impl<T> Default for ChunkVec<T> {
    fn default() -> ChunkVec<T> {
        ChunkVec {
            chunks: Vec::new(),
            frozen: Vec::new(),
            any_frozen: false,
            len: 0,
        }
    }
}

impl<T: Copy> Index<usize> for ChunkVec<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        match self.read(i) {
            Some(x) => x,
            None => panic!("index {i} out of bounds of {}", self.len),
        }
    }
}

impl<T: Copy> IndexMut<usize> for ChunkVec<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(i) {
            Some(x) => x,
            None => panic!("index {i} out of bounds of {len}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_vector_across_chunks() {
        let mut c = ChunkVec::new();
        let mut v = Vec::new();
        for i in 0..(3 * CHUNK + 17) as u32 {
            c.push(i);
            v.push(i);
        }
        assert_eq!(c.len(), v.len());
        assert!(c.iter().copied().eq(v.iter().copied()));
        assert_eq!(c[CHUNK], CHUNK as u32);
        assert_eq!(c.get(v.len()), None);
        c[2] = 99;
        assert_eq!(c.get(2), Some(&99));
        c.truncate(CHUNK + 1);
        assert_eq!(c.len(), CHUNK + 1);
        assert_eq!(c.iter().count(), CHUNK + 1);
        assert_eq!(c.get(CHUNK + 1), None);
        c.truncate(3);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![0, 1, 99]);
        while c.len() < CHUNK + 2 {
            c.push(7);
        }
        assert_eq!((c.len(), c[CHUNK + 1], c[3]), (CHUNK + 2, 7, 7));
        c.truncate(0);
        assert_eq!((c.len(), c.iter().count()), (0, 0));
    }

    #[test]
    fn a_frozen_copy_keeps_its_values_while_the_array_changes() {
        let mut c = ChunkVec::new();
        for i in 0..(2 * CHUNK + 5) as u32 {
            c.push(i);
        }
        let f = c.freeze();
        assert_eq!(c.read(CHUNK + 1), Some(&(CHUNK as u32 + 1)));
        c.thaw();
        c[3] = 1000;
        c[CHUNK + 1] = 1001;
        c.push(7);
        c.truncate(CHUNK);
        c.push(8);
        assert_eq!(f.len(), 2 * CHUNK + 5);
        assert!(f.iter().copied().eq(0..(2 * CHUNK + 5) as u32));
        assert_eq!(f.get(CHUNK + 1), Some(&(CHUNK as u32 + 1)));
        assert_eq!((c[3], c.len(), c[CHUNK]), (1000, CHUNK + 1, 8));
        // With the snapshot gone, writes take the chunks back without copying.
        drop(f);
        let g = c.freeze();
        drop(g);
        c.thaw();
        c[0] = 5;
        assert_eq!(c.iter().copied().take(2).collect::<Vec<_>>(), vec![5, 1]);
    }

    #[test]
    fn small_arrays_stay_small() {
        let mut c = ChunkVec::new();
        for i in 0..100u64 {
            c.push(i);
        }
        assert!(c.memory_bytes() < 200 * 8, "{}", c.memory_bytes());
    }
}
