//! Exact windows in HotSpot JVMs: the agent dormant (or loaded on demand) instruments a
//! scope for N seconds and hands the window's tree over. [`service`] opens them and
//! keeps them in the window store (`store::windows`); [`counters`] counts them for
//! `/metrics`; [`seam`] is the service's one way to the JVMs.
pub mod config;
pub mod counters;
pub mod result;
pub mod seam;
pub mod service;

pub use crate::store::windows::WindowProfile;
pub use counters::{WindowCounters, WindowCounts, WindowOrigin};
pub use seam::{AgentPresence, AttachJvm, HotspotAttach, HotspotJvm, WindowDir};
pub use service::{Bba, Timing, WindowError, WindowRequest, Windows};
