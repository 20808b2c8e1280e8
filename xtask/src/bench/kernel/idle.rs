//! jpd's own CPU with nothing to do: the sampler at the default frequency, no
//! benchmark work running, measured after its first periodic passes.
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::socket_path;
use crate::bench::harness::{task_cpu_ns, Jpd, FREQUENCY_HZ};
use crate::build::Deliverables;

/// Long enough that what jpd does only every few passes (the CPU and symbol checks,
/// every 5 s) is in it many times over.
const WINDOW: Duration = Duration::from_secs(60);
/// The goal for jpd at idle: at most 0.02 % of one core.
const GOAL: f64 = 0.0002;

pub(super) struct Idle {
    /// Share of one core with the JVM collector off, and with the default configuration.
    usdt_off: f64,
    default: f64,
}

pub(super) fn run(out: &Deliverables) -> Result<Idle> {
    Ok(Idle {
        usdt_off: share(out, "[usdt]\nenabled = false\n")?,
        default: share(out, "")?,
    })
}

/// jpd's CPU share with the configuration `body`. Measured after its first periodic
/// passes (the first one names jpd's own programs, parsing kallsyms once more:
/// start-up, not idle).
fn share(out: &Deliverables, body: &str) -> Result<f64> {
    let socket = socket_path();
    let config = std::env::temp_dir().join(format!("jp-bench-idle-{}.toml", std::process::id()));
    std::fs::write(&config, body).with_context(|| format!("cannot write {}", config.display()))?;
    let mut jpd = Jpd::start_at(
        out,
        &socket,
        Some(&config),
        FREQUENCY_HZ,
        Duration::from_secs(3),
    )?;
    let cpu0 = task_cpu_ns(jpd.pid())?;
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let share = (task_cpu_ns(jpd.pid())? - cpu0) as f64 / t0.elapsed().as_nanos() as f64;
    jpd.stop();
    Ok(share)
}

impl Idle {
    pub(super) fn render(&self) -> String {
        let pct = |x: f64| format!("{:.3} %", x * 100.0);
        format!(
            "### jpd at idle\n\njpd's own CPU (all its threads) at {FREQUENCY_HZ} Hz, nothing of the benchmark \
running, over {} s after its first periodic passes: {} of one core with its JVM collector off (goal ≤ 0.02 %: {}); \
{} with the default configuration (the JVM collector rescanning /proc every second; this machine runs other \
people's processes too). Under the kernel work it is the \"jpd CPU\" column of the workload table.\n",
            WINDOW.as_secs(),
            pct(self.usdt_off),
            if self.usdt_off <= GOAL { "met" } else { "**not met**" },
            pct(self.default),
        )
    }
}
