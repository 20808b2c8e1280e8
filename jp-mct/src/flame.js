// jp's flame graph: lays out the frames of the data block above (pre-order, with depths),
// draws the ones wider than half a pixel as divs, and offers search, zoom and a tooltip.
// Plain DOM, no libraries: the page must work from a file on a machine without network.
(function () {
  "use strict";
  // One graph, or {types, default, graphs}: one graph per sample type, switched by the
  // selector without a round trip; the URL's fragment (#type=offcpu) names the one drawn.
  const ALL = JSON.parse(document.getElementById("jp-data").textContent);
  const types = ALL.types || null;
  // A frame: [name index, depth, width, calls (-1: none), inclusive, exclusive,
  //           and for a diff: base calls, base inclusive, base exclusive].
  let D, F, n, parent, end, x, maxDepth;
  const ROW = 18;
  function load(data) {
    D = data;
    F = D.frames;
    n = F.length;
    parent = new Int32Array(n);
    end = new Int32Array(n);
    x = new Float64Array(n);
    maxDepth = 0;
    const open = [];
    const cursor = [];
    let top = 0;
    for (let i = 0; i < n; i++) {
      const d = F[i][1];
      while (open.length > d) end[open.pop()] = i;
      cursor.length = d;
      if (d === 0) {
        parent[i] = -1;
        x[i] = top;
        top += F[i][2];
      } else {
        parent[i] = open[d - 1];
        x[i] = cursor[d - 1];
        cursor[d - 1] += F[i][2];
      }
      open.push(i);
      cursor[d] = x[i];
      if (d > maxDepth) maxDepth = d;
    }
    while (open.length) end[open.pop()] = n;
    document.getElementById("title").textContent = D.title;
    document.getElementById("subtitle").textContent = D.subtitle + liveNote();
  }
  function liveNote() {
    return D.refresh > 0 ? " · live: reloads every " + D.refresh + " s (paused while zoomed or searching)" : "";
  }
  const select = document.getElementById("type");
  function typeInUrl() {
    const m = /(?:^#|&)type=([a-z]+)/.exec(location.hash);
    return m && types.indexOf(m[1]) >= 0 ? m[1] : ALL.default;
  }
  function loadType(key) {
    select.value = key;
    load(ALL.graphs[types.indexOf(key)]);
  }
  if (types) loadType(typeInUrl());
  else load(ALL);
  const name = (i) => D.names[F[i][0]];
  const graph = document.getElementById("graph");
  const tip = document.getElementById("tip");
  const search = document.getElementById("search");
  const status = document.getElementById("status");
  let zoomed = -1;
  let pattern = null;

  function hash(s) {
    let h = 2166136261;
    for (let k = 0; k < s.length; k++) h = Math.imul(h ^ s.charCodeAt(k), 16777619);
    return (h >>> 0) / 4294967296;
  }
  function colour(i) {
    const f = F[i];
    if (f[0] === D.cut_name) return "#d0d0d0";
    if (!D.diff) {
      const h = hash(name(i));
      return "hsl(" + (10 + 40 * h).toFixed(0) + ",85%," + (55 + 12 * hash(name(i) + "#")).toFixed(0) + "%)";
    }
    // Sampled profiles compare by share (equal fractions divide to equal doubles).
    const now = D.by_share ? share(f[4], D.total) : f[4];
    const base = D.by_share ? share(f[7], D.base_total) : f[7];
    if (now === base) return "#e6e6e6";
    if (base === 0) return "rgb(220,30,30)";
    if (now === 0) return "repeating-linear-gradient(45deg,#7fa7e0 0 4px,#cfdcf2 4px 8px)";
    const c = (now - base) / Math.max(now, base);
    const v = Math.round(230 * (1 - Math.min(1, Math.abs(c) * 1.5 + 0.1)));
    return c > 0 ? "rgb(255," + v + "," + v + ")" : "rgb(" + v + "," + v + ",255)";
  }
  function share(part, whole) {
    return whole > 0 ? part / whole : 0;
  }
  function fmt(v) {
    return v.toLocaleString("en-US");
  }
  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(part === whole ? 0 : 3) + "%" : "-";
  }
  function signed(v) {
    return (v > 0 ? "+" : "") + fmt(v);
  }
  function matches(i) {
    return pattern !== null && pattern.test(name(i));
  }

  function frameDiv(i, left, width, ancestor) {
    const div = document.createElement("div");
    div.className = "f" + (ancestor ? " anc" : "") + (matches(i) ? " match" : "");
    div.dataset.i = i;
    div.style.left = left + "%";
    div.style.width = width + "%";
    div.style.top = F[i][1] * ROW + "px";
    div.style.background = colour(i);
    div.textContent = name(i);
    return div;
  }

  function render() {
    const px = graph.clientWidth || 1000;
    const frag = document.createDocumentFragment();
    let lo = 0, hi = n, x0 = 0, span = D.width;
    if (zoomed >= 0) {
      for (let a = parent[zoomed]; a >= 0; a = parent[a]) frag.appendChild(frameDiv(a, 0, 100, true));
      lo = zoomed;
      hi = end[zoomed];
      x0 = x[zoomed];
      span = F[zoomed][2];
    }
    let drawn = 0;
    for (let i = lo; i < hi; i++) {
      const w = F[i][2] / span;
      if (w * px < 0.5) {
        i = end[i] - 1; // its children are narrower still
        continue;
      }
      frag.appendChild(frameDiv(i, 100 * (x[i] - x0) / span, 100 * w, false));
      drawn++;
    }
    graph.replaceChildren(frag);
    graph.style.height = (maxDepth + 1) * ROW + "px";
    graph.dataset.drawn = drawn;
    graph.dataset.zoomed = zoomed;
    showStatus();
  }

  function showStatus() {
    if (pattern === null) {
      status.textContent = "";
      return;
    }
    // Share of matching frames, not counting a match inside another match twice.
    let sum = 0, count = 0;
    for (let i = 0; i < n; i++) {
      if (matches(i)) {
        count++;
        sum += F[i][4];
        i = end[i] - 1;
      }
    }
    status.textContent = count + " matching subtrees, " + pct(sum, D.total) + " of " + D.unit;
  }

  function tipText(i) {
    const f = F[i];
    const lines = [name(i)];
    // Sampled profiles: two runs of different lengths, what compares is the share.
    const byShare = D.diff && D.by_share;
    if (D.diff) {
      if (f[3] >= 0) lines.push("calls: " + fmt(f[6]) + " → " + fmt(f[3]) + " (" + signed(f[3] - f[6]) + ")");
      const growth = byShare ? "" : f[7] > 0 ? ", " + ((f[4] - f[7]) / f[7] * 100).toFixed(2) + "%" : f[4] > 0 ? ", added" : "";
      lines.push("inclusive " + D.unit + ": " + fmt(f[7]) + " → " + fmt(f[4]) + " (" + signed(f[4] - f[7]) + growth + ")");
      lines.push("exclusive " + D.unit + ": " + fmt(f[8]) + " → " + fmt(f[5]) + " (" + signed(f[5] - f[8]) + ")");
      if (f[4] === 0 && f[7] > 0) lines.push("removed in the new profile");
    } else {
      if (f[3] >= 0) lines.push("calls: " + fmt(f[3]));
      lines.push("inclusive " + D.unit + ": " + fmt(f[4]));
      lines.push("exclusive " + D.unit + ": " + fmt(f[5]));
    }
    const inZoom = zoomed >= 0 ? ", " + pct(f[4], F[zoomed][4]) + " of the zoomed frame" : "";
    if (byShare) {
      const points = 100 * (share(f[4], D.total) - share(f[7], D.base_total));
      const change = points === 0 ? "unchanged" : (points > 0 ? "+" : "") + points.toFixed(3) + " points";
      lines.push("share: " + pct(f[7], D.base_total) + " → " + pct(f[4], D.total) + " (" + change + ")" + inZoom);
    } else {
      lines.push("share: " + pct(f[4], D.total) + " of all" + inZoom);
    }
    return lines.join("\n");
  }

  graph.addEventListener("mousemove", (e) => {
    const t = e.target.closest(".f");
    if (!t) {
      tip.style.display = "none";
      return;
    }
    tip.textContent = tipText(+t.dataset.i);
    tip.style.display = "block";
    const right = e.clientX + 14 + tip.offsetWidth > window.innerWidth;
    tip.style.left = (right ? e.clientX - 14 - tip.offsetWidth : e.clientX + 14) + "px";
    tip.style.top = e.clientY + 14 + "px";
  });
  graph.addEventListener("mouseleave", () => (tip.style.display = "none"));
  graph.addEventListener("click", (e) => {
    const t = e.target.closest(".f");
    if (!t) return;
    zoomed = +t.dataset.i;
    render();
  });
  document.getElementById("reset").addEventListener("click", () => {
    zoomed = -1;
    render();
  });
  search.addEventListener("input", () => {
    const q = search.value;
    if (q === "") pattern = null;
    else {
      try {
        pattern = new RegExp(q, "i");
      } catch (err) {
        pattern = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
    for (const div of graph.children) div.classList.toggle("match", matches(+div.dataset.i));
    showStatus();
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      zoomed = -1;
      render();
    }
  });
  window.addEventListener("resize", render);
  if (D.refresh > 0) {
    // jpd's live page: fresh counts every few seconds, unless the user is looking closer.
    setInterval(() => {
      if (zoomed < 0 && pattern === null && !document.hidden) location.reload();
    }, D.refresh * 1000);
  }
  if (types) {
    // The selector: another graph of the same data, the zoom let go, the search kept.
    const show = (key) => {
      loadType(key);
      zoomed = -1;
      render();
    };
    select.addEventListener("change", () => {
      history.replaceState(null, "", "#type=" + select.value);
      show(select.value);
    });
    window.addEventListener("hashchange", () => show(typeInUrl()));
  }
  // For the console: redraw, and how many frames the data holds (the live page gets new
  // data by reloading itself, above).
  window.jpFlame = { render, get frames() { return n; }, get type() { return types ? select.value : null; } };
  render();
})();
