//! A growable array that never moves what it holds: the first chunk grows like a vector
//! (small trees stay small), later chunks are allocated whole, [`CHUNK`] elements each.
//!
//! Why: trees of millions of nodes grow for the whole life of a JVM. Reallocating one
//! big vector leaves its old block behind in the allocator's heap (glibc stops using
//! mmap for big blocks once one was freed), which cost 15–25 bytes per node of resident
//! memory beyond the arrays themselves; fixed chunks are never freed or moved.

use std::ops::{Index, IndexMut};

const SHIFT: u32 = 14;
/// Elements per chunk.
pub(crate) const CHUNK: usize = 1 << SHIFT;
const MASK: usize = CHUNK - 1;

pub(crate) struct ChunkVec<T> {
    /// Every chunk but the last holds exactly CHUNK elements.
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T: Copy> ChunkVec<T> {
    pub fn new() -> ChunkVec<T> {
        ChunkVec {
            chunks: Vec::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn push(&mut self, x: T) {
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
            }
        }
        self.len += 1;
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> SHIFT).and_then(|c| c.get(i & MASK))
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(i >> SHIFT)
            .and_then(|c| c.get_mut(i & MASK))
    }

    /// Grows to `len` elements with copies of `fill` (never shrinks).
    pub fn grow_to(&mut self, len: usize, fill: T) {
        while self.len < len {
            self.push(fill);
        }
    }

    pub fn truncate(&mut self, len: usize) {
        while self.len > len {
            let Some(last) = self.chunks.last_mut() else {
                break;
            };
            let keep = last.len().saturating_sub(self.len - len);
            self.len -= last.len() - keep;
            last.truncate(keep);
            if last.is_empty() {
                self.chunks.pop();
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.chunks.iter_mut().flat_map(|c| c.iter_mut())
    }

    /// Bytes allocated for elements and chunk pointers.
    pub fn memory_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.capacity() * std::mem::size_of::<T>())
            .sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<T>>()
    }
}

impl<T> Default for ChunkVec<T> {
    fn default() -> ChunkVec<T> {
        ChunkVec {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Index<usize> for ChunkVec<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> SHIFT][i & MASK]
    }
}

impl<T: Copy> IndexMut<usize> for ChunkVec<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> SHIFT][i & MASK]
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
        c.grow_to(CHUNK + 2, 7);
        assert_eq!((c.len(), c[CHUNK + 1], c[3]), (CHUNK + 2, 7, 7));
        c.truncate(0);
        assert_eq!((c.len(), c.iter().count()), (0, 0));
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
