import java.io.IOException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * Links every class of each directory given, one class loader per directory, so that
 * the JVM verifies them (run with -Xverify:all). With "-boot" the directories' classes
 * are expected on the boot/platform path (patched JDK modules) and are loaded through
 * the system loader instead.
 *
 * Prints one line per class that fails: "FAIL <dir> <class> <throwable class> <message>",
 * then one "SUMMARY <dir> classes=N ok=N" line per directory.
 */
public class VerifyHarness {
    public static void main(String[] args) throws Exception {
        boolean boot = false;
        for (String a : args) {
            if (a.equals("-boot")) {
                boot = true;
                continue;
            }
            Path dir = Paths.get(a);
            List<String> names = new ArrayList<>();
            try (Stream<Path> s = Files.walk(dir)) {
                s.filter(p -> p.toString().endsWith(".class")).forEach(p -> {
                    String rel = dir.relativize(p).toString();
                    String name = rel.substring(0, rel.length() - 6).replace('/', '.');
                    if (!name.endsWith("module-info") && !name.endsWith("package-info")) {
                        names.add(name);
                    }
                });
            }
            names.sort(null);
            ClassLoader loader = boot ? ClassLoader.getSystemClassLoader()
                    : new URLClassLoader(new URL[] {dir.toUri().toURL()}, VerifyHarness.class.getClassLoader());
            int ok = 0;
            for (String name : names) {
                try {
                    Class<?> c = Class.forName(name, false, loader);
                    c.getDeclaredMethods();
                    ok++;
                } catch (Throwable t) {
                    String msg = String.valueOf(t.getMessage()).replace('\n', ' ');
                    if (msg.length() > 300) {
                        msg = msg.substring(0, 300);
                    }
                    System.out.println("FAIL " + a + " " + name + " " + t.getClass().getName() + " " + msg);
                }
            }
            System.out.println("SUMMARY " + a + " classes=" + names.size() + " ok=" + ok);
        }
    }
}
