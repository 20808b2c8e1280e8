//! `go tool pprof` (Debian's golang-go) reads jpd's kernel profile from the HTTP
//! exporter: under a /dev/zero load `read_zero` is the hottest kernel function, and
//! every value `-top` prints equals what the profile holds.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use crate::support::fleet::go_pprof_top;
use crate::support::jpd::Jpd;
use crate::support::read_dev_zero;
use jp_mct::pprof::Profile;
use prost::Message;

/// Per function name: the sum of the default sample type (samples), from the file.
fn decoded_totals(gz: &[u8]) -> (HashMap<String, i64>, i64) {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("the profile is gzipped");
    let p = Profile::decode(raw.as_slice()).expect("the profile is a profile.proto");
    let mut by_fn = HashMap::new();
    let mut total = 0;
    for s in &p.sample {
        let loc = &p.location[s.location_id[0] as usize - 1];
        let f = &p.function[loc.line[0].function_id as usize - 1];
        *by_fn
            .entry(p.string_table[f.name as usize].clone())
            .or_insert(0) += s.value[0];
        total += s.value[0];
    }
    (by_fn, total)
}

/// A value as pprof prints it (`775`, `6035.11ms`, `1.20s`), in the base unit
/// (nanoseconds for durations).
fn pprof_value(v: &str) -> f64 {
    for (suffix, scale) in [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)] {
        if let Some(n) = v.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or_else(|_| panic!("value {v:?}")) * scale;
        }
    }
    v.parse().unwrap_or_else(|_| panic!("value {v:?}"))
}

/// `go tool pprof -top` rows: (flat, name), and its whole output.
fn go_top(file: &std::path::Path, sample_index: &str) -> (Vec<(f64, String)>, String) {
    let (rows, text) = go_pprof_top(file, sample_index);
    let rows = rows
        .into_iter()
        .map(|(flat, name)| (pprof_value(&flat), name))
        .collect();
    (rows, text)
}

#[test]
fn go_tool_pprof_names_read_zero_with_the_profiles_values() {
    let _one = crate::support::exclusive();
    let jpd = Jpd::start("");
    let http = jpd.http;
    let fetch = std::thread::spawn(move || {
        crate::support::jpd::http_get(http, "/debug/pprof/profile?seconds=4")
    });
    std::thread::sleep(Duration::from_millis(300));
    read_dev_zero(Duration::from_millis(3500));
    let (status, body) = fetch.join().expect("fetch thread");
    assert_eq!(
        status,
        200,
        "GET /debug/pprof/profile: {}",
        String::from_utf8_lossy(&body)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("kernel.pb.gz");
    std::fs::write(&file, &body).expect("write profile");

    let (by_fn, total) = decoded_totals(&body);
    let (rows, text) = go_top(&file, "samples");
    assert_eq!(
        text.lines().find(|l| l.starts_with("Type:")),
        Some("Type: samples"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Total samples = {total} ")),
        "pprof's total is the profile's {total}:\n{text}"
    );
    let kernel: Vec<&(f64, String)> = rows.iter().filter(|(_, n)| !n.starts_with('[')).collect();
    assert_eq!(
        kernel.first().map(|r| r.1.as_str()),
        Some("read_zero"),
        "read_zero is the hottest kernel function:\n{text}"
    );
    // Every row -top prints is exactly the profile's sum for that function.
    assert_eq!(rows.len(), by_fn.len(), "one row per function:\n{text}");
    for (flat, name) in &rows {
        assert_eq!(
            Some(*flat as i64),
            by_fn.get(name).copied(),
            "{name}:\n{text}"
        );
    }
    // The second sample type: cpu time, samples x the period (1/997 s in whole ns);
    // pprof prints it rounded to 3 significant digits or 2 decimals.
    let (rows, cpu) = go_top(&file, "cpu");
    assert!(cpu.lines().any(|l| l == "Type: cpu"), "{cpu}");
    let period = (1_000_000_000 / 997) as f64;
    for (flat, name) in &rows {
        let want = by_fn[name] as f64 * period;
        assert!(
            (flat - want).abs() <= want * 1e-3 + 1e4,
            "{name}: pprof {flat} ns, profile {want} ns\n{cpu}"
        );
    }
    jpd.stop();
}

/// A runaway (or hostile) recursion 100 000 deep: the profile keeps 2048 frames a
/// stack, the contexts below add up under one marked frame, and `go tool pprof` reads it.
#[test]
fn go_tool_pprof_reads_a_deep_chain_capped_with_its_marked_frame() {
    const DEPTH: usize = 100_000;
    let cap = jp_mct::MAX_STACK_FRAMES;
    let mut t = jp_mct::Mct::new("precise");
    let mut parent = 0;
    for d in 0..DEPTH {
        let info = jp_mct::MethodInfo {
            name: format!("Deep.m{}()V", d % 1000).into(),
            file: Some("Deep.java".into()),
        };
        parent = t.add(parent, info, 1, 1);
    }
    let mut gz = Vec::new();
    let folded = jp_mct::write_pprof_folding(&t, jp_mct::PprofOptions::default(), &mut gz)
        .expect("write the profile");
    assert_eq!(folded, (DEPTH - cap) as u64);
    // About cap²/2 location ids, gzipped: far below the uncapped gigabytes.
    assert!(gz.len() < 1 << 20, "{} bytes gzipped", gz.len());
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("deep.pb.gz");
    std::fs::write(&file, &gz).expect("write profile");

    let (rows, text) = go_top(&file, "bytecodes");
    let flat: HashMap<String, f64> = rows.into_iter().map(|(v, n)| (n, v)).collect();
    let marked = format!("[jp: {folded} deeper frames folded]");
    assert_eq!(flat.get(&marked), Some(&(folded as f64)), "{text}");
    // Above the cap every context is its own: m0..m47 three times (depths k, k+1000,
    // k+2000), the others twice.
    assert_eq!(flat.len(), 1001, "{text}");
    for m in 0..1000 {
        let name = format!("Deep.m{m}()");
        let want = if m < cap - 2000 { 3.0 } else { 2.0 };
        assert_eq!(flat.get(&name), Some(&want), "{name}: {text}");
    }
}
