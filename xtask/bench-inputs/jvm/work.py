# bench jvm (jython): loops, dicts, strings, recursion.
def primes(n):
    sieve = [True] * (n + 1)
    out = []
    for i in range(2, n + 1):
        if sieve[i]:
            out.append(i)
            for j in range(i * i, n + 1, i):
                sieve[j] = False
    return out

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

p = primes(60000)
d = {}
for w in ("k%d" % (i % 997) for i in range(40000)):
    d[w] = d.get(w, 0) + 1
print(len(p), fib(20), len(d))
