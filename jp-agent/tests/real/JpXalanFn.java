// A Java extension function called by Xalan from the stylesheet: one call per <item>.
public class JpXalanFn {
    public static String shout(String s) {
        return s.toUpperCase() + "!";
    }
}
