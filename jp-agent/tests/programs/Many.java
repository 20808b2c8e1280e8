// One context with many children: main and fan each call 64 distinct methods (40 of
// Many, 24 of Many.B, loaded later so its method ids come after Many's), three rounds,
// fan in the reverse order. A node's children outgrow every table size up to 128 slots;
// the ids are consecutive, so tables fill up with few collisions and some become full
// before they grow (the lookup must stop after one pass). Every call and bytecode is
// compared with the oracle, node by node.
public class Many {
    static int a00(int x) { return x + 0; }
    static int a01(int x) { return x + 1; }
    static int a02(int x) { return x + 2; }
    static int a03(int x) { return x + 3; }
    static int a04(int x) { return x + 4; }
    static int a05(int x) { return x + 5; }
    static int a06(int x) { return x + 6; }
    static int a07(int x) { return x + 7; }
    static int a08(int x) { return x + 8; }
    static int a09(int x) { return x + 9; }
    static int a10(int x) { return x + 10; }
    static int a11(int x) { return x + 11; }
    static int a12(int x) { return x + 12; }
    static int a13(int x) { return x + 13; }
    static int a14(int x) { return x + 14; }
    static int a15(int x) { return x + 15; }
    static int a16(int x) { return x + 16; }
    static int a17(int x) { return x + 17; }
    static int a18(int x) { return x + 18; }
    static int a19(int x) { return x + 19; }
    static int a20(int x) { return x + 20; }
    static int a21(int x) { return x + 21; }
    static int a22(int x) { return x + 22; }
    static int a23(int x) { return x + 23; }
    static int a24(int x) { return x + 24; }
    static int a25(int x) { return x + 25; }
    static int a26(int x) { return x + 26; }
    static int a27(int x) { return x + 27; }
    static int a28(int x) { return x + 28; }
    static int a29(int x) { return x + 29; }
    static int a30(int x) { return x + 30; }
    static int a31(int x) { return x + 31; }
    static int a32(int x) { return x + 32; }
    static int a33(int x) { return x + 33; }
    static int a34(int x) { return x + 34; }
    static int a35(int x) { return x + 35; }
    static int a36(int x) { return x + 36; }
    static int a37(int x) { return x + 37; }
    static int a38(int x) { return x + 38; }
    static int a39(int x) { return x + 39; }

    static final class B {
        static int b00(int x) { return x ^ 0; }
        static int b01(int x) { return x ^ 1; }
        static int b02(int x) { return x ^ 2; }
        static int b03(int x) { return x ^ 3; }
        static int b04(int x) { return x ^ 4; }
        static int b05(int x) { return x ^ 5; }
        static int b06(int x) { return x ^ 6; }
        static int b07(int x) { return x ^ 7; }
        static int b08(int x) { return x ^ 8; }
        static int b09(int x) { return x ^ 9; }
        static int b10(int x) { return x ^ 10; }
        static int b11(int x) { return x ^ 11; }
        static int b12(int x) { return x ^ 12; }
        static int b13(int x) { return x ^ 13; }
        static int b14(int x) { return x ^ 14; }
        static int b15(int x) { return x ^ 15; }
        static int b16(int x) { return x ^ 16; }
        static int b17(int x) { return x ^ 17; }
        static int b18(int x) { return x ^ 18; }
        static int b19(int x) { return x ^ 19; }
        static int b20(int x) { return x ^ 20; }
        static int b21(int x) { return x ^ 21; }
        static int b22(int x) { return x ^ 22; }
        static int b23(int x) { return x ^ 23; }
    }

    static int fan(int s) {
        s = a39(s);
        s = a38(s);
        s = a37(s);
        s = a36(s);
        s = a35(s);
        s = a34(s);
        s = a33(s);
        s = a32(s);
        s = a31(s);
        s = a30(s);
        s = a29(s);
        s = a28(s);
        s = a27(s);
        s = a26(s);
        s = a25(s);
        s = a24(s);
        s = B.b23(s);
        s = a23(s);
        s = B.b22(s);
        s = a22(s);
        s = B.b21(s);
        s = a21(s);
        s = B.b20(s);
        s = a20(s);
        s = B.b19(s);
        s = a19(s);
        s = B.b18(s);
        s = a18(s);
        s = B.b17(s);
        s = a17(s);
        s = B.b16(s);
        s = a16(s);
        s = B.b15(s);
        s = a15(s);
        s = B.b14(s);
        s = a14(s);
        s = B.b13(s);
        s = a13(s);
        s = B.b12(s);
        s = a12(s);
        s = B.b11(s);
        s = a11(s);
        s = B.b10(s);
        s = a10(s);
        s = B.b09(s);
        s = a09(s);
        s = B.b08(s);
        s = a08(s);
        s = B.b07(s);
        s = a07(s);
        s = B.b06(s);
        s = a06(s);
        s = B.b05(s);
        s = a05(s);
        s = B.b04(s);
        s = a04(s);
        s = B.b03(s);
        s = a03(s);
        s = B.b02(s);
        s = a02(s);
        s = B.b01(s);
        s = a01(s);
        s = B.b00(s);
        s = a00(s);
        return s;
    }

    public static void main(String[] args) {
        int s = 1;
        for (int r = 0; r < 3; r++) {
            s = a00(s);
            s = a01(s);
            s = a02(s);
            s = a03(s);
            s = a04(s);
            s = a05(s);
            s = a06(s);
            s = a07(s);
            s = a08(s);
            s = a09(s);
            s = a10(s);
            s = a11(s);
            s = a12(s);
            s = a13(s);
            s = a14(s);
            s = a15(s);
            s = a16(s);
            s = a17(s);
            s = a18(s);
            s = a19(s);
            s = a20(s);
            s = a21(s);
            s = a22(s);
            s = a23(s);
            s = a24(s);
            s = a25(s);
            s = a26(s);
            s = a27(s);
            s = a28(s);
            s = a29(s);
            s = a30(s);
            s = a31(s);
            s = a32(s);
            s = a33(s);
            s = a34(s);
            s = a35(s);
            s = a36(s);
            s = a37(s);
            s = a38(s);
            s = a39(s);
            s = B.b00(s);
            s = B.b01(s);
            s = B.b02(s);
            s = B.b03(s);
            s = B.b04(s);
            s = B.b05(s);
            s = B.b06(s);
            s = B.b07(s);
            s = B.b08(s);
            s = B.b09(s);
            s = B.b10(s);
            s = B.b11(s);
            s = B.b12(s);
            s = B.b13(s);
            s = B.b14(s);
            s = B.b15(s);
            s = B.b16(s);
            s = B.b17(s);
            s = B.b18(s);
            s = B.b19(s);
            s = B.b20(s);
            s = B.b21(s);
            s = B.b22(s);
            s = B.b23(s);
            s = fan(s);
        }
        System.out.println("many " + s);
    }
}
