// The README's "catch a regression in CI" recipe: the test suite (JUnit 5).
package com.example;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class PricesTest {
    @Test
    void threeItems() {
        assertEquals(4 + 7 + 10, Prices.total(new int[] {1, 2, 3}));
    }

    @Test
    void aThousandItems() {
        int[] items = new int[1000];
        for (int i = 0; i < items.length; i++) {
            items[i] = i;
        }
        assertEquals(3L * 999 * 1000 / 2 + 1000, Prices.total(items));
    }
}
