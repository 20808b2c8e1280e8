package jp.agent;

import java.io.File;

/**
 * {@code -javaagent:jp-agent.jar=OPTIONS}: loads {@code libjpagent.so} from next to this jar (or
 * from the system property {@code jp.agent.lib}) and starts the agent in the live phase. Classes
 * loaded before this point are retransformed; see docs/agent-design.md, "The ways in", for what
 * that covers.
 */
public final class Premain {
    private Premain() {}

    public static void premain(String options) {
        String lib = System.getProperty("jp.agent.lib");
        try {
            if (lib == null) {
                lib = new File(jarDir(), "libjpagent.so").getPath();
            }
            System.load(lib);
        } catch (Throwable e) {
            System.err.println("jp-agent: cannot load " + lib + ": " + e);
            System.exit(1);
        }
        if (init(options == null ? "" : options) != 0) {
            System.exit(1);
        }
    }

    /**
     * The directory of this jar. The manifest's Boot-Class-Path makes the bootstrap loader
     * define this class (no code source then), so ask for the class file's URL instead.
     */
    private static File jarDir() throws Exception {
        java.net.URL u = Premain.class.getResource("Premain.class");
        if (u == null) {
            u = ClassLoader.getSystemResource("jp/agent/Premain.class");
        }
        String s = u == null ? null : u.toString();
        if (s == null || !s.startsWith("jar:") || s.indexOf("!/") < 0) {
            throw new IllegalStateException("cannot locate jp-agent.jar (from " + s + "); set -Djp.agent.lib");
        }
        File jar = new File(new java.net.URI(s.substring(4, s.indexOf("!/"))));
        return jar.getParentFile();
    }

    /** Does what Agent_OnLoad does, in the live phase; non-zero on error (already reported). */
    private static native int init(String options);
}
