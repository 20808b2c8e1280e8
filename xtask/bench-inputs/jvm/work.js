// bench jvm (rhino): recursion, objects, strings, arrays.
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
var s = 0;
for (var i = 0; i < 3; i++) s += fib(24);
var words = [];
for (var i = 0; i < 20000; i++) words.push("w" + (i * 7919 % 1000));
var counts = {};
words.forEach(function (w) { counts[w] = (counts[w] || 0) + 1; });
var keys = Object.keys(counts).sort();
print(s + " " + keys.length + " " + counts[keys[0]]);
