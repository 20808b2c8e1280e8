//! The task on a simulated clock (tokio's, paused): a fake host whose JVMs burn a steady
//! CPU rate that a window multiplies by `1 + COST`.
use std::collections::HashMap;
use std::sync::Mutex;

use super::super::config::Percent;
use super::super::cost::CpuSource;
use super::super::{OpenFuture, Rotation, RotationPorts, SharedRotationStats};
use super::*;
use crate::windows::rotation::Opener;

const BASE_CORES: f64 = 0.5;
const COST: f64 = 1.0;

#[derive(Default)]
struct Jvm {
    open_since: Option<Instant>,
    window_seconds: f64,
}

struct Shared {
    t0: Instant,
    jvms: Mutex<HashMap<u32, Jvm>>,
    open_now: Mutex<usize>,
    most_open: Mutex<usize>,
    opened: Mutex<Vec<RotationWindow>>,
}

struct FakeHost {
    candidates: Vec<Candidate>,
    shared: Arc<Shared>,
}

impl Fleet for FakeHost {
    fn jvms(&self) -> Vec<Candidate> {
        self.candidates.clone()
    }

    fn cpu(&self, jvms: &[(u32, u64)]) -> Vec<Option<(u64, CpuSource)>> {
        let now = Instant::now();
        let all = now.duration_since(self.shared.t0).as_secs_f64();
        let state = self.shared.jvms.lock().unwrap();
        jvms.iter()
            .map(|(pid, _)| {
                let j = state.get(pid)?;
                let open = j
                    .open_since
                    .map_or(0.0, |s| now.duration_since(s).as_secs_f64());
                let cpu_s = BASE_CORES * (all + COST * (j.window_seconds + open));
                Some(((cpu_s * 1e9) as u64, CpuSource::Sampler))
            })
            .collect()
    }
}

impl Opener for FakeHost {
    fn open(&self, window: RotationWindow) -> OpenFuture {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            {
                let mut open = shared.open_now.lock().unwrap();
                *open += 1;
                let mut most = shared.most_open.lock().unwrap();
                *most = (*most).max(*open);
            }
            shared.opened.lock().unwrap().push(window.clone());
            shared
                .jvms
                .lock()
                .unwrap()
                .entry(window.pid)
                .or_default()
                .open_since = Some(Instant::now());
            let seconds = Duration::from_secs(u64::from(window.seconds));
            tokio::time::sleep(seconds).await;
            {
                let mut jvms = shared.jvms.lock().unwrap();
                let j = jvms.entry(window.pid).or_default();
                j.open_since = None;
                j.window_seconds += seconds.as_secs_f64();
            }
            *shared.open_now.lock().unwrap() -= 1;
            let closed = SystemTime::now();
            Ok(Completed {
                id: 1,
                opened: closed - seconds,
                closed,
            })
        })
    }
}

fn candidate(pid: u32, uid: u32, agent: AgentState) -> Candidate {
    Candidate {
        pid,
        start_time: u64::from(pid) * 10,
        uid,
        main_class: format!("Work{pid}"),
        cgroup: "/system.slice/work.service".into(),
        agent,
        attach_disabled: false,
    }
}

/// Runs the rotation over `candidates` for `horizon` simulated seconds.
async fn simulate(
    config: RotationConfig,
    candidates: Vec<Candidate>,
    horizon: u64,
) -> (Arc<Shared>, RotationStats) {
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        jvms: Mutex::new(candidates.iter().map(|c| (c.pid, Jvm::default())).collect()),
        open_now: Mutex::new(0),
        most_open: Mutex::new(0),
        opened: Mutex::new(Vec::new()),
    });
    let host = Arc::new(FakeHost {
        candidates,
        shared: Arc::clone(&shared),
    });
    let stats = SharedRotationStats::default();
    let rotation = Rotation::start(
        config,
        RotationPorts {
            fleet: host.clone(),
            opener: host,
            stats: Arc::clone(&stats),
        },
    );
    tokio::time::sleep(Duration::from_secs(horizon)).await;
    rotation.stop().await;
    let stats = stats.lock().unwrap().clone();
    (shared, stats)
}

#[tokio::test(start_paused = true)]
async fn windows_follow_the_budget_within_max_open_and_measure_the_cost() {
    let config = RotationConfig {
        budget_percent: Percent::new(20.0).unwrap(),
        seconds: 10,
        max_open: 2,
        ..RotationConfig::default()
    };
    let mut jvms: Vec<Candidate> = (1..=6)
        .map(|p| candidate(p, 1000, AgentState::Dormant))
        .collect();
    jvms.push(candidate(7, 1000, AgentState::None));
    jvms.push(candidate(8, 1000, AgentState::Live));
    let horizon = 4 * 3600;
    let (shared, stats) = simulate(config, jvms, horizon).await;

    assert_eq!(*shared.most_open.lock().unwrap(), 2);
    let opened = shared.opened.lock().unwrap();
    assert!(opened
        .iter()
        .all(|w| w.pid <= 6 && !w.load_agent && w.seconds == 10));
    assert_eq!(stats.jvms.len(), 6);
    // Every JVM's cost measured: the window doubles its rate.
    for j in &stats.jvms {
        assert!(j.measured > 10, "{j:?}");
        assert!((j.cost - COST).abs() < 0.15, "{j:?}");
        // Measured, its duty is 20 % / 1.0; six of them (1.2 expected open) fit 2 × 0.8.
        assert!((j.duty - 0.2 * 1.0 / j.cost).abs() < 1e-9, "{j:?}");
    }
    // Windows delivered as the arithmetic says: each JVM one per T / duty = 50 s once
    // measured (the first window ran at the prior's 5 %), less what waited for a slot.
    let expected = 6.0 * horizon as f64 * 0.2 / 10.0;
    let delivered = stats.completed as f64;
    assert!(delivered <= expected * 1.05, "{delivered} of {expected}");
    assert!(delivered >= expected * 0.8, "{delivered} of {expected}");
    assert_eq!(stats.failed, 0);
    assert!(
        stats.effective_duty <= 0.2 * 1.05,
        "{}",
        stats.effective_duty
    );
    // The CPU paid in windows: (1 + COST) × base over the window seconds.
    let window_seconds: f64 = shared
        .jvms
        .lock()
        .unwrap()
        .values()
        .map(|j| j.window_seconds)
        .sum();
    let want = (1.0 + COST) * BASE_CORES * window_seconds;
    assert!(
        (stats.window_cpu_seconds - want).abs() < 0.05 * want,
        "{} vs {want}",
        stats.window_cpu_seconds
    );
}

#[tokio::test(start_paused = true)]
async fn a_jvm_without_the_agent_is_attached_only_when_named() {
    let jvms = vec![
        candidate(1, 1000, AgentState::None),
        candidate(2, 2000, AgentState::None),
        candidate(3, 2000, AgentState::Dormant),
    ];
    let named = RotationConfig {
        budget_percent: Percent::new(20.0).unwrap(),
        attach_without_agent: true,
        uids: vec![1000],
        ..RotationConfig::default()
    };
    let (shared, _) = simulate(named, jvms.clone(), 3600).await;
    let opened = shared.opened.lock().unwrap().clone();
    assert!(opened.iter().any(|w| w.pid == 1));
    assert!(
        opened.iter().all(|w| w.pid == 1 && w.load_agent),
        "{opened:?}"
    );
    // Not attached by default; the dormant one gets windows.
    let default = RotationConfig {
        budget_percent: Percent::new(20.0).unwrap(),
        ..RotationConfig::default()
    };
    let (shared, _) = simulate(default, jvms, 3600).await;
    let opened = shared.opened.lock().unwrap().clone();
    assert!(opened.iter().any(|w| w.pid == 3));
    assert!(
        opened.iter().all(|w| w.pid == 3 && !w.load_agent),
        "{opened:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn disabled_opens_nothing() {
    let config = RotationConfig {
        enabled: false,
        budget_percent: Percent::new(20.0).unwrap(),
        ..RotationConfig::default()
    };
    let (shared, stats) = simulate(config, vec![candidate(1, 0, AgentState::Dormant)], 3600).await;
    assert_eq!(shared.opened.lock().unwrap().len(), 0);
    assert_eq!(stats.opened, 0);
}
