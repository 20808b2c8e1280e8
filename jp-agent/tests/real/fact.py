# jython: fact(n) for n = 0..9. Python calls of fact: 1 + 1 + 2 + ... + 9 = 46.
def fact(n):
    if n <= 1:
        return 1
    return n * fact(n - 1)

total = 0
for i in range(10):
    total += fact(i)
print(total)
words = "the quick brown fox jumps over the lazy dog".split()
counts = {}
for w in words:
    counts[w] = counts.get(w, 0) + 1
print(" ".join("%s=%d" % (k, counts[k]) for k in sorted(counts)))
