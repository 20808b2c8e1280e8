//! Which classes get instrumented.

use crate::options::Options;

/// Never instrumented, even with jdk=true: what the runtime's hot path and thread attach
/// use (`Thread.currentThread`, `ThreadLocal` and its map, the weak references it holds,
/// `Object.<init>`), and VM internals that run beneath them. Instrumenting these would
/// make `Rt.enter` call itself.
const RUNTIME_DEPENDENCIES: &[&str] = &[
    "java/lang/Object",
    "java/lang/Thread", // also ThreadLocal, ThreadLocal$ThreadLocalMap, Thread$*, ThreadGroup
    "java/lang/VirtualThread",
    "java/lang/ref/",
    "jdk/internal/misc/",
    "jdk/internal/vm/",
];

/// Never instrumented when the usdt profiler runs: what its report point reads the probe's
/// semaphore and the control block with (`DirectByteBuffer.getShort/getLong` and the index
/// checks beneath them). Instrumented, they would run into the sink on every report and
/// make a report point without a tracer cost ~85 ns instead of ~1 ns with `jdk=true`.
const USDT_DEPENDENCIES: &[&str] = &[
    "java/nio/Buffer",
    "java/nio/ByteBuffer",
    "java/nio/DirectByteBuffer",
    "jdk/internal/util/Preconditions",
];

/// Packages that only the JDK defines (whatever the loader, e.g. reflection accessors
/// generated into their own loaders on JDK 17).
const JDK_PACKAGES: &[&str] = &["java/", "jdk/", "sun/", "com/sun/"];

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Decision {
    Instrument,
    /// The agent's own classes.
    Runtime,
    /// A JDK class and jdk=false, or one the runtime itself depends on.
    Jdk,
    /// Not matched by include=, or matched by exclude=.
    Filtered,
}

/// `name` is the internal class name; `jdk_loader` tells whether the defining loader is the
/// bootstrap or platform loader.
pub fn decide(opts: &Options, name: &str, jdk_loader: bool) -> Decision {
    if name.starts_with("jp/") {
        return Decision::Runtime;
    }
    if RUNTIME_DEPENDENCIES.iter().any(|p| name.starts_with(p)) {
        return Decision::Jdk;
    }
    if opts.profiler.usdt() && USDT_DEPENDENCIES.iter().any(|p| name.starts_with(p)) {
        return Decision::Jdk;
    }
    let included = opts.include.iter().any(|p| name.starts_with(p.as_str()));
    let jdk = jdk_loader || JDK_PACKAGES.iter().any(|p| name.starts_with(p));
    // An explicit include= of a JDK package (e.g. com.sun.tools.javac) selects it without jdk=true.
    if jdk && !opts.jdk && !included {
        return Decision::Jdk;
    }
    if !opts.include.is_empty() && !included {
        return Decision::Filtered;
    }
    if opts.exclude.iter().any(|p| name.starts_with(p.as_str())) {
        return Decision::Filtered;
    }
    Decision::Instrument
}

/// Whether the rewriter may give methods second bodies that call sites call with their
/// context (docs/agent-design.md, "Second bodies: passed contexts"). Such a body keeps the
/// thread's current context up to date only before calls and instructions that resolve
/// classes; Java code the JVM runs at any other instruction (an implicit exception's
/// constructor, in `java/lang`) must therefore not be instrumented: not with jdk=true, nor
/// with an include= that reaches into `java/` or `jdk/`.
pub fn may_pass_context(opts: &Options) -> bool {
    let reaches_core = |p: &str| {
        ["java/", "jdk/"]
            .iter()
            .any(|core| p.starts_with(core) || core.starts_with(p))
    };
    !opts.jdk && !opts.include.iter().any(|p| reaches_core(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_contexts_only_without_the_core_jdk() {
        let mut o = Options::default();
        assert!(may_pass_context(&o));
        o.include = vec!["com/sun/tools/javac".into()];
        assert!(may_pass_context(&o), "javac's own classes");
        o.include = vec!["java/util/".into()];
        assert!(!may_pass_context(&o));
        o.include = vec!["ja".into()];
        assert!(!may_pass_context(&o), "a prefix of java/");
        o.include = Vec::new();
        o.jdk = true;
        assert!(!may_pass_context(&o));
    }

    #[test]
    fn decisions() {
        let o = Options::default();
        assert_eq!(decide(&o, "Foo", false), Decision::Instrument);
        assert_eq!(decide(&o, "jp/rt/Rt", true), Decision::Runtime);
        assert_eq!(decide(&o, "java/util/HashMap", true), Decision::Jdk);
        assert_eq!(decide(&o, "javax/sql/DataSource", true), Decision::Jdk);
        assert_eq!(
            decide(&o, "javax/servlet/Servlet", false),
            Decision::Instrument
        );
        assert_eq!(
            decide(&o, "jdk/internal/reflect/GeneratedMethodAccessor1", false),
            Decision::Jdk
        );

        let j = Options::parse("jdk=true").unwrap();
        assert_eq!(decide(&j, "java/util/HashMap", true), Decision::Instrument);
        assert_eq!(
            decide(&j, "java/lang/ThreadLocal$ThreadLocalMap", true),
            Decision::Jdk
        );
        assert_eq!(decide(&j, "java/lang/Object", true), Decision::Jdk);
        assert_eq!(
            decide(&j, "java/lang/ref/WeakReference", true),
            Decision::Jdk
        );

        // The usdt report point's buffer reads stay uninstrumented; with profiler=file they
        // are profiled like any JDK class.
        for class in [
            "java/nio/DirectByteBuffer",
            "jdk/internal/util/Preconditions",
        ] {
            assert_eq!(decide(&j, class, true), Decision::Jdk, "{class}");
            let f = Options::parse("jdk=true,profiler=file").unwrap();
            assert_eq!(decide(&f, class, true), Decision::Instrument, "{class}");
        }
        assert_eq!(
            decide(&j, "java/nio/HeapCharBuffer", true),
            Decision::Instrument
        );

        let javac = Options::parse("include=com.sun.tools.javac.").unwrap();
        assert_eq!(
            decide(&javac, "com/sun/tools/javac/Main", false),
            Decision::Instrument
        );
        assert_eq!(decide(&javac, "java/util/HashMap", true), Decision::Jdk);
        assert_eq!(decide(&javac, "Foo", false), Decision::Filtered);
        let both = Options::parse("include=java.lang.").unwrap();
        assert_eq!(decide(&both, "java/lang/ThreadLocal", true), Decision::Jdk);

        let f = Options::parse("include=com.a;org/b,exclude=com.a.Gen").unwrap();
        assert_eq!(decide(&f, "com/a/X", false), Decision::Instrument);
        assert_eq!(decide(&f, "org/b/Y", false), Decision::Instrument);
        assert_eq!(decide(&f, "org/c/Y", false), Decision::Filtered);
        assert_eq!(decide(&f, "com/a/Gen$1", false), Decision::Filtered);
    }
}
