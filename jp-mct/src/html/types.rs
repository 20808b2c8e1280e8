//! The sample types a JVM's flame graph page switches between: the tree's bytecodes, and
//! with jpd's CPU per context its CPU, time off CPU and wall time (nanoseconds). Each type
//! is its own [`FlameTree`] (widths, merged frames and totals differ per type); the page
//! carries them all, so switching needs no round trip.
//!
//! Frames are those of the pprof profile of the same data: a context's kernel-mode CPU is
//! a kernel function's frame under it; its time off CPU is a frame naming the kind of wait
//! ("off-CPU: sleep") under it, over the kernel function it blocked in.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{FlameTree, FrameCounts};
use crate::{Mct, MctCpu};

/// What a flame graph's widths count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleType {
    Bytecodes,
    Cpu,
    Offcpu,
    Wall,
}

impl SampleType {
    pub const ALL: [SampleType; 4] = [
        SampleType::Bytecodes,
        SampleType::Cpu,
        SampleType::Offcpu,
        SampleType::Wall,
    ];

    /// The name in URLs and in the pprof's sample types.
    pub fn key(self) -> &'static str {
        match self {
            SampleType::Bytecodes => "bytecodes",
            SampleType::Cpu => "cpu",
            SampleType::Offcpu => "offcpu",
            SampleType::Wall => "wall",
        }
    }

    pub fn parse(key: &str) -> Option<SampleType> {
        SampleType::ALL.into_iter().find(|t| t.key() == key)
    }

    /// What the page's tooltips and status say the counts are.
    fn unit(self) -> &'static str {
        match self {
            SampleType::Bytecodes => "bytecodes",
            SampleType::Cpu => "ns on CPU",
            SampleType::Offcpu => "ns off CPU",
            SampleType::Wall => "ns of wall time",
        }
    }

    /// The types a tree with `cpu` can be drawn by: bytecodes always; CPU with jpd's CPU
    /// per context; off-CPU and wall time when any time off CPU was counted.
    pub fn of(cpu: Option<&MctCpu>) -> Vec<SampleType> {
        let mut v = vec![SampleType::Bytecodes];
        if let Some(c) = cpu {
            v.push(SampleType::Cpu);
            if !c.offcpu.is_empty() {
                v.extend([SampleType::Offcpu, SampleType::Wall]);
            }
        }
        v
    }
}

/// A context's time off CPU: kind → [(kernel function, ns)].
type WaitsByKind<'c> = BTreeMap<&'c str, Vec<(&'c Arc<str>, u64)>>;

/// The frame of the kind of wait over the kernel functions of a context's time off CPU.
pub const OFFCPU_FRAME: &str = "off-CPU: ";

impl FlameTree {
    /// A JVM's tree drawn by `ty`: readable Java signatures, and (CPU, off CPU, wall) the
    /// kernel functions and kinds of wait as frames under their contexts. Without `cpu`
    /// the time types are empty graphs.
    pub fn from_mct_typed(t: &Mct, cpu: Option<&MctCpu>, ty: SampleType, title: &str) -> FlameTree {
        if ty == SampleType::Bytecodes {
            return FlameTree::from_mct(t, title);
        }
        let empty = MctCpu::default();
        let cpu = cpu.unwrap_or(&empty);
        let on_cpu = ty != SampleType::Offcpu;
        let off_cpu = ty != SampleType::Cpu;
        let mut kernel_of: HashMap<usize, Vec<(&Arc<str>, u64)>> = HashMap::new();
        if on_cpu {
            for (node, f, ns) in &cpu.kernel {
                kernel_of.entry(*node).or_default().push((f, *ns));
            }
        }
        // node → kind → [(function, ns)], sorted for stable pages.
        let mut waits_of: HashMap<usize, WaitsByKind> = HashMap::new();
        if off_cpu {
            for o in &cpu.offcpu {
                let kinds = waits_of.entry(o.node).or_default();
                kinds.entry(&o.kind).or_default().push((&o.function, o.ns));
            }
        }
        let mut g = FlameTree::new(title, ty.unit(), false);
        let leaves = |g: &mut FlameTree, node: usize, frame: usize| {
            for (f, ns) in kernel_of.get(&node).into_iter().flatten() {
                g.add(frame, Arc::clone(f), own(None, *ns), FrameCounts::default());
            }
            for (kind, functions) in waits_of.get(&node).into_iter().flatten() {
                let name: Arc<str> = Arc::from(format!("{OFFCPU_FRAME}{kind}"));
                // No function (a file that has the kinds apart from the functions): the
                // kind's frame holds the time itself.
                let unnamed: u64 = functions
                    .iter()
                    .filter(|(f, _)| f.is_empty())
                    .map(|(_, ns)| ns)
                    .sum();
                let k = g.add(frame, name, own(None, unnamed), FrameCounts::default());
                for (f, ns) in functions.iter().filter(|(f, _)| !f.is_empty()) {
                    g.add(k, Arc::clone(f), own(None, *ns), FrameCounts::default());
                }
            }
        };
        // The root context's time: threads between tasks, no instrumented frame running.
        leaves(&mut g, 0, 0);
        let counts = |i: usize| {
            let user = if on_cpu {
                cpu.user_ns.get(i).copied().unwrap_or(0)
            } else {
                0
            };
            own(Some(t.nodes[i].calls), user)
        };
        g.add_contexts(t, counts, leaves);
        g.sum_inclusive();
        g.subtitle = format!("bba={} · {} calling contexts", t.bba, t.nodes.len() - 1);
        g
    }

    /// Each frame's inclusive count: its own and its children's (children come after
    /// their parents).
    fn sum_inclusive(&mut self) {
        for i in (1..self.nodes.len()).rev() {
            let p = self.nodes[i].parent;
            let inc = self.nodes[i].now.inclusive;
            if p != 0 {
                let at = &mut self.nodes[p].now.inclusive;
                *at = at.saturating_add(inc);
            }
        }
    }
}

/// One graph of `t` per sample type `cpu` allows (see [`SampleType::of`]), each titled
/// `title`. The off-CPU and wall graphs say how much time off CPU of idle threads was
/// left out (`cpu`'s `offcpu_idle_hidden_ns`) and, in `show_all`, how to see it.
pub fn typed_graphs(
    t: &Mct,
    cpu: Option<&MctCpu>,
    title: &str,
    show_all: &str,
) -> Vec<(SampleType, FlameTree)> {
    let hidden = cpu.map_or(0, |c| c.offcpu_idle_hidden_ns);
    SampleType::of(cpu)
        .into_iter()
        .map(|ty| {
            let mut g = FlameTree::from_mct_typed(t, cpu, ty, title);
            if hidden > 0 && matches!(ty, SampleType::Offcpu | SampleType::Wall) {
                g.subtitle.push_str(&idle_note(hidden, show_all));
            }
            (ty, g)
        })
        .collect()
}

/// What a graph of time off CPU says of the idle threads' time it leaves out.
pub fn idle_note(hidden_ns: u64, show_all: &str) -> String {
    // Milliseconds: a few idle threads of a small program wait for less than a second.
    format!(
        " · {:.3} ms off CPU of idle threads (waiting for work) not shown; {show_all}",
        hidden_ns as f64 / 1e6
    )
}

/// Counts of a frame with `ns` of its own (its children's are added after).
fn own(calls: Option<u64>, ns: u64) -> FrameCounts {
    FrameCounts {
        calls,
        inclusive: ns,
        exclusive: ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MethodInfo, OffcpuTime};

    /// "name depth width calls inclusive exclusive" of each frame a page of `g` draws
    /// (calls "-" when none).
    fn frames_of(g: &FlameTree) -> Vec<String> {
        let mut v = Vec::new();
        super::super::write_flame_html(g, 0.0, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        let between = |from: &str, to: &str| {
            let at = s.find(from).unwrap() + from.len();
            s[at..at + s[at..].find(to).unwrap()].to_string()
        };
        let names: Vec<String> = between("\"names\":[\"", "\"]")
            .split("\",\"")
            .map(String::from)
            .collect();
        between("\"frames\":[[", "]]")
            .split("],[")
            .map(|f| {
                let n: Vec<i64> = f.split(',').map(|x| x.parse().unwrap()).collect();
                let calls = if n[3] < 0 {
                    "-".into()
                } else {
                    n[3].to_string()
                };
                format!(
                    "{} {} {} {calls} {} {}",
                    names[n[0] as usize], n[1], n[2], n[4], n[5]
                )
            })
            .collect()
    }

    /// main → a (sleeps, 300 ns off CPU), main → b (spins, 100 ns user + 20 ns kernel);
    /// the root context has 5 ns of a lock wait.
    fn sleep_and_spin() -> (Mct, MctCpu) {
        let mut t = Mct::new("default");
        let m = |name: &str| MethodInfo {
            name: name.into(),
            file: None,
        };
        let main = t.add(0, m("W.main()V"), 1, 10);
        let a = t.add(main, m("W.a()V"), 2, 4);
        let b = t.add(main, m("W.b()V"), 2, 40);
        let mut user_ns = vec![0; t.nodes.len()];
        user_ns[b] = 100;
        let wait = |node, kind: &str, function: &str, ns| OffcpuTime {
            node,
            kind: kind.into(),
            function: function.into(),
            ns,
        };
        let cpu = MctCpu {
            user_ns,
            kernel: vec![(b, "read_zero".into(), 20)],
            offcpu: vec![
                wait(a, "sleep", "do_nanosleep", 200),
                wait(a, "sleep", "hrtimer_nanosleep", 90),
                wait(a, "run_queue", "[run queue]", 10),
                wait(0, "lock", "futex_wait", 5),
            ],
            offcpu_idle_hidden_ns: 0,
        };
        (t, cpu)
    }

    fn frames(ty: SampleType) -> Vec<String> {
        let (t, cpu) = sleep_and_spin();
        frames_of(&FlameTree::from_mct_typed(&t, Some(&cpu), ty, "x"))
    }

    /// Each type's frames: [name, depth, width, calls, inclusive, exclusive], pre-order,
    /// children by name; frames without time in that type are not drawn.
    #[test]
    fn each_type_draws_its_own_time_with_reasons_and_kernel_functions_as_leaves() {
        assert_eq!(
            frames(SampleType::Cpu),
            [
                "W.main() 0 120 1 120 0",
                "W.b() 1 120 2 120 100",
                "read_zero 2 20 - 20 20",
            ]
        );
        assert_eq!(
            frames(SampleType::Offcpu),
            [
                "W.main() 0 300 1 300 0",
                "W.a() 1 300 2 300 0",
                "off-CPU: run_queue 2 10 - 10 0",
                "[run queue] 3 10 - 10 10",
                "off-CPU: sleep 2 290 - 290 0",
                "do_nanosleep 3 200 - 200 200",
                "hrtimer_nanosleep 3 90 - 90 90",
                "off-CPU: lock 0 5 - 5 0",
                "futex_wait 1 5 - 5 5",
            ]
        );
        let wall = frames(SampleType::Wall);
        assert_eq!(wall[0], "W.main() 0 420 1 420 0");
        assert_eq!(wall.len(), 11, "{wall:?}");
        assert_eq!(
            SampleType::of(Some(&sleep_and_spin().1)),
            SampleType::ALL.to_vec()
        );
        assert_eq!(SampleType::of(None), [SampleType::Bytecodes]);
        assert_eq!(
            SampleType::of(Some(&MctCpu::default())),
            [SampleType::Bytecodes, SampleType::Cpu]
        );
    }

    /// A page of every type: one data block of four graphs, a selector naming them, the
    /// default selected.
    #[test]
    fn a_page_carries_every_type_and_a_selector() {
        let (t, cpu) = sleep_and_spin();
        let graphs: Vec<(SampleType, FlameTree)> = SampleType::of(Some(&cpu))
            .into_iter()
            .map(|ty| (ty, FlameTree::from_mct_typed(&t, Some(&cpu), ty, "W")))
            .collect();
        let mut v = Vec::new();
        super::super::write_flame_html_types(&graphs, SampleType::Offcpu, 0.0, &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.contains("<select id=\"type\" autocomplete=\"off\"><option value=\"bytecodes\">bytecodes</option><option value=\"cpu\">cpu</option><option value=\"offcpu\" selected>offcpu</option><option value=\"wall\">wall</option></select>"), "{s}");
        assert!(
            s.contains("{\"types\":[\"bytecodes\",\"cpu\",\"offcpu\",\"wall\"],\"default\":\"offcpu\",\"graphs\":[{\"title\":\"W\",\"subtitle\":\"bba=default · 3 calling contexts\",\"unit\":\"bytecodes\","),
            "{s}"
        );
        assert_eq!(s.matches("\"frames\":[").count(), 4, "{s}");
        assert!(s.contains("\"unit\":\"ns off CPU\",\"diff\":false,\"by_share\":false,\"refresh\":0,\"width\":305,\"total\":305,"), "{s}");
        // One type: the page of one graph, without a selector.
        let mut v = Vec::new();
        super::super::write_flame_html_types(&graphs[..1], SampleType::Bytecodes, 0.0, &mut v)
            .unwrap();
        let one = String::from_utf8(v).unwrap();
        assert!(
            !one.contains("<select") && !one.contains("\"types\""),
            "{one}"
        );
    }
}
