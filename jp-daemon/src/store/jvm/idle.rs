//! Idle threads in the off-CPU views: a pool thread parked waiting for work is off CPU
//! all the time it has nothing to do, and would dominate every off-CPU view although
//! it is no one's latency. Its time is recognized from the context it waits in and
//! left out of the default views; the caller says how much was left out, and a switch
//! (`--all`) shows it.
//!
//! What an idle thread's context is depends on what the agent instruments:
//! - by default only application classes: a pool worker waiting in
//!   `ThreadPoolExecutor.getTask` runs no application frame, so its context is the
//!   thread's root ([`ROOT`]): no application code was running when it went off CPU;
//! - with `jdk=true` the JDK's frames are contexts too: the worker's context is under
//!   `ThreadPoolExecutor.getTask` (then `LinkedBlockingQueue.take`, `LockSupport.park`…).
//!
//! So a context is idle when it is the root, or when it or any context above it is a
//! method a pattern names. A pattern must name a method that waits for work and does
//! not run it: everything under it counts as idle.

use std::sync::Arc;

/// The pattern that names the thread's root context (no instrumented frame running).
pub const ROOT: &str = "<root>";

/// Where the JDK's pool and service threads wait for work.
/// (`java.lang.ref` and `java.lang.Thread` are never instrumented: the Reference Handler,
/// Finalizer and Cleaner threads wait at their root.)
pub const DEFAULT_PATTERNS: [&str; 12] = [
    ROOT,
    "java.util.concurrent.ThreadPoolExecutor.getTask",
    "java.util.concurrent.ForkJoinPool.awaitWork",
    "sun.nio.ch.SelectorImpl.select",
    "java.util.concurrent.LinkedBlockingQueue.take",
    "java.util.concurrent.LinkedBlockingDeque.take",
    "java.util.concurrent.ArrayBlockingQueue.take",
    "java.util.concurrent.SynchronousQueue.take",
    "java.util.concurrent.LinkedTransferQueue.take",
    "java.util.concurrent.PriorityBlockingQueue.take",
    "java.util.concurrent.DelayQueue.take",
    "java.util.concurrent.ScheduledThreadPoolExecutor$DelayedWorkQueue.take",
];

/// Most patterns a configuration or a request may add.
pub const MAX_PATTERNS: usize = 64;
/// Longest pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 512;

/// Why a pattern is refused, in one line.
pub fn check_pattern(p: &str) -> Result<(), String> {
    let body = p.strip_suffix('*').unwrap_or(p);
    if p == ROOT {
        Ok(())
    } else if p.len() > MAX_PATTERN_LEN {
        Err(format!(
            "idle pattern {:?}… is longer than {MAX_PATTERN_LEN} bytes",
            p.chars().take(32).collect::<String>()
        ))
    } else if body.is_empty() || body.contains(['*', '(', ')', ' ', '\t', '/']) {
        Err(format!(
            "idle pattern {p:?}: write Class.method (dotted class name, as jpctl shows \
             methods), or a prefix ending in one `*`, or {ROOT}"
        ))
    } else if !body.contains('.') && !p.ends_with('*') {
        Err(format!(
            "idle pattern {p:?} names no class: write Class.method, or a prefix ending in `*`"
        ))
    } else {
        Ok(())
    }
}

/// Checks a list of patterns: at most [`MAX_PATTERNS`], each as [`check_pattern`].
pub fn check_patterns(patterns: &[String]) -> Result<(), String> {
    if patterns.len() > MAX_PATTERNS {
        return Err(format!(
            "{} idle patterns: at most {MAX_PATTERNS}",
            patterns.len()
        ));
    }
    patterns.iter().try_for_each(|p| check_pattern(p))
}

/// The patterns that make a context idle: the defaults and the operator's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdlePatterns {
    patterns: Arc<[String]>,
}

impl Default for IdlePatterns {
    fn default() -> Self {
        IdlePatterns::with(&[])
    }
}

impl IdlePatterns {
    /// The defaults and `extra` (checked by the caller with [`check_patterns`]).
    pub fn with(extra: &[String]) -> IdlePatterns {
        let defaults: Vec<String> = DEFAULT_PATTERNS.iter().map(|p| p.to_string()).collect();
        IdlePatterns {
            patterns: defaults.into(),
        }
        .and(extra)
    }

    /// These and `extra`.
    pub fn and(&self, extra: &[String]) -> IdlePatterns {
        let mut all = self.patterns.to_vec();
        for p in extra {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        IdlePatterns {
            patterns: all.into(),
        }
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether a method named `name` (`Class.method(signature)`) is one the patterns name.
    pub fn names(&self, name: &str) -> bool {
        let method = name.split('(').next().unwrap_or(name);
        self.patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => method.starts_with(prefix),
            None => p.as_str() == method,
        })
    }

    /// Which nodes of a tree are idle, by node index: the root if [`ROOT`] is a
    /// pattern, and every node that a pattern names or that lies under one. `links` are
    /// the tree's (parent, method id) in index order, the root first; `name_of` a
    /// method id's name.
    pub(crate) fn idle_nodes(
        &self,
        links: impl Iterator<Item = [u32; 2]>,
        name_of: impl Fn(u32) -> Arc<str>,
    ) -> Vec<bool> {
        let root_idle = self.patterns.iter().any(|p| p == ROOT);
        let mut named: std::collections::HashMap<u32, bool> = Default::default();
        let mut idle = Vec::with_capacity(links.size_hint().0);
        // Nodes come parents first: a node's parent is decided before it.
        for (i, [parent, mid]) in links.enumerate() {
            let this = if i == 0 {
                root_idle
            } else {
                let under = parent != 0 && idle.get(parent as usize).copied().unwrap_or(false);
                under
                    || *named
                        .entry(mid)
                        .or_insert_with(|| self.names(&name_of(mid)))
            };
            idle.push(this);
        }
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_name_methods_by_class_and_name_or_prefix() {
        let idle = IdlePatterns::with(&["com.acme.Poller.await*".to_string()]);
        assert!(idle.names("java.util.concurrent.ThreadPoolExecutor.getTask()Ljava/lang/Runnable;"));
        assert!(idle.names("sun.nio.ch.SelectorImpl.select(J)I"));
        assert!(!idle.names("sun.nio.ch.SelectorImpl.selectNow()I"));
        assert!(!idle.names("java.util.concurrent.ThreadPoolExecutor.runWorker(Ljava/util/concurrent/ThreadPoolExecutor$Worker;)V"));
        assert!(idle.names("com.acme.Poller.awaitEvents()V"));
        assert!(!idle.names("com.acme.Poller.run()V"));
    }

    #[test]
    fn bad_patterns_are_refused_in_one_line() {
        for ok in [ROOT, "a.B.c", "com.acme.*", "Foo.bar", "x*"] {
            assert_eq!(check_pattern(ok), Ok(()), "{ok}");
        }
        for bad in ["", "*", "a.B.c()V", "a b.c", "noclass", "a.*.c", "a/B.c"] {
            let e = check_pattern(bad).expect_err(bad);
            assert!(!e.contains('\n'), "{e}");
        }
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("a.B.m{i}")).collect();
        assert!(check_patterns(&many).is_err());
        assert!(check_patterns(&many[..MAX_PATTERNS]).is_ok());
    }

    #[test]
    fn defaults_are_valid_and_extras_are_added_once() {
        assert_eq!(check_patterns(IdlePatterns::default().patterns()), Ok(()));
        let extra = vec!["a.B.c".to_string(), "a.B.c".to_string()];
        let idle = IdlePatterns::with(&extra);
        assert_eq!(idle.patterns().len(), DEFAULT_PATTERNS.len() + 1);
        assert_eq!(idle.and(&extra), idle);
    }

    /// A tree of (parent, method name) in index order, the root first; a node's
    /// method id is its index.
    struct Fake(Vec<(u32, &'static str)>);

    impl Fake {
        fn idle(&self, idle: &IdlePatterns) -> Vec<bool> {
            let links = self.0.iter().enumerate().map(|(i, &(p, _))| [p, i as u32]);
            idle.idle_nodes(links, |mid| self.0[mid as usize].1.into())
        }
    }

    #[test]
    fn the_root_and_everything_under_a_named_method_is_idle() {
        let tree = Fake(vec![
            (0, ""),
            (0, "java.util.concurrent.ThreadPoolExecutor$Worker.run()V"),
            (1, "java.util.concurrent.ThreadPoolExecutor.runWorker(L;)V"),
            (
                2,
                "java.util.concurrent.ThreadPoolExecutor.getTask()Ljava/lang/Runnable;",
            ),
            (
                3,
                "java.util.concurrent.LinkedBlockingQueue.take()Ljava/lang/Object;",
            ),
            (
                4,
                "java.util.concurrent.locks.LockSupport.park(Ljava/lang/Object;)V",
            ),
            (2, "Busy.work()V"),
            (0, "Busy.main([Ljava/lang/String;)V"),
        ]);
        let idle = tree.idle(&IdlePatterns::default());
        assert_eq!(idle, [true, false, false, true, true, true, false, false]);
        let mine = tree.idle(&IdlePatterns::with(&["Busy.work".into()]));
        assert_eq!(mine, [true, false, false, true, true, true, true, false]);
        let no_root = IdlePatterns {
            patterns: vec!["Busy.main".to_string()].into(),
        };
        assert_eq!(
            tree.idle(&no_root),
            [false, false, false, false, false, false, false, true]
        );
    }
}
