// A Java function called by H2 from SQL (CREATE ALIAS): its call count is known.
public class JpH2Fn {
    public static int twice(int x) {
        return 2 * x;
    }
}
