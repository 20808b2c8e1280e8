import java.lang.reflect.Method;

/**
 * Runs the main method of the class named by the first argument (with the remaining
 * arguments), then prints the test stub's counters: "RT enters=.. exits=.. counts=..
 * bytecodes=.. ticks=.. caughts=..".
 */
public class RunMain {
    public static void main(String[] args) throws Exception {
        String[] rest = new String[args.length - 1];
        System.arraycopy(args, 1, rest, 0, rest.length);
        Method m = Class.forName(args[0]).getMethod("main", String[].class);
        m.invoke(null, (Object) rest);
        System.out.flush();
        System.out.println("RT enters=" + jp.rt.Rt.enters + " exits=" + jp.rt.Rt.exits + " counts=" + jp.rt.Rt.counts
                + " bytecodes=" + jp.rt.Rt.bytecodes + " ticks=" + jp.rt.Rt.ticks + " caughts=" + jp.rt.Rt.caughts);
    }
}
