// The README's "catch a regression in CI" recipe: the code under test.
package com.example;

public class Prices {
    public static long total(int[] items) {
        long sum = 0;
        for (int i : items) {
            sum += Price.of(i);
        }
        return sum;
    }
}
