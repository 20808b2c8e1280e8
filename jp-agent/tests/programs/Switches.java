// tableswitch, lookupswitch, string switch, enum switch (javac's $SwitchMap class).
public class Switches {
    enum Color { RED, GREEN, BLUE }

    static int table(int k) {
        switch (k) {
            case 0: return 10;
            case 1: return 11;
            case 2: return 12;
            case 3: return 13;
            case 4: k += 5;
            case 5: return 15 + k;
            default: return -1;
        }
    }

    static int lookup(int k) {
        switch (k) {
            case -1000: return 1;
            case 7: return 2;
            case 100000: return 3;
            case 42: return 4;
            default: return 0;
        }
    }

    static int str(String s) {
        switch (s) {
            case "alpha": return 1;
            case "beta": return 2;
            case "Aa": return 3;   // "Aa" and "BB" share a hash code
            case "BB": return 4;
            default: return 0;
        }
    }

    static int color(Color c) {
        switch (c) {
            case RED: return 1;
            case BLUE: return 3;
            default: return 2;
        }
    }

    public static void main(String[] args) {
        int s = 0;
        for (int k = -2; k < 9; k++) s += table(k);
        int[] keys = { -1000, 7, 100000, 42, 0, 5 };
        for (int k : keys) s += lookup(k);
        String[] strs = { "alpha", "beta", "Aa", "BB", "gamma", "" };
        for (String x : strs) s += str(x);
        for (Color c : Color.values()) s += color(c);
        System.out.println(s);
    }
}
