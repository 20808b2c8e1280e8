package jp.agent;

import java.io.File;

/**
 * {@code -javaagent:jp-agent.jar=OPTIONS}: loads {@code libjpagent.so} from next to this jar (or
 * from the system property {@code jp.agent.lib}) and starts the agent in the live phase. Classes
 * loaded before this point are retransformed; see jp-agent/README-dev.md for what that covers.
 */
public final class Premain {
    private Premain() {}

    public static void premain(String options) {
        String lib = System.getProperty("jp.agent.lib");
        try {
            if (lib == null) {
                File jar = new File(Premain.class.getProtectionDomain().getCodeSource().getLocation().toURI());
                lib = new File(jar.getParentFile(), "libjpagent.so").getPath();
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

    /** Does what Agent_OnLoad does, in the live phase; non-zero on error (already reported). */
    private static native int init(String options);
}
