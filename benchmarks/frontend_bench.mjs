// Speed of the WUR tab in real Chromium (Debian's /usr/bin/chromium, via playwright-core):
//   node benchmarks/frontend_bench.mjs [--layers 500] [--columns 2000] [--repeat 10]
// A small Node server plays the plugin's routes (/runs, /heatmap in the WUR1 format, /flags)
// over synthetic data and serves the committed bundle tb_wur_plugin/static/index.js, so this
// measures the frontend alone:
//   - draw: the commit of the heatmaps after a band change (performance.measure "wur-draw", the
//     whole update of every block in place: color table, canvas, labels, axis), median of
//     --repeat redraws;
//   - hover: one mousemove on the heatmap -> tooltip updated and laid out, median of 200 moves.
// Budget (issue 4): draw < 50 ms for 500 layers x 2000 columns, hover < 16 ms.
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const LAYERS = arg("layers", 500), COLUMNS = arg("columns", 2000), REPEAT = arg("repeat", 10);
const bundle = readFileSync(path.join(here, "..", "tb_wur_plugin", "static", "index.js"));
const tags = Array.from({ length: LAYERS }, (_, i) => `model/block_${Math.floor(i / 2)}/${i % 2 ? "bias" : "kernel"}`);

function payload() {
  // codes: a smooth field of ratios around 1e-3 with a few specials; WUR1 layout as heatmap.pack
  const n = LAYERS * COLUMNS;
  const codes = new Uint16Array(n);
  for (let r = 0; r < LAYERS; r++) {
    for (let c = 0; c < COLUMNS; c++) {
      const lg = -3 + 1.5 * Math.sin(r / 17) + 0.8 * Math.cos(c / 150);
      const k = Math.floor(lg) - 2, m = Math.min(999, Math.max(100, Math.round(10 ** (lg - k))));
      codes[r * COLUMNS + c] = (r * 7 + c) % 997 === 0 ? 1 + (c % 5) : 6 + (k + 42) * 900 + (m - 100);
    }
  }
  const steps = Float64Array.from({ length: COLUMNS }, (_, c) => c * 5);
  const arrays = [
    ["column_start", "float64", new Uint8Array(steps.buffer), COLUMNS],
    ["column_first", "float64", new Uint8Array(steps.buffer), COLUMNS],
    ["column_last", "float64", new Uint8Array(steps.buffer), COLUMNS],
    ["column_count", "uint32", new Uint8Array(new Uint32Array(COLUMNS).fill(1).buffer), COLUMNS],
  ];
  const planes = new Uint8Array(2 * n);
  for (let i = 0; i < n; i++) { planes[i] = codes[i] >> 8; planes[n + i] = codes[i] & 255; }
  arrays.push(["codes_0", "uint16_planes", planes, n]);
  const layout = {};
  let offset = 0;
  const chunks = [];
  for (const [name, dtype, bytes, length] of arrays) {
    layout[name] = { dtype, offset, length };
    const padded = new Uint8Array(Math.ceil(bytes.length / 8) * 8);
    padded.set(bytes);
    chunks.push(padded);
    offset += padded.length;
  }
  let text = JSON.stringify({
    start: 0, end: (COLUMNS - 1) * 5, reduction: "mean_log10", columns: COLUMNS,
    codes: { missing: 0, nan: 1, inf: 2, zero: 3, tiny: 4, huge: 5, first_value: 6, mantissas: 900, min_exponent: -42, max_exponent: 21 },
    runs: [{ run: "bench", tags, codes: "codes_0" }], arrays: layout,
  });
  while ((text.length + 8) % 8) text += " ";
  const head = Buffer.from(text);
  const out = Buffer.alloc(8 + head.length + offset);
  out.write("WUR1");
  out.writeUInt32LE(head.length, 4);
  head.copy(out, 8);
  let at = 8 + head.length;
  for (const c of chunks) { Buffer.from(c).copy(out, at); at += c.length; }
  return out;
}

const heatmap = payload();
const runs = JSON.stringify({ runs: [{ run: "bench", first_step: 0, last_step: (COLUMNS - 1) * 5, has_learning_rate: false,
  layers: tags.map((tag) => ({ tag, description: "", first_step: 0, last_step: (COLUMNS - 1) * 5, logged_steps: COLUMNS, has_histograms: false })) }] });
const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const send = (type, body) => { res.writeHead(200, { "Content-Type": type }); res.end(body); };
  if (url.pathname === "/") send("text/html", '<!doctype html><meta charset="utf-8"><body><script type="module">import("./index.js").then((m) => m.render());</script>');
  else if (url.pathname === "/index.js") send("text/javascript", bundle);
  else if (url.pathname === "/runs") send("application/json", runs);
  else if (url.pathname === "/heatmap") send("application/octet-stream", heatmap);
  else if (url.pathname === "/flags") send("application/json", JSON.stringify({ run: url.searchParams.get("run"), low: 1e-4, high: 1e-2, layers: [] }));
  else { res.writeHead(404); res.end("not found"); }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${server.address().port}/`;

const profile = mkdtempSync(path.join(os.tmpdir(), "wur-bench-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium", headless: true, viewport: { width: 2400, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  const t0 = Date.now();
  await page.goto(base);
  const canvas = page.locator('[data-testid="wur-heatmap"]');
  await canvas.waitFor({ timeout: 60000 });
  const load = Date.now() - t0;
  const cols = +(await canvas.getAttribute("data-cols"));
  const rows = +(await canvas.getAttribute("data-rows"));
  // redraws of the same data (theme/band changes take this path): the heatmaps commit, timed by the app
  const { out: draws, frames } = await page.evaluate(async (repeat) => {
    const input = document.querySelector('[data-testid="wur-band-high"]');
    const out = [], frames = [];
    for (let i = 0; i < repeat; i++) {
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      performance.clearMeasures("wur-draw");
      const t = performance.now();
      input.value = i % 2 ? "1e-2" : "2e-2";
      input.dispatchEvent(new Event("change"));
      // the change marks the heatmaps stale; the next frame's commit redraws them, then the
      // frame is produced (style, layout, paint of the updated DOM and canvas)
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      frames.push(performance.now() - t);
      out.push(performance.getEntriesByName("wur-draw")[0].duration);
    }
    return { out, frames };
  }, REPEAT);
  const first = await page.evaluate(() => performance.getEntriesByName("wur-draw").length);
  const hover = await page.evaluate(() => {
    const cv = document.querySelector('[data-testid="wur-heatmap"]');
    const rect = cv.getBoundingClientRect();
    const tip = document.querySelector('[data-testid="wur-tooltip"]');
    const times = [];
    for (let i = 0; i < 200; i++) {
      const x = rect.left + ((i * 37) % rect.width), y = rect.top + Math.min(rect.height - 1, (i * 53) % Math.min(rect.height, 900));
      const t = performance.now();
      cv.dispatchEvent(new MouseEvent("mousemove", { clientX: x, clientY: y, bubbles: true }));
      void tip.offsetHeight; // force layout of the updated tooltip
      times.push(performance.now() - t);
    }
    return times;
  });
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const max = (xs) => Math.max(...xs);
  console.log(`heatmap ${rows} layers x ${cols} columns (canvas ${await canvas.evaluate((c) => `${c.width}x${c.height}`)} device px), page load to drawn ${load} ms${first ? "" : ""}`);
  console.log(`draw:  median ${median(draws).toFixed(1)} ms, max ${max(draws).toFixed(1)} ms over ${draws.length} redraws   (budget 50 ms)`);
  console.log(`draw + next frame: median ${median(frames).toFixed(1)} ms, max ${max(frames).toFixed(1)} ms`);
  console.log(`hover: median ${median(hover).toFixed(2)} ms, max ${max(hover).toFixed(2)} ms over ${hover.length} moves   (budget 16 ms)`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  server.close();
}
