//! `JP_JVM_PID_BITS`: one bit per tgid, the switch program's test of "is this process
//! tracked" (an array look-up the verifier inlines, where `JP_JVM_PIDS` is a hash). It
//! is kept a superset of `JP_JVM_PIDS`' keys at every moment: a JVM's bit is set before
//! the JVM enters `JP_JVM_PIDS` and cleared after it left, so the program never misses
//! a tracked process between two writes (a stray bit only costs a hash look-up).
use std::collections::{BTreeMap, HashSet};

/// The maps a change of the tracked JVMs is written to (the kernel's, a test's).
pub(super) trait PidMaps {
    fn set_word(&mut self, index: u32, word: u64);
    fn insert_pid(&mut self, tgid: u32);
    fn remove_pid(&mut self, tgid: u32);
}

/// The bitmap's words as last written (the zero words left out).
#[derive(Default)]
pub(super) struct PidBits {
    written: BTreeMap<u32, u64>,
}

impl PidBits {
    /// Moves the tracked JVMs from `old` to `new`: the bits of both first, then the
    /// pids map, then the bits of `new` alone.
    pub(super) fn move_pids(
        &mut self,
        old: &HashSet<u32>,
        new: &HashSet<u32>,
        maps: &mut dyn PidMaps,
    ) {
        self.write(&words(old.union(new)), maps);
        for &p in old.difference(new) {
            maps.remove_pid(p);
        }
        for &p in new.difference(old) {
            maps.insert_pid(p);
        }
        self.write(&words(new.iter()), maps);
    }

    /// Writes the words that differ from what was written.
    fn write(&mut self, want: &BTreeMap<u32, u64>, maps: &mut dyn PidMaps) {
        let gone: Vec<u32> = self
            .written
            .keys()
            .filter(|i| !want.contains_key(i))
            .copied()
            .collect();
        for i in gone {
            maps.set_word(i, 0);
            self.written.remove(&i);
        }
        for (&i, &w) in want {
            if self.written.get(&i) != Some(&w) {
                maps.set_word(i, w);
                self.written.insert(i, w);
            }
        }
    }
}

/// The bitmap's non-zero words for `pids`: bit `tgid % 64` of word `tgid / 64`.
fn words<'a>(pids: impl Iterator<Item = &'a u32>) -> BTreeMap<u32, u64> {
    let mut words = BTreeMap::new();
    for &p in pids {
        *words.entry(p / 64).or_insert(0) |= 1u64 << (p % 64);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's maps as the program sees them after each single write.
    #[derive(Default)]
    struct Watched {
        bits: BTreeMap<u32, u64>,
        pids: HashSet<u32>,
        writes: usize,
    }

    impl Watched {
        fn check(&self) {
            for &p in &self.pids {
                let word = self.bits.get(&(p / 64)).copied().unwrap_or(0);
                assert!(word & (1 << (p % 64)) != 0, "{p} tracked without its bit");
            }
        }
    }

    impl PidMaps for Watched {
        fn set_word(&mut self, index: u32, word: u64) {
            self.bits.insert(index, word);
            self.writes += 1;
            self.check();
        }
        fn insert_pid(&mut self, tgid: u32) {
            self.pids.insert(tgid);
            self.check();
        }
        fn remove_pid(&mut self, tgid: u32) {
            self.pids.remove(&tgid);
            self.check();
        }
    }

    fn set(pids: &[u32]) -> HashSet<u32> {
        pids.iter().copied().collect()
    }

    #[test]
    fn the_bits_cover_the_tracked_jvms_at_every_write_and_end_exact() {
        let mut bits = PidBits::default();
        let mut maps = Watched::default();
        // JVMs arriving, one leaving while another with a pid in the same word arrives,
        // all leaving: the pids in one word (64..127) and in others.
        let steps = [
            set(&[]),
            set(&[70, 4_194_303]),
            set(&[70, 71, 4_194_303]),
            set(&[71, 127, 5]),
            set(&[5]),
            set(&[]),
        ];
        for pair in steps.windows(2) {
            bits.move_pids(&pair[0], &pair[1], &mut maps);
            assert_eq!(maps.pids, pair[1]);
            let exact: BTreeMap<u32, u64> = words(pair[1].iter());
            let nonzero: BTreeMap<u32, u64> = maps
                .bits
                .iter()
                .filter(|(_, w)| **w != 0)
                .map(|(i, w)| (*i, *w))
                .collect();
            assert_eq!(nonzero, exact, "after {:?} → {:?}", pair[0], pair[1]);
        }
        assert!(maps.bits.values().all(|w| *w == 0));
    }

    #[test]
    fn an_unchanged_set_writes_nothing() {
        let mut bits = PidBits::default();
        let mut maps = Watched::default();
        let jvms = set(&[100, 200]);
        bits.move_pids(&set(&[]), &jvms, &mut maps);
        let writes = maps.writes;
        bits.move_pids(&jvms, &jvms, &mut maps);
        assert_eq!(maps.writes, writes);
    }
}
