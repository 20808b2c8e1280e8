//! Exact windows on any HotSpot JVM of the host: which JVMs there are and in what state
//! jp's agent is in each ([`hotspot`]), and reaching them through HotSpot's dynamic
//! attach ([`attach`]): loading the agent, staging its library and the windows' result
//! directory where the JVM sees them. [`service`] opens windows on request and keeps
//! them in the window store (`store::windows`); [`counters`] counts them for
//! `/metrics`; [`seam`] is the service's one way to the JVMs. [`rotation`] opens windows
//! across the fleet at random times, within a CPU budget.
pub mod attach;
pub mod config;
pub mod counters;
pub mod hotspot;
pub mod result;
pub mod rotation;
pub mod seam;
pub mod service;

pub use crate::store::windows::WindowProfile;
pub use attach::WindowDir;
pub use counters::{WindowCounters, WindowCounts, WindowOrigin};
pub use hotspot::{AgentPresence, HotspotJvm};
pub use seam::{AttachJvm, HotspotAttach};
pub use service::{Bba, Timing, WindowError, WindowRequest, Windows};
