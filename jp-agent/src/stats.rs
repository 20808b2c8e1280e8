//! Agent statistics: what the class-file hook did. Lock-free counters, readable at any time.

use crate::classfile::ClassStats;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Stats {
    pub classes_seen: AtomicU64,
    pub classes_skipped: AtomicU64,
    pub classes_rewritten: AtomicU64,
    pub classes_unchanged: AtomicU64,
    pub classes_failed: AtomicU64,
    pub classes_retransformed: AtomicU64,
    pub methods_instrumented: AtomicU64,
    pub methods_too_large: AtomicU64,
    pub methods_unwidenable: AtomicU64,
    pub methods_without_catch_all: AtomicU64,
    pub methods_empty_finalizers: AtomicU64,
    pub code_bytes_before: AtomicU64,
    pub code_bytes_after: AtomicU64,
    /// Second bodies added, and call sites that call one passing their context.
    pub methods_passed: AtomicU64,
    pub call_sites_passed: AtomicU64,
    pub rewrite_nanos: AtomicU64,
    /// The hook's CPU time (not wall) in classes being retransformed (a window's open).
    pub retransform_rewrite_nanos: AtomicU64,
    /// Profiler calls (report points) of all threads, known at VM death.
    pub reports: AtomicU64,
    /// Calls whose new context was folded into an overflow node (a context limit was
    /// reached), known at VM death.
    pub calls_folded: AtomicU64,
    /// Contexts folded while merging ended threads' trees into the merged tree.
    pub merged_contexts_folded: AtomicU64,
    /// The JVM's context budget (0: no limit).
    pub context_budget: AtomicU64,
}

impl Stats {
    pub const fn new() -> Stats {
        Stats {
            classes_seen: AtomicU64::new(0),
            classes_skipped: AtomicU64::new(0),
            classes_rewritten: AtomicU64::new(0),
            classes_unchanged: AtomicU64::new(0),
            classes_failed: AtomicU64::new(0),
            classes_retransformed: AtomicU64::new(0),
            methods_instrumented: AtomicU64::new(0),
            methods_too_large: AtomicU64::new(0),
            methods_unwidenable: AtomicU64::new(0),
            methods_without_catch_all: AtomicU64::new(0),
            methods_empty_finalizers: AtomicU64::new(0),
            code_bytes_before: AtomicU64::new(0),
            code_bytes_after: AtomicU64::new(0),
            methods_passed: AtomicU64::new(0),
            call_sites_passed: AtomicU64::new(0),
            rewrite_nanos: AtomicU64::new(0),
            retransform_rewrite_nanos: AtomicU64::new(0),
            reports: AtomicU64::new(0),
            calls_folded: AtomicU64::new(0),
            merged_contexts_folded: AtomicU64::new(0),
            context_budget: AtomicU64::new(0),
        }
    }

    pub fn add_class(&self, s: &ClassStats) {
        self.classes_rewritten.fetch_add(1, Relaxed);
        self.methods_instrumented
            .fetch_add(u64::from(s.methods_instrumented), Relaxed);
        self.methods_too_large
            .fetch_add(u64::from(s.methods_too_large), Relaxed);
        self.methods_unwidenable
            .fetch_add(u64::from(s.methods_unwidenable), Relaxed);
        self.methods_without_catch_all
            .fetch_add(u64::from(s.methods_without_catch_all), Relaxed);
        self.methods_empty_finalizers
            .fetch_add(u64::from(s.methods_empty_finalizers), Relaxed);
        self.code_bytes_before
            .fetch_add(s.code_bytes_before, Relaxed);
        self.code_bytes_after.fetch_add(s.code_bytes_after, Relaxed);
        self.methods_passed
            .fetch_add(u64::from(s.methods_passed), Relaxed);
        self.call_sites_passed
            .fetch_add(u64::from(s.call_sites_passed), Relaxed);
    }

    /// `key=value` pairs separated by spaces (stable keys: tests and profilers parse them).
    pub fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Relaxed);
        let nanos = g(&self.rewrite_nanos);
        let rewritten = g(&self.classes_rewritten);
        let per_sec = if nanos > 0 {
            (rewritten + g(&self.classes_unchanged)) as f64 * 1e9 / nanos as f64
        } else {
            0.0
        };
        format!(
            "classes_seen={} classes_skipped={} classes_rewritten={} classes_unchanged={} \
             classes_failed={} classes_retransformed={} methods_instrumented={} \
             methods_too_large={} methods_unwidenable={} methods_without_catch_all={} \
             methods_empty_finalizers={} code_bytes_before={} code_bytes_after={} rewrite_ms={:.1} classes_per_s={:.0} \
             reports={} calls_folded={} merged_contexts_folded={} context_budget={} \
             methods_passed={} call_sites_passed={}",
            g(&self.classes_seen),
            g(&self.classes_skipped),
            rewritten,
            g(&self.classes_unchanged),
            g(&self.classes_failed),
            g(&self.classes_retransformed),
            g(&self.methods_instrumented),
            g(&self.methods_too_large),
            g(&self.methods_unwidenable),
            g(&self.methods_without_catch_all),
            g(&self.methods_empty_finalizers),
            g(&self.code_bytes_before),
            g(&self.code_bytes_after),
            nanos as f64 / 1e6,
            per_sec,
            g(&self.reports),
            g(&self.calls_folded),
            g(&self.merged_contexts_folded),
            g(&self.context_budget),
            g(&self.methods_passed),
            g(&self.call_sites_passed),
        )
    }
}
