//! The CPU keys of a `jp-mct/1` document (see `json.rs`) read back into an [`MctCpu`]:
//! a context's user-mode CPU, its kernel functions, and its time off CPU. The document
//! has a context's time off CPU by kind and by kernel function apart, not the pairs: with
//! one kind, every function is paired with it; with several, each kind stands alone
//! (an empty function).

use super::{MctError, Reader};
use crate::{MctCpu, OffcpuTime};
use std::sync::Arc;

impl Reader<'_> {
    /// `{"user": n, "kernel": n, "kernel_functions": {F: n, ...}}` of `node`.
    pub(super) fn node_cpu(&mut self, node: usize, cpu: &mut MctCpu) -> Result<(), MctError> {
        self.members(|r, key| {
            match key {
                "user" => {
                    if cpu.user_ns.len() <= node {
                        cpu.user_ns.resize(node + 1, 0);
                    }
                    cpu.user_ns[node] = r.number()?;
                }
                "kernel_functions" => {
                    for (f, ns) in r.counts()? {
                        cpu.kernel.push((node, Arc::from(f.as_str()), ns));
                    }
                }
                _ => r.skip_value()?,
            }
            Ok(())
        })
    }

    /// `{"ns": n, "kinds": {K: n, ...}, "functions": {F: n, ...}}` of `node`.
    pub(super) fn node_offcpu(&mut self, node: usize, cpu: &mut MctCpu) -> Result<(), MctError> {
        let (mut kinds, mut functions) = (Vec::new(), Vec::new());
        self.members(|r, key| {
            match key {
                "kinds" => kinds = r.counts()?,
                "functions" => functions = r.counts()?,
                _ => r.skip_value()?,
            }
            Ok(())
        })?;
        let time = |kind: &str, function: &str, ns| OffcpuTime {
            node,
            kind: Arc::from(kind),
            function: Arc::from(function),
            ns,
        };
        match &kinds[..] {
            [(kind, _)] => cpu
                .offcpu
                .extend(functions.iter().map(|(f, ns)| time(kind, f, *ns))),
            _ => cpu
                .offcpu
                .extend(kinds.iter().map(|(k, ns)| time(k, "", *ns))),
        }
        Ok(())
    }

    /// `{NAME: n, ...}`.
    fn counts(&mut self) -> Result<Vec<(String, u64)>, MctError> {
        let mut out = Vec::new();
        self.members(|r, name| {
            out.push((name.to_string(), r.number()?));
            Ok(())
        })?;
        Ok(out)
    }

    /// An object: `each` reads the value of every key.
    fn members(
        &mut self,
        mut each: impl FnMut(&mut Self, &str) -> Result<(), MctError>,
    ) -> Result<(), MctError> {
        self.expect(b'{')?;
        let mut started = false;
        while self.peek() != Some(b'}') {
            self.separator(started)?;
            started = true;
            let key = self.string()?;
            self.expect(b':')?;
            each(self, &key)?;
        }
        self.expect(b'}')
    }
}

#[cfg(test)]
mod tests {
    use crate::{read_json_cpu, write_json, write_json_cpu, Mct, MctCpu, MethodInfo, OffcpuTime};

    fn wait(node: usize, kind: &str, function: &str, ns: u64) -> OffcpuTime {
        OffcpuTime {
            node,
            kind: kind.into(),
            function: function.into(),
            ns,
        }
    }

    /// What the writer wrote comes back: CPU and kernel functions whole; time off CPU
    /// paired with its function where a context waited for one kind, by kind alone where
    /// it waited for several; the root's and the idle time left out too.
    #[test]
    fn reads_back_the_cpu_and_time_off_cpu_it_can_pair() {
        let mut t = Mct::new("default");
        let m = |name: &str| MethodInfo {
            name: name.into(),
            file: None,
        };
        let a = t.add(0, m("W.a()V"), 1, 1);
        let b = t.add(a, m("W.b()V"), 1, 1);
        let cpu = MctCpu {
            user_ns: vec![0, 0, 30],
            kernel: vec![(b, "read_zero".into(), 7)],
            offcpu: vec![
                wait(0, "lock", "futex_wait", 5),
                wait(a, "sleep", "do_nanosleep", 200),
                wait(a, "sleep", "hrtimer_nanosleep", 20),
                wait(b, "disk", "io_schedule", 11),
                wait(b, "run_queue", "[run queue]", 3),
            ],
            offcpu_idle_hidden_ns: 99,
        };
        let mut v = Vec::new();
        write_json_cpu(&t, Some(&cpu), &mut v).unwrap();
        let (back, read) = read_json_cpu(&v).unwrap();
        let read = read.expect("the document has CPU");
        assert_eq!(read.user_ns, cpu.user_ns);
        assert_eq!(read.kernel, cpu.kernel);
        assert_eq!(read.offcpu_idle_hidden_ns, 99);
        let mut offcpu = read.offcpu.clone();
        offcpu.sort();
        assert_eq!(
            offcpu,
            [
                wait(0, "lock", "futex_wait", 5),
                wait(a, "sleep", "do_nanosleep", 200),
                wait(a, "sleep", "hrtimer_nanosleep", 20),
                wait(b, "disk", "", 11),
                wait(b, "run_queue", "", 3),
            ]
        );
        assert_eq!(back.nodes.len(), t.nodes.len());
        // Without CPU keys: no CPU.
        let mut plain = Vec::new();
        write_json(&t, &mut plain).unwrap();
        assert_eq!(read_json_cpu(&plain).unwrap().1, None);
    }
}
