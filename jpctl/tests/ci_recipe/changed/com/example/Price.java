// The recipe's change: the same prices, 6 more bytecodes each (the gate must catch it).
package com.example;

class Price {
    static long of(int item) {
        long p = item * 3L + 1;
        if (p < 0) {
            p = -p;
        }
        return p;
    }
}
