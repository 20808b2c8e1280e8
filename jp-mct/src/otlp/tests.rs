use super::proto::profiles::v1development::{Profile, ProfilesData};
use super::*;
use crate::pprof::{MctCpu, TimeRange};
use crate::tests::paper_tree;
use prost::Message as _;
use std::sync::Arc;

const MAIN: &str = "Paper.main([Ljava/lang/String;)V";
const INIT: &str = "Paper.<init>()V";
const F: &str = "Paper.f()V";
const G: &str = "Paper.g(I)V";
const H: &str = "Paper.h()V";

fn decode(options: PprofOptions<'_>) -> ProfilesData {
    let mut v = Vec::new();
    let resource = vec![
        string_attribute("service.name", "Paper"),
        int_attribute("process.pid", 42),
    ];
    write_otlp(&paper_tree(), options, resource, &mut v).unwrap();
    ProfilesData::decode(v.as_slice()).unwrap()
}

/// A profile as (type/unit, [(stack system names leaf first joined by '<', value)]).
fn readable(d: &ProfilesData, p: &Profile) -> (String, Vec<(String, i64)>) {
    let dict = d.dictionary.as_ref().unwrap();
    let s = |i: i32| dict.string_table[i as usize].clone();
    let ty = p.sample_type.unwrap();
    let samples = p
        .samples
        .iter()
        .map(|smp| {
            let stack = &dict.stack_table[smp.stack_index as usize];
            let names: Vec<String> = stack
                .location_indices
                .iter()
                .map(|&l| {
                    let loc = &dict.location_table[l as usize];
                    assert_eq!(loc.lines.len(), 1);
                    let f = &dict.function_table[loc.lines[0].function_index as usize];
                    s(f.system_name_strindex)
                })
                .collect();
            assert_eq!(smp.values.len(), 1);
            (names.join("<"), smp.values[0])
        })
        .collect();
    (
        format!("{}/{}", s(ty.type_strindex), s(ty.unit_strindex)),
        samples,
    )
}

fn profiles(d: &ProfilesData) -> Vec<&Profile> {
    d.resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
        .collect()
}

fn stacks() -> [String; 6] {
    [
        MAIN.to_string(),
        format!("{INIT}<{MAIN}"),
        format!("{F}<{MAIN}"),
        format!("{G}<{F}<{MAIN}"),
        format!("{H}<{G}<{F}<{MAIN}"),
        format!("{H}<{F}<{MAIN}"),
    ]
}

#[test]
fn paper_example_has_exact_tables() {
    let d = decode(PprofOptions::default());
    let dict = d.dictionary.as_ref().unwrap();
    let s = |i: i32| dict.string_table[i as usize].clone();
    // Entry 0 of every table is the zero value.
    assert_eq!(dict.string_table[0], "");
    assert_eq!(dict.mapping_table, vec![Default::default()]);
    assert_eq!(dict.link_table, vec![Default::default()]);
    assert_eq!(dict.attribute_table, vec![Default::default()]);
    assert_eq!(dict.location_table[0], Default::default());
    assert_eq!(dict.function_table[0], Default::default());
    assert_eq!(dict.stack_table[0], Default::default());
    // One function and one location per method (h is in two contexts), one stack per
    // context, no string twice.
    let functions: Vec<(String, String, String)> = dict.function_table[1..]
        .iter()
        .map(|f| {
            (
                s(f.name_strindex),
                s(f.system_name_strindex),
                s(f.filename_strindex),
            )
        })
        .collect();
    let java = |m: &str| crate::java_signature(m);
    let file = || "Paper.java".to_string();
    assert_eq!(
        functions,
        [MAIN, INIT, F, G, H].map(|m| (java(m), m.to_string(), file()))
    );
    assert_eq!(dict.location_table.len(), 6);
    for (i, l) in dict.location_table[1..].iter().enumerate() {
        assert_eq!((l.mapping_index, l.address), (0, 0));
        assert_eq!(l.lines.len(), 1);
        assert_eq!(l.lines[0].function_index, i as i32 + 1);
    }
    let stack_locations: Vec<Vec<i32>> = dict
        .stack_table
        .iter()
        .map(|st| st.location_indices.clone())
        .collect();
    assert_eq!(
        stack_locations,
        vec![
            vec![],
            vec![1],
            vec![2, 1],
            vec![3, 1],
            vec![4, 3, 1],
            vec![5, 4, 3, 1],
            vec![5, 3, 1]
        ]
    );
    let mut strings = dict.string_table.clone();
    strings.sort();
    strings.dedup();
    assert_eq!(strings.len(), dict.string_table.len());
    // One resource, one scope, a profile per sample type.
    assert_eq!(d.resource_profiles.len(), 1);
    let r = &d.resource_profiles[0];
    let attrs = &r.resource.as_ref().unwrap().attributes;
    assert_eq!(attrs[0], string_attribute("service.name", "Paper"));
    assert_eq!(attrs[1], int_attribute("process.pid", 42));
    let scope = r.scope_profiles[0].scope.as_ref().unwrap();
    assert_eq!(scope.name, SCOPE_NAME);
    let ps = profiles(&d);
    let [a, b, c, d4, e, f] = stacks();
    assert_eq!(
        readable(&d, ps[0]),
        (
            "calls/count".to_string(),
            vec![
                (a.clone(), 1),
                (b.clone(), 1),
                (c.clone(), 1),
                (d4.clone(), 10),
                (e.clone(), 55),
                (f.clone(), 10)
            ]
        )
    );
    assert_eq!(
        readable(&d, ps[1]),
        (
            "bytecodes/count".to_string(),
            vec![(a, 5), (b, 3), (c, 106), (d4, 445), (e, 55), (f, 10)]
        )
    );
    assert_eq!(ps.len(), 2);
    assert_ne!(ps[0].profile_id, ps[1].profile_id);
    assert_eq!(ps[0].profile_id.len(), 16);
}

#[test]
fn cpu_is_a_third_profile_with_kernel_frames() {
    let cpu = MctCpu {
        // Nodes in insertion order: root, main, f, <init>, g, h under f, h under g.
        user_ns: vec![0, 0, 700, 0, 0, 0, 900],
        kernel: vec![(2, Arc::from("do_syscall_64"), 300)],
        ..MctCpu::default()
    };
    let options = PprofOptions {
        cpu: Some(&cpu),
        time: Some(TimeRange {
            time_nanos: 1_000,
            duration_nanos: 10_000_000_000,
        }),
    };
    let d = decode(options);
    let ps = profiles(&d);
    assert_eq!(ps.len(), 3);
    for p in &ps {
        assert_eq!((p.time_unix_nano, p.duration_nano), (1_000, 10_000_000_000));
    }
    // calls and bytecodes leave the kernel sample (0 calls, 0 bytecodes) out.
    assert_eq!(readable(&d, ps[0]).1.len(), 6);
    assert_eq!(readable(&d, ps[1]).1.len(), 6);
    let [_, _, c, _, e, _] = stacks();
    assert_eq!(
        readable(&d, ps[2]),
        (
            "cpu/nanoseconds".to_string(),
            vec![
                (c.clone(), 700),
                (e, 900),
                (format!("do_syscall_64<{c}"), 300)
            ]
        )
    );
    let dict = d.dictionary.as_ref().unwrap();
    let kernel = dict.function_table.last().unwrap();
    assert_eq!(
        dict.string_table[kernel.filename_strindex as usize],
        crate::pprof::KERNEL_FILE
    );
}

/// Off-CPU time (jpd's scheduler program) is two more profiles, `offcpu` and `wall`
/// (= cpu + offcpu), as pprof has two more sample types: the exporter's requests and
/// `jpctl jvm export --format otlp` carry them with no change of their own.
#[test]
fn offcpu_and_wall_are_profiles_of_their_own() {
    let cpu = MctCpu {
        // Nodes in insertion order: root, main, f, <init>, g, h under f, h under g.
        user_ns: vec![0, 0, 700, 0, 0, 0, 0],
        offcpu: vec![
            crate::pprof::OffcpuTime {
                node: 2,
                kind: Arc::from("lock"),
                function: Arc::from("futex_do_wait"),
                ns: 5_000,
            },
            crate::pprof::OffcpuTime {
                node: 6,
                kind: Arc::from("sleep"),
                function: Arc::from("do_nanosleep"),
                ns: 9_000,
            },
        ],
        ..MctCpu::default()
    };
    let options = PprofOptions {
        cpu: Some(&cpu),
        time: None,
    };
    let d = decode(options);
    let ps = profiles(&d);
    let types: Vec<String> = ps.iter().map(|p| readable(&d, p).0).collect();
    assert_eq!(
        types,
        [
            "calls/count",
            "bytecodes/count",
            "cpu/nanoseconds",
            "offcpu/nanoseconds",
            "wall/nanoseconds"
        ]
    );
    let [_, _, c, _, e, _] = stacks();
    let lock = format!("futex_do_wait<off-CPU: lock<{c}");
    let sleep = format!("do_nanosleep<off-CPU: sleep<{e}");
    assert_eq!(readable(&d, ps[2]).1, vec![(c.clone(), 700)]);
    assert_eq!(
        readable(&d, ps[3]).1,
        vec![(lock.clone(), 5_000), (sleep.clone(), 9_000)]
    );
    assert_eq!(
        readable(&d, ps[4]).1,
        vec![(c, 700), (lock, 5_000), (sleep, 9_000)]
    );
}

#[test]
fn resources_share_one_dictionary() {
    let mut b = OtlpBuilder::default();
    let t = paper_tree();
    for pid in [1, 2] {
        add_mct(
            &mut b,
            &t,
            PprofOptions::default(),
            vec![int_attribute("process.pid", pid)],
        );
    }
    assert_eq!(b.profiles(), 4);
    let two = b.finish();
    let one = decode(PprofOptions::default());
    assert_eq!(two.resource_profiles.len(), 2);
    assert_eq!(two.dictionary, one.dictionary);
    for r in &two.resource_profiles {
        let mine = &r.scope_profiles[0].profiles;
        assert_eq!(readable(&two, &mine[1]), readable(&one, profiles(&one)[1]));
    }
}
