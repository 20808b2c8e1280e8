//! Exact windows on any HotSpot JVM of the host: which JVMs there are and in what state
//! jp's agent is in each ([`hotspot`]), and reaching them through HotSpot's dynamic
//! attach ([`attach`]): loading the agent, staging its library and the windows' result
//! directory where the JVM sees them.
pub mod attach;
pub mod hotspot;
