package jp.rt;

/**
 * A profiling agent in the sense of JP: it is told about every thread's MCT root and called
 * periodically, synchronously, by the owning thread. Its own code is never profiled (its
 * instrumented callees count into a sink). Chosen with the agent option {@code profiler=CLASS};
 * the class needs a public no-argument constructor and is loaded by the system class loader.
 */
public interface Profiler {
    /** A thread executes its first instrumented method; {@code root} is its MCT root. */
    void register(Thread thread, Node root);

    /**
     * The thread is due to report: an interval ({@code report_interval_ms}) passed, or, with
     * reports paced by bytecodes ({@code granularity=} alone), its activation counter ran
     * out. {@code current} is its current context. Called on the thread itself.
     *
     * @return with reports paced by bytecodes, the next granularity (bytecodes until the
     *     next report; values <= 0 keep the configured granularity); otherwise ignored
     */
    int report(Node root, Node current);

    /**
     * Whether {@link #report} would do anything now. With reports paced by time (the
     * default), the agent marks threads due only while this is true, and checks ten times
     * less often while it is not.
     */
    default boolean wantsReports() {
        return true;
    }

    /** The thread ended (or the VM is dying and it is still alive): its tree is final. */
    default void threadEnded(Thread thread, Node root) {}

    /** The VM is dying; every thread's tree has been passed to {@link #threadEnded} before. */
    default void shutdown() {}
}
