// rhino: fib(n) for n = 0..14. JS calls of fib: sum of (2*F(n+1) - 1) = 3177.
function fib(n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}
var out = [];
for (var i = 0; i < 15; i++) {
    out.push(fib(i));
}
print(out.join(","));
var words = "the quick brown fox jumps over the lazy dog".split(" ");
var counts = {};
words.forEach(function (w) { counts[w] = (counts[w] || 0) + 1; });
print(Object.keys(counts).sort().map(function (k) { return k + "=" + counts[k]; }).join(" "));
