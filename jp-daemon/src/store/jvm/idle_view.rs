//! The idle filter applied to a snapshot: what the off-CPU views call before they read
//! it (the patterns are [`super::idle`]'s, a leaf the store holds).

use super::idle::IdlePatterns;
use super::query::{JvmSnapshot, TreeView};

impl JvmSnapshot {
    /// Leaves the off-CPU time of idle contexts (see [`IdlePatterns`]) out of this
    /// snapshot, for the views that read it after (its CPU's `offcpu_idle_hidden_ns`
    /// and the `MctCpu` made of it say how much); returns the time left out (ns).
    /// Every view of off-CPU or wall time calls it unless asked to show everything.
    pub fn hide_idle_offcpu(&mut self, idle: &IdlePatterns) -> u64 {
        let nodes = idle.idle_nodes(self.nodes().map(|(links, _)| links), |mid| {
            self.info(mid).name
        });
        let Some(cpu) = self.cpu_mut() else {
            return 0;
        };
        let mut hidden = 0u64;
        cpu.offcpu.retain(|&(node, _), ns| {
            let keep = !nodes.get(node as usize).copied().unwrap_or(false);
            if !keep {
                hidden = hidden.saturating_add(*ns);
            }
            keep
        });
        cpu.offcpu_idle_hidden_ns = cpu.offcpu_idle_hidden_ns.saturating_add(hidden);
        hidden
    }
}
