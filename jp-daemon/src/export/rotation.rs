//! The fleet rotation in `/metrics`: what each JVM's windows are estimated to cost, the
//! duty cycle the plan gives it, the CPU paid in rotation windows, and the duty cycle the
//! fleet actually had.
use super::prometheus::Family;
use crate::windows::rotation::{JvmRotation, RotationStats};

/// A per-JVM family: its name, help, and value.
type PerJvm = (&'static str, &'static str, fn(&JvmRotation) -> f64);

pub fn render(out: &mut String, stats: &RotationStats) {
    let name = "jp_jvm_window_cpu_seconds_total";
    Family::header(
        out,
        name,
        "counter",
        "CPU the JVMs spent while their exact windows were open, from jpd's per-process CPU readings.",
    )
    .sample(name, &[("origin", "rotation")], stats.window_cpu_seconds);
    let per_jvm: [PerJvm; 3] = [
        (
            "jp_jvm_rotation_window_cost",
            "Estimated extra CPU of an exact window in this JVM, as a ratio to its CPU outside windows (1: a window doubles it); the prior until measured.",
            |j| j.cost,
        ),
        (
            "jp_jvm_rotation_cost_measurements",
            "Windows the cost estimate of this JVM was measured on (0: still the prior).",
            |j| f64::from(j.measured),
        ),
        (
            "jp_jvm_rotation_duty_cycle",
            "Share of time the rotation plans an exact window open in this JVM: duty × cost stays within windows.rotation.budget_percent.",
            |j| j.duty,
        ),
    ];
    for (name, help, value) in per_jvm {
        let mut f = Family::header(out, name, "gauge", help);
        for j in &stats.jvms {
            let pid = j.pid.to_string();
            f.sample(
                name,
                &[("pid", pid.as_str()), ("main", j.main_class.as_str())],
                value(j),
            );
        }
    }
    let fleet: [(&str, &str, f64); 3] = [
        (
            "jp_jvm_rotation_jvms",
            "JVMs in the rotation (eligible by the agent's state and the filters).",
            stats.jvms.len() as f64,
        ),
        (
            "jp_jvm_rotation_expected_open_windows",
            "Rotation windows the plan expects open at once (the sum of the duty cycles).",
            stats.expected_open,
        ),
        (
            "jp_jvm_rotation_effective_duty_cycle",
            "Share of time the rotation's JVMs had a rotation window open, since jpd started.",
            stats.effective_duty,
        ),
    ];
    for (name, help, value) in fleet {
        Family::header(out, name, "gauge", help).sample(name, &[], value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_samples() {
        let stats = RotationStats {
            enabled: true,
            jvms: vec![JvmRotation {
                pid: 42,
                start_time: 7,
                main_class: "Shop".into(),
                cost: 1.5,
                measured: 3,
                duty: 0.004,
                windows: 3,
                window_cpu_seconds: 2.5,
            }],
            expected_open: 0.004,
            open: 0,
            opened: 3,
            completed: 3,
            failed: 0,
            effective_duty: 0.003,
            window_cpu_seconds: 2.5,
        };
        let mut out = String::new();
        render(&mut out, &stats);
        let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "jp_jvm_window_cpu_seconds_total{origin=\"rotation\"} 2.5",
                "jp_jvm_rotation_window_cost{pid=\"42\",main=\"Shop\"} 1.5",
                "jp_jvm_rotation_cost_measurements{pid=\"42\",main=\"Shop\"} 3",
                "jp_jvm_rotation_duty_cycle{pid=\"42\",main=\"Shop\"} 0.004",
                "jp_jvm_rotation_jvms 1",
                "jp_jvm_rotation_expected_open_windows 0.004",
                "jp_jvm_rotation_effective_duty_cycle 0.003",
            ]
        );
        assert_eq!(out.matches("# TYPE").count(), 7);
    }
}
