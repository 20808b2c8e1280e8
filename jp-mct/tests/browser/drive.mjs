// Drives Debian's chromium headless over the DevTools protocol (Node's WebSocket, no npm
// packages) and reports what the page shows as JSON on stdout: the Rust tests assert on it.
//
// node --experimental-websocket drive.mjs STEPS.json
// STEPS: {"chromium": path, "screenshots": dir, "timeout_s": n (60), "steps": [STEP, ...]}
// STEP: {"do": "frames"} | {"do": "search", "text": q ("" clears)} | {"do": "hover", "frame": label}
//     | {"do": "click", "frame": label} | {"do": "reset"} | {"do": "screenshot", "name": n}
//     | {"do": "eval", "js": expression} | {"do": "wait", "ms": n} | {"do": "goto", "url": u}
//     | {"do": "until", "js": expression, "ms": n}: evaluate every 100 ms (also while the page
//       reloads itself) until the value is truthy or n ms passed; reports the last value
//       and the time waited
//     | {"do": "signal", "file": path}: create the file, for the test waiting on it
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const profile = mkdtempSync(join(tmpdir(), "jp-chromium-"));
const browser = spawn(spec.chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--remote-debugging-port=0", "--user-data-dir=" + profile, "--window-size=1200,700",
  "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });

// Chromium writes its profile until it has exited: remove the directory after that.
let exited = false;
browser.on("exit", () => (exited = true));
async function finish(code) {
  browser.kill("SIGKILL");
  for (let k = 0; k < 100 && !exited; k++) await new Promise((r) => setTimeout(r, 20));
  try {
    rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
  } catch (e) {
    // A leftover temporary directory is no reason to fail the check.
  }
  process.exit(code);
}
function fail(message) {
  console.error("drive.mjs: " + message);
  finish(1);
}
const timeout = spec.timeout_s || 60;
setTimeout(() => fail("timed out after " + timeout + " s"), timeout * 1000).unref();

let wsSeen = false;
const wsUrl = await new Promise((resolve) => {
  let err = "";
  browser.stderr.on("data", (d) => {
    err += d;
    const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) {
      wsSeen = true;
      resolve(m[1]);
    }
  });
  browser.on("exit", (code) => {
    if (!wsSeen) fail("chromium exited (" + code + ") before DevTools listened:\n" + err);
  });
});

const ws = new WebSocket(wsUrl);
await new Promise((resolve, reject) => {
  ws.onopen = resolve;
  ws.onerror = () => reject(new Error("cannot connect to " + wsUrl));
});
let nextId = 1;
const pending = new Map();
const events = [];
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
  } else if (msg.method) events.push(msg);
};
function send(method, params = {}, sessionId) {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params, sessionId }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}

const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const page = (method, params) => send(method, params, sessionId);
await page("Page.enable");
await page("Runtime.enable");
await page("Emulation.setDeviceMetricsOverride", { width: 1200, height: 700, deviceScaleFactor: 1, mobile: false });

async function evaluate(expression) {
  const r = await page("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error("page: " + JSON.stringify(r.exceptionDetails));
  return r.result.value;
}
async function load(url) {
  events.length = 0;
  await page("Page.navigate", { url });
  for (let k = 0; k < 200; k++) {
    if (await evaluate("document.readyState === 'complete'")) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  fail("page did not load: " + url);
}
// The drawn frames as the user sees them: label, classes, width on screen.
const FRAMES = `[...document.querySelectorAll('#graph .f')].map(d => ({
  label: d.textContent, match: d.classList.contains('match'), ancestor: d.classList.contains('anc'),
  width: Math.round(d.getBoundingClientRect().width) }))`;
async function centre(label) {
  const box = await evaluate(`(() => { const d = [...document.querySelectorAll('#graph .f')]
      .find(d => d.textContent === ${JSON.stringify(label)});
    if (!d) return null; const r = d.getBoundingClientRect();
    return { x: r.left + Math.min(r.width / 2, 20), y: r.top + r.height / 2 }; })()`);
  if (!box) fail("no frame labelled " + label);
  return box;
}
async function mouse(type, at) {
  await page("Input.dispatchMouseEvent", { type, x: at.x, y: at.y, button: "left", clickCount: 1 });
}

const report = [];
for (const step of spec.steps) {
  try {
    switch (step.do) {
      case "goto":
        await load(step.url);
        report.push({ url: step.url });
        break;
      case "frames":
        report.push({ frames: await evaluate(FRAMES) });
        break;
      case "search":
        // As a user would: empty the field, then type (an empty text just clears it).
        await evaluate("(() => { const s = document.getElementById('search'); s.value = ''; " +
          "s.dispatchEvent(new Event('input')); s.focus(); })()");
        if (step.text !== "") await page("Input.insertText", { text: step.text });
        report.push({ frames: await evaluate(FRAMES), status: await evaluate("document.getElementById('status').textContent") });
        break;
      case "hover": {
        await mouse("mouseMoved", await centre(step.frame));
        report.push({ tooltip: await evaluate("getComputedStyle(tip).display === 'none' ? null : tip.textContent") });
        break;
      }
      case "click": {
        const at = await centre(step.frame);
        await mouse("mouseMoved", at);
        await mouse("mousePressed", at);
        await mouse("mouseReleased", at);
        report.push({ frames: await evaluate(FRAMES) });
        break;
      }
      case "reset":
        await evaluate("document.getElementById('reset').click()");
        report.push({ frames: await evaluate(FRAMES) });
        break;
      case "eval":
        report.push({ value: await evaluate(step.js) });
        break;
      case "until": {
        const t0 = Date.now();
        let value = null;
        while (Date.now() - t0 < step.ms) {
          try {
            value = await evaluate(step.js);
          } catch (e) {
            value = null; // the page is between two documents
          }
          if (value) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        report.push({ value, waited_ms: Date.now() - t0 });
        break;
      }
      case "signal":
        writeFileSync(step.file, "");
        report.push({});
        break;
      case "wait":
        await new Promise((r) => setTimeout(r, step.ms));
        report.push({});
        break;
      case "screenshot": {
        const shot = await page("Page.captureScreenshot", { format: "png" });
        const file = join(spec.screenshots, step.name + ".png");
        writeFileSync(file, Buffer.from(shot.data, "base64"));
        report.push({ screenshot: file });
        break;
      }
      default:
        fail("unknown step " + JSON.stringify(step));
    }
  } catch (e) {
    fail("step " + JSON.stringify(step) + ": " + e.message);
  }
}
const errors = events.filter((e) => e.method === "Runtime.exceptionThrown").map((e) => e.params.exceptionDetails);
console.log(JSON.stringify({ report, errors }));
ws.close();
await finish(0);
