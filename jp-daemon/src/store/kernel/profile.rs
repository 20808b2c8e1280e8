//! readprofile-style aggregation: per kernel function, the samples of the buckets it
//! covers plus the exact-address samples outside core text, and its *load*.
//!
//! Definitions (following util-linux `readprofile`):
//! - bucket `i` covers `[_stext + (i << shift), _stext + ((i + 1) << shift))` and is
//!   attributed whole to the function containing its first address,
//!   `_stext + (i << shift)`. A bucket that spans the end of one function and the start
//!   of the next therefore counts for the first. (util-linux's loop compares the
//!   *1-based* `/proc/profile` index — slot 0 holds the step — with each function's
//!   start bucket, which in effect shifts attribution by one bucket towards later
//!   functions; jp does not reproduce that off-by-one.)
//! - **load** = samples / function length in bytes, exactly what readprofile prints as
//!   `this / (double)fn_len` (`%8.4f`), the length being the distance to the next
//!   symbol. A function of unknown length (0) gets load 0.
//! - the total line's load is total samples / (`_etext` - `_stext`).
//! - samples that no function covers are reported as `unknown` (readprofile's
//!   `*unknown*` line), never dropped.
//! - idle-task samples never reach the histograms (the sampler counts them apart), so
//!   they are excluded from every function by construction.
use std::collections::HashMap;

use super::symbols::{Symbol, Symbols};

/// One function's share.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionHits {
    pub name: String,
    /// `None` for core kernel text.
    pub module: Option<String>,
    pub addr: u64,
    pub len: u64,
    pub samples: u64,
    /// samples / len (0 if the length is unknown).
    pub load: f64,
}

/// A symbolized histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Sorted by samples (descending), then address.
    pub functions: Vec<FunctionHits>,
    /// Samples attributed to a function (the sum over `functions`).
    pub total: u64,
    /// Samples no function covers.
    pub unknown: u64,
    /// `_etext - _stext`, for the total load.
    pub text_len: u64,
}

impl Profile {
    pub fn top(&self, n: usize) -> &[FunctionHits] {
        &self.functions[..n.min(self.functions.len())]
    }

    /// readprofile's total line: all attributed samples over the core text length.
    pub fn total_load(&self) -> f64 {
        load(self.total, self.text_len)
    }
}

/// readprofile's load: ticks per byte of function.
pub fn load(samples: u64, len: u64) -> f64 {
    if len == 0 {
        0.0
    } else {
        samples as f64 / len as f64
    }
}

/// First address of bucket `bucket`.
pub fn bucket_addr(text_start: u64, bucket: u64, shift: u32) -> Option<u64> {
    let offset = bucket.checked_shl(shift).filter(|o| o >> shift == bucket)?;
    text_start.checked_add(offset)
}

/// Bucket of `ip`, as the sampler computes it; `None` outside `[_stext, _etext)`.
pub fn bucket_of(text_start: u64, text_end: u64, ip: u64, shift: u32) -> Option<u64> {
    (text_start..text_end)
        .contains(&ip)
        .then(|| (ip - text_start) >> shift)
}

/// Aggregates readprofile `buckets` (bucket → samples) and exact kernel addresses
/// outside core text (`other_ips`: address → samples) per function.
pub fn aggregate(
    buckets: &HashMap<u64, u64>,
    other_ips: &HashMap<u64, u64>,
    symbols: &Symbols,
    shift: u32,
) -> Profile {
    let mut by_fn: HashMap<u64, (&Symbol, u64)> = HashMap::new();
    let mut unknown = 0u64;
    let bucket_hits = buckets.iter().map(|(&bucket, &n)| {
        let sym = bucket_addr(symbols.text_start, bucket, shift)
            .filter(|&a| a < symbols.text_end)
            .and_then(|a| symbols.lookup(a));
        (sym, n)
    });
    let other_hits = other_ips.iter().map(|(&ip, &n)| (symbols.lookup(ip), n));
    for (sym, n) in bucket_hits.chain(other_hits) {
        match sym {
            Some(s) => by_fn.entry(s.addr).or_insert((s, 0)).1 += n,
            None => unknown += n,
        }
    }
    let mut functions: Vec<FunctionHits> = by_fn
        .into_values()
        .filter(|(_, n)| *n > 0)
        .map(|(s, samples)| FunctionHits {
            name: s.name.clone(),
            module: s.module.clone(),
            addr: s.addr,
            len: s.len,
            samples,
            load: load(samples, s.len),
        })
        .collect();
    functions.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.addr.cmp(&b.addr)));
    let total = functions.iter().map(|f| f.samples).sum();
    Profile {
        functions,
        total,
        unknown,
        text_len: symbols.text_end.saturating_sub(symbols.text_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // _stext = 0x1000; functions a [0x1000,0x1028), b [0x1028,0x1100),
    // c [0x1100,0x1200) (ends at _etext); m in a module, 0x80 long.
    const MAP: &str = "\
0000000000001000 T _stext
0000000000001000 T a
0000000000001028 t b
0000000000001100 T c
0000000000001200 T _etext
0000000000009000 t m\t[virtio_blk]
0000000000009080 t m2\t[virtio_blk]
";

    #[test]
    fn bucket_arithmetic() {
        // shift 4: 16-byte buckets.
        assert_eq!(bucket_of(0x1000, 0x1200, 0x1000, 4), Some(0));
        assert_eq!(bucket_of(0x1000, 0x1200, 0x100f, 4), Some(0));
        assert_eq!(bucket_of(0x1000, 0x1200, 0x1010, 4), Some(1));
        assert_eq!(bucket_of(0x1000, 0x1200, 0x11ff, 4), Some(0x1f));
        assert_eq!(bucket_of(0x1000, 0x1200, 0x1200, 4), None);
        assert_eq!(bucket_of(0x1000, 0x1200, 0xfff, 4), None);
        assert_eq!(bucket_addr(0x1000, 0x1f, 4), Some(0x11f0));
        assert_eq!(bucket_addr(0x1000, 3, 0), Some(0x1003));
        assert_eq!(
            bucket_addr(0x1000, u64::MAX, 4),
            None,
            "overflow is not wrapped"
        );
        // Round trip for every bucket of the text.
        for ip in 0x1000..0x1200u64 {
            let b = bucket_of(0x1000, 0x1200, ip, 5).unwrap();
            let start = bucket_addr(0x1000, b, 5).unwrap();
            assert!(start <= ip && ip < start + 32);
        }
    }

    #[test]
    fn buckets_are_attributed_by_their_first_address_and_load_is_per_byte() {
        let syms = Symbols::parse(MAP).unwrap();
        let buckets: HashMap<u64, u64> = [
            (0, 5),  // 0x1000: a
            (2, 1), // 0x1020: a (the bucket spans a's end and b's start: its first address decides)
            (3, 4), // 0x1030: b
            (15, 2), // 0x10f0: b
            (16, 8), // 0x1100: c
            (31, 1), // 0x11f0: c
        ]
        .into();
        let others: HashMap<u64, u64> = [
            (0x9004, 3), // m
            (0x907f, 1), // m
            (0x9080, 2), // m2 (last symbol: unknown length, only its address matches)
            (0x9081, 7), // nowhere
        ]
        .into();
        let p = aggregate(&buckets, &others, &syms, 4);
        let got: Vec<(&str, Option<&str>, u64, u64)> = p
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.module.as_deref(), f.samples, f.len))
            .collect();
        assert_eq!(
            got,
            vec![
                ("c", None, 9, 0x100),
                ("a", None, 6, 0x28),
                ("b", None, 6, 0xd8),
                ("m", Some("virtio_blk"), 4, 0x80),
                ("m2", Some("virtio_blk"), 2, 0),
            ]
        );
        let load_of = |name: &str| p.functions.iter().find(|f| f.name == name).unwrap().load;
        assert_eq!(load_of("a"), 6.0 / 40.0);
        assert_eq!(load_of("b"), 6.0 / 216.0);
        assert_eq!(load_of("c"), 9.0 / 256.0);
        assert_eq!(load_of("m"), 4.0 / 128.0);
        assert_eq!(load_of("m2"), 0.0);
        assert_eq!(p.total, 27);
        assert_eq!(p.unknown, 7);
        assert_eq!(p.text_len, 0x200);
        assert_eq!(p.total_load(), 27.0 / 512.0);
        assert_eq!(p.top(2).len(), 2);
        assert_eq!(p.top(99).len(), 5);
    }

    #[test]
    fn buckets_outside_text_are_unknown() {
        let syms = Symbols::parse(MAP).unwrap();
        // Bucket 32 starts at _etext; with shift 6, bucket 7 starts at 0x11c0 (c).
        let p = aggregate(&[(32, 2)].into(), &HashMap::new(), &syms, 4);
        assert_eq!((p.total, p.unknown), (0, 2));
        let p = aggregate(&[(7, 2)].into(), &HashMap::new(), &syms, 6);
        assert_eq!(p.functions[0].name, "c");
        assert_eq!(p.functions[0].samples, 2);
    }
}
