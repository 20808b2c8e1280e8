//! The fleet rotation: every JVM that opted in (started with the agent dormant), or that
//! the configuration names, gets exact windows at random, memoryless times, at a rate
//! that keeps the extra CPU it pays within `[windows.rotation] budget_percent`; at most
//! `max_open` rotation windows are open on the host at once.
//!
//! - [`plan`]: the arithmetic, pure (who is eligible, each JVM's duty cycle from its
//!   estimated cost, exponential gaps, which due windows take the free slots);
//! - [`cost`]: a window's cost measured from the JVM's CPU readings, smoothed per JVM;
//! - [`task`]: the rotation's task, over two ports: [`Fleet`] (the JVMs and their CPU)
//!   and [`Opener`] (a window opened, waited for and stored by the windows service);
//! - [`host`]: the ports on a real host;
//! - [`config`]: the section `[windows.rotation]`.
pub mod config;
pub mod cost;
pub mod host;
pub mod plan;
pub mod task;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::{oneshot, watch};

pub use config::RotationConfig;
use cost::CpuSource;
use plan::Candidate;

/// Where the rotation learns the JVMs and their CPU. Both calls block (they read /proc
/// or take the JVM store's lock): the task runs them on the blocking pool.
pub trait Fleet: Send + Sync + 'static {
    /// Every HotSpot JVM of the host.
    fn jvms(&self) -> Vec<Candidate>;
    /// Each JVM's CPU so far (ns) and where it was read, in the order asked; None for a
    /// JVM gone (or another process behind its pid).
    fn cpu(&self, jvms: &[(u32, u64)]) -> Vec<Option<(u64, CpuSource)>>;
}

/// A rotation window to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotationWindow {
    pub pid: u32,
    pub start_time: u64,
    pub seconds: u32,
    /// The JVM started without the agent: the window loads it.
    pub load_agent: bool,
}

/// A rotation window that completed into the window store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub id: u64,
    pub opened: SystemTime,
    pub closed: SystemTime,
}

pub type OpenFuture = Pin<Box<dyn Future<Output = Result<Completed, String>> + Send>>;

/// Opens a window, waits for it to close, stores it; the error is one line.
pub trait Opener: Send + Sync + 'static {
    fn open(&self, window: RotationWindow) -> OpenFuture;
}

/// One JVM in the rotation, as the metrics show it.
#[derive(Clone, Debug, PartialEq)]
pub struct JvmRotation {
    pub pid: u32,
    pub start_time: u64,
    pub main_class: String,
    /// Estimated extra CPU of a window (1.0: the JVM's rate doubles while it is open).
    pub cost: f64,
    /// Windows the estimate was measured on (0: still the prior).
    pub measured: u32,
    /// The duty cycle the plan gives it.
    pub duty: f64,
    pub windows: u64,
    /// Its CPU while its rotation windows were open (s).
    pub window_cpu_seconds: f64,
}

/// What the rotation did so far, for the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RotationStats {
    pub enabled: bool,
    pub jvms: Vec<JvmRotation>,
    /// Windows expected open at once by the plan.
    pub expected_open: f64,
    /// Rotation windows open now.
    pub open: usize,
    pub opened: u64,
    pub completed: u64,
    pub failed: u64,
    /// The share of time the fleet's JVMs had a rotation window open, since jpd started:
    /// window seconds over JVM seconds in the rotation.
    pub effective_duty: f64,
    /// CPU of the JVMs while rotation windows were open (s), all JVMs, ever.
    pub window_cpu_seconds: f64,
}

pub type SharedRotationStats = Arc<Mutex<RotationStats>>;

/// What the rotation works with: the JVMs, the windows service, and where it reports
/// (the exporters read it).
pub struct RotationPorts {
    pub fleet: Arc<dyn Fleet>,
    pub opener: Arc<dyn Opener>,
    pub stats: SharedRotationStats,
}

/// The running rotation: its settings (a reload sends new ones) and what it reports.
pub struct Rotation {
    config: watch::Sender<RotationConfig>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Rotation {
    /// Starts the rotation's task on the current runtime.
    pub fn start(config: RotationConfig, ports: RotationPorts) -> Rotation {
        let (tx, rx) = watch::channel(config);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(task::run(ports, rx, async move {
            let _ = stopped.await;
        }));
        Rotation {
            config: tx,
            stop: Some(stop),
            task,
        }
    }

    /// New settings from a reload; applied at the next tick.
    pub fn set_config(&self, config: RotationConfig) {
        self.config.send_if_modified(|c| {
            let changed = *c != config;
            *c = config;
            changed
        });
    }

    /// Ends the task. Windows open then are left to close at their deadline: the agent
    /// closes them by itself, and the windows service still reads and stores them.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}
