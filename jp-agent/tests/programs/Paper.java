// The JP paper's example: f() calls h() and g(i) for i = 1..10; g(i) calls h() i times.
// Expected counts are derived by hand in tests/paper.rs from `javap -c` of this file.
public class Paper {
    public static void main(String[] args) {
        new Paper().f();
    }

    void f() {
        for (int i = 1; i <= 10; i++) {
            h();
            g(i);
        }
    }

    void g(int n) {
        for (int j = 0; j < n; j++) {
            h();
        }
    }

    void h() {
    }
}
