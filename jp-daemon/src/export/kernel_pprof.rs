//! The kernel profile as pprof: a gzipped `perftools.profiles.Profile`
//! (github.com/google/pprof, proto/profile.proto; only the fields used here are
//! declared). Already symbolized — `go tool pprof` and Pyroscope need no kallsyms —
//! a location per readprofile bucket (its first address) or per exact out-of-text
//! IP, inside a mapping for the core kernel text (`[kernel.kallsyms]`,
//! `_stext`..`_etext`) or for the module it belongs to. Addresses are real only for
//! readers who may see `/proc/kallsyms`' addresses; everyone else gets offsets from
//! `_stext` ([`KernelWindow::address_base`]): the names and the layout are there,
//! the KASLR slide is not.
//!
//! Sample types `samples/count` (the default) and `cpu/nanoseconds` (samples × the
//! sampling period). User-mode and idle samples are one pseudo-function each
//! (`[user]`, `[idle]`), kernel samples no function covers are `[unknown]`: the
//! profile's total is every sample taken, so shares are shares of CPU time.
//!
//! The messages and the encoder are jp-mct's (`jp_mct::pprof`), as for the JVM
//! profiles: this module only builds the kernel's profile.

use std::collections::{BTreeMap, HashMap};

use jp_mct::pprof::{
    value, Function, Line, Location, Mapping, Profile, Sample, Strings, ValueType,
};

use std::time::SystemTime;

use crate::store::kernel::profile::bucket_addr;
use crate::store::kernel::symbols::Symbols;
use crate::store::kernel::{CollectorStatus, KernelCounts, ModeCounts};

/// The kernel samples of one time window.
pub struct KernelWindow<'a> {
    /// Subtracted from every address (wrapping): 0 for real addresses, `_stext` for
    /// offsets.
    pub address_base: u64,
    pub modes: ModeCounts,
    pub buckets: &'a HashMap<u64, u64>,
    pub other_ips: &'a HashMap<u64, u64>,
    pub shift: u32,
    pub frequency_hz: u64,
    pub time_nanos: i64,
    pub duration_nanos: i64,
}

/// The profile of `window` (counted from `start` to `now`) for readers outside the
/// host: addresses as offsets from `_stext` (what the pushers send).
pub fn window_profile(
    window: &KernelCounts,
    status: &CollectorStatus,
    symbols: &Symbols,
    start: SystemTime,
    now: SystemTime,
) -> Profile {
    let nanos = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let w = KernelWindow {
        address_base: symbols.text_start,
        modes: window.modes,
        buckets: &window.buckets,
        other_ips: &window.other_ips,
        shift: status.shift,
        frequency_hz: status.frequency_hz,
        time_nanos: start.duration_since(std::time::UNIX_EPOCH).map_or(0, nanos),
        duration_nanos: now.duration_since(start).map_or(0, nanos),
    };
    kernel_pprof(&w, symbols)
}

/// Builds the profile message (not yet encoded).
pub fn kernel_pprof(w: &KernelWindow<'_>, symbols: &Symbols) -> Profile {
    let mut strings = Strings::default();
    let samples_t = strings.get("samples");
    let count_u = strings.get("count");
    let cpu_t = strings.get("cpu");
    let ns_u = strings.get("nanoseconds");
    let period_ns = 1_000_000_000 / w.frequency_hz.max(1);

    // Address → samples, in address order so that the output is deterministic.
    let mut by_addr: BTreeMap<u64, u64> = BTreeMap::new();
    for (&bucket, &n) in w.buckets {
        match bucket_addr(symbols.text_start, bucket, w.shift) {
            Some(a) => *by_addr.entry(a).or_default() += n,
            None => *by_addr.entry(0).or_default() += n,
        }
    }
    for (&ip, &n) in w.other_ips {
        *by_addr.entry(ip).or_default() += n;
    }

    let mut p = Profile {
        sample_type: vec![
            ValueType {
                r#type: samples_t,
                unit: count_u,
            },
            ValueType {
                r#type: cpu_t,
                unit: ns_u,
            },
        ],
        period_type: Some(ValueType {
            r#type: cpu_t,
            unit: ns_u,
        }),
        period: value(period_ns),
        time_nanos: w.time_nanos,
        duration_nanos: w.duration_nanos,
        default_sample_type: samples_t,
        ..Profile::default()
    };
    let kernel_name = strings.get("[kernel.kallsyms]");
    p.mapping.push(Mapping {
        id: 1,
        memory_start: symbols.text_start,
        memory_limit: symbols.text_end,
        file_offset: 0,
        filename: kernel_name,
        has_functions: true,
    });
    // Module name → mapping index in p.mapping, its range grown over the addresses seen.
    let mut module_mapping: HashMap<String, usize> = HashMap::new();
    let mut function_ids: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut function = |p: &mut Profile, strings: &mut Strings, name: &str| -> u64 {
        let key = (name.to_string(), None);
        if let Some(&id) = function_ids.get(&key) {
            return id;
        }
        let id = p.function.len() as u64 + 1;
        let n = strings.get(name);
        p.function.push(Function {
            id,
            name: n,
            system_name: n,
            ..Function::default()
        });
        function_ids.insert(key, id);
        id
    };

    for (&addr, &n) in &by_addr {
        if n == 0 {
            continue;
        }
        let sym = (addr != 0).then(|| symbols.lookup(addr)).flatten();
        let (mapping_id, fid) = match sym {
            Some(s) => {
                let mapping_id = match &s.module {
                    None => 1,
                    Some(m) => {
                        let i = *module_mapping.entry(m.clone()).or_insert_with(|| {
                            let filename = strings.get(&format!("[{m}]"));
                            p.mapping.push(Mapping {
                                id: p.mapping.len() as u64 + 1,
                                memory_start: addr,
                                memory_limit: addr,
                                file_offset: 0,
                                filename,
                                has_functions: true,
                            });
                            p.mapping.len() - 1
                        });
                        if let Some(mp) = p.mapping.get_mut(i) {
                            mp.memory_start = mp.memory_start.min(s.addr);
                            mp.memory_limit = mp.memory_limit.max(s.addr + s.len.max(1));
                        }
                        i as u64 + 1
                    }
                };
                let name = match &s.module {
                    Some(m) => format!("{} [{m}]", s.name),
                    None => s.name.clone(),
                };
                (mapping_id, function(&mut p, &mut strings, &name))
            }
            None => (0, function(&mut p, &mut strings, "[unknown]")),
        };
        let id = p.location.len() as u64 + 1;
        p.location.push(Location {
            id,
            mapping_id,
            address: addr,
            line: vec![Line { function_id: fid }],
        });
        p.sample.push(Sample {
            location_id: vec![id],
            value: vec![value(n), value(n.saturating_mul(period_ns))],
        });
    }
    // The kernel samples not in any histogram (should be none) stay visible too.
    let in_histograms: u64 = by_addr.values().sum();
    let missing = w.modes.kernel.saturating_sub(in_histograms);
    for (name, n) in [
        ("[user]", w.modes.user),
        ("[idle]", w.modes.idle),
        ("[unknown]", missing),
    ] {
        if n == 0 {
            continue;
        }
        let fid = function(&mut p, &mut strings, name);
        let id = p.location.len() as u64 + 1;
        p.location.push(Location {
            id,
            mapping_id: 0,
            address: 0,
            line: vec![Line { function_id: fid }],
        });
        p.sample.push(Sample {
            location_id: vec![id],
            value: vec![value(n), value(n.saturating_mul(period_ns))],
        });
    }
    p.string_table = strings.into_table();
    rebase(&mut p, w.address_base);
    p
}

/// Every address of `p` (mappings and locations) less `base`; address 0 (no address)
/// stays 0.
fn rebase(p: &mut Profile, base: u64) {
    if base == 0 {
        return;
    }
    let shift = |a: u64| if a == 0 { 0 } else { a.wrapping_sub(base) };
    for m in &mut p.mapping {
        m.memory_start = shift(m.memory_start);
        m.memory_limit = shift(m.memory_limit);
    }
    for l in &mut p.location {
        l.address = shift(l.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kernel::symbols::test_symbols;
    use crate::store::kernel::KernelCounts;
    use jp_mct::pprof::gzip;
    use prost::Message as _;

    fn name(p: &Profile, loc: u64) -> &str {
        let l = &p.location[loc as usize - 1];
        let f = &p.function[l.line[0].function_id as usize - 1];
        &p.string_table[f.name as usize]
    }

    #[test]
    fn buckets_become_addressed_locations_in_their_mappings() {
        let symbols = test_symbols();
        let buckets: HashMap<u64, u64> = [(0, 7), (1, 3), (0x10, 5)].into();
        let others: HashMap<u64, u64> = [(0xffff_ffff_c000_1004, 2)].into();
        let w = KernelWindow {
            address_base: 0,
            modes: ModeCounts {
                kernel: 17,
                user: 40,
                idle: 0,
            },
            buckets: &buckets,
            other_ips: &others,
            shift: 4,
            frequency_hz: 1000,
            time_nanos: 1,
            duration_nanos: 5_000_000_000,
        };
        let p = kernel_pprof(&w, &symbols);
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gzip(&p).unwrap()[..])
            .read_to_end(&mut raw)
            .unwrap();
        let decoded = Profile::decode(raw.as_slice()).unwrap();
        assert_eq!(decoded, p);
        let rows: Vec<(u64, u64, &str, i64, i64)> = p
            .sample
            .iter()
            .map(|s| {
                let l = &p.location[s.location_id[0] as usize - 1];
                (
                    l.address,
                    l.mapping_id,
                    name(&p, l.id),
                    s.value[0],
                    s.value[1],
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (0xffff_ffff_8100_0000, 1, "read_iter_zero", 7, 7_000_000),
                (0xffff_ffff_8100_0010, 1, "read_iter_zero", 3, 3_000_000),
                (
                    0xffff_ffff_8100_0100,
                    1,
                    "clear_user_rep_good",
                    5,
                    5_000_000
                ),
                (0xffff_ffff_c000_1004, 2, "e1000_intr [e1000]", 2, 2_000_000),
                (0, 0, "[user]", 40, 40_000_000),
            ]
        );
        assert_eq!(p.mapping[0].memory_start, 0xffff_ffff_8100_0000);
        assert_eq!(p.mapping[0].memory_limit, 0xffff_ffff_8100_0400);
        assert_eq!(
            p.string_table[p.mapping[0].filename as usize],
            "[kernel.kallsyms]"
        );
        assert_eq!(
            (p.mapping[1].memory_start, p.mapping[1].memory_limit),
            (0xffff_ffff_c000_1000, 0xffff_ffff_c000_1100)
        );
        assert_eq!(p.string_table[p.mapping[1].filename as usize], "[e1000]");
        assert_eq!(p.period, 1_000_000);
        assert_eq!(p.function.len(), 4, "one function per symbol");
        assert_eq!(p.string_table[0], "");

        // Offsets from _stext: the same profile, no address of the kernel's layout.
        let offsets = kernel_pprof(
            &KernelWindow {
                address_base: symbols.text_start,
                ..w
            },
            &symbols,
        );
        let addresses =
            |p: &Profile| -> Vec<u64> { p.location.iter().map(|l| l.address).collect() };
        assert_eq!(addresses(&offsets), [0, 0x10, 0x100, 0x3f00_1004, 0]);
        assert_eq!(
            offsets
                .mapping
                .iter()
                .map(|m| (m.memory_start, m.memory_limit))
                .collect::<Vec<_>>(),
            [(0, 0x400), (0x3f00_1000, 0x3f00_1100)]
        );
        let mut same = offsets.clone();
        same.location.iter_mut().for_each(|l| l.address = 0);
        same.mapping
            .iter_mut()
            .for_each(|m| (m.memory_start, m.memory_limit) = (0, 0));
        let mut real = p.clone();
        real.location.iter_mut().for_each(|l| l.address = 0);
        real.mapping
            .iter_mut()
            .for_each(|m| (m.memory_start, m.memory_limit) = (0, 0));
        assert_eq!(same, real, "only the addresses differ");
    }

    use std::io::Read as _;

    #[test]
    fn window_is_the_difference() {
        let mut a = KernelCounts::default();
        a.buckets.insert(1, 10);
        a.modes.user = 4;
        let mut b = a.clone();
        b.buckets.insert(1, 15);
        b.buckets.insert(2, 1);
        b.modes.user = 9;
        let d = b.since(&a);
        assert_eq!(d.buckets, [(1, 5), (2, 1)].into());
        assert_eq!(d.modes.user, 5);
        let d = a.since(&a);
        assert!(d.buckets.is_empty());
    }
}
