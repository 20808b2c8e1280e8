import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.function.IntUnaryOperator;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

// Lambdas, method references and streams: the JDK calls back into application
// code; the lambda bodies must be children of the application method that
// called the stream operation (through uninstrumented JDK and lambda-proxy frames).
public class Lambdas {
    static int square(int x) { return x * x; }
    static boolean odd(int x) { return (x & 1) == 1; }

    static int streamSum() {
        return IntStream.rangeClosed(1, 20).filter(Lambdas::odd).map(x -> square(x) + 1).sum();
    }

    static List<String> names() {
        List<String> l = new ArrayList<>(Arrays.asList("delta", "alpha", "charlie", "bravo", "echo"));
        Collections.sort(l, (a, b) -> compareLen(a, b));
        return l.stream().map(s -> s.toUpperCase()).collect(Collectors.toList());
    }

    static int compareLen(String a, String b) {
        int d = a.length() - b.length();
        return d != 0 ? d : a.compareTo(b);
    }

    static int applyTwice(IntUnaryOperator op, int v) {
        return op.applyAsInt(op.applyAsInt(v));
    }

    public static void main(String[] args) {
        System.out.println(streamSum());
        System.out.println(names());
        int base = 3;
        System.out.println(applyTwice(v -> v * base + 1, 5));
        Runnable r = () -> System.out.println(square(base));
        r.run();
        List<Integer> li = new ArrayList<>();
        for (int i = 0; i < 10; i++) li.add(i);
        li.forEach(i -> { if (odd(i)) square(i); });
        System.out.println(li.stream().mapToInt(Integer::intValue).map(Lambdas::square).max().getAsInt());
    }
}
