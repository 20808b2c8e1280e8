import java.io.File;
import java.io.OutputStream;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.util.ArrayList;
import java.util.List;

// bench jvm, steady state: the whole-run programs' work repeated in rounds inside one JVM,
// as a long-running service would run it. Usage:
//   SteadyBench PROGRAM REPS WARMUP_ROUNDS WARMUP_MS MEASURED [SOURCES...]
// where one round runs the program's work REPS times. Each program is set up once (script
// compiled, template parsed, compiler looked up) and then only the work is timed.
public class SteadyBench {
    public static void main(String[] a) throws Exception {
        String program = a[0];
        int reps = Integer.parseInt(a[1]);
        Rounds.Work once = work(program, a);
        Rounds.run(() -> {
            long r = 0;
            for (int i = 0; i < reps; i++) r += once.round();
            return r;
        }, Integer.parseInt(a[2]), Long.parseLong(a[3]), Integer.parseInt(a[4]));
    }

    // Each program's classes are named only inside its own method, so a run loads just them.
    static Rounds.Work work(String program, String[] a) throws Exception {
        switch (program) {
            case "rhino": return rhino();
            case "jython": return jython();
            case "h2": return h2();
            case "xalan": return xalan();
            case "lucene": return LuceneBench::work;
            case "javac": return javac(a);
            default: throw new IllegalArgumentException("unknown program " + program);
        }
    }

    static Rounds.Work rhino() throws Exception {
        String src = Files.readString(Path.of("work.js"));
        org.mozilla.javascript.Context cx = org.mozilla.javascript.Context.enter();
        org.mozilla.javascript.Scriptable scope = cx.initStandardObjects();
        // The shell's print is not in the standard objects; the output is not wanted anyway.
        cx.evaluateString(scope, "var print = function () {};", "print", 1, null);
        org.mozilla.javascript.Script script = cx.compileString(src, "work.js", 1, null);
        return () -> {
            script.exec(cx, scope);
            return scope.get("s", scope).hashCode();
        };
    }

    static Rounds.Work jython() throws Exception {
        System.setProperty("python.cachedir.skip", "true");
        String src = Files.readString(Path.of("work.py"));
        org.python.util.PythonInterpreter py = new org.python.util.PythonInterpreter();
        py.setOut(OutputStream.nullOutputStream());
        org.python.core.PyCode code = py.compile(src);
        return () -> {
            py.exec(code);
            return py.get("d").__len__();
        };
    }

    static Rounds.Work h2() throws Exception {
        String script = Files.readString(Path.of("work.sql"));
        Class.forName("org.h2.Driver");
        int[] db = {0};
        return () -> {
            // A fresh in-memory database per run of the script; it is dropped on close.
            try (Connection c = DriverManager.getConnection("jdbc:h2:mem:steady" + db[0]++)) {
                org.h2.tools.RunScript.execute(c, new StringReader(script));
                return db[0];
            }
        };
    }

    static Rounds.Work xalan() throws Exception {
        // Xalan's own processor by name: the JDK's built-in XSLTC would be chosen otherwise.
        javax.xml.transform.TransformerFactory f =
            new org.apache.xalan.processor.TransformerFactoryImpl();
        javax.xml.transform.Templates t =
            f.newTemplates(new javax.xml.transform.stream.StreamSource(new File("sort.xsl")));
        return () -> {
            Counting out = new Counting();
            t.newTransformer().transform(
                new javax.xml.transform.stream.StreamSource(new File("items.xml")),
                new javax.xml.transform.stream.StreamResult(out));
            return out.bytes;
        };
    }

    static Rounds.Work javac(String[] a) throws Exception {
        javax.tools.JavaCompiler c = javax.tools.ToolProvider.getSystemJavaCompiler();
        javax.tools.StandardJavaFileManager fm = c.getStandardFileManager(null, null, null);
        List<File> files = new ArrayList<>();
        for (int i = 5; i < a.length; i++) files.add(new File(a[i]));
        Path out = Files.createTempDirectory("steady-javac");
        List<String> options = List.of("--release", "17", "-proc:none", "-d", out.toString());
        return () -> {
            // A new task per round, one file manager for all (as a build daemon keeps it).
            Boolean ok = c.getTask(null, fm, null, options, null, fm.getJavaFileObjectsFromFiles(files)).call();
            if (!ok) throw new IllegalStateException("javac failed");
            return files.size();
        };
    }

    static final class Counting extends OutputStream {
        long bytes;
        @Override public void write(int b) { bytes++; }
        @Override public void write(byte[] b, int off, int len) { bytes += len; }
    }
}
