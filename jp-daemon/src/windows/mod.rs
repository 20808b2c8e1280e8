//! Exact windows on HotSpot JVMs; [`rotation`] opens them across the fleet within a CPU
//! budget.
pub mod rotation;
