// Browser test of the WUR tab in Debian's chromium, driven by playwright-core.
//   node tests/browser/wur_tab.mjs CONFIG.json
// CONFIG: {url, mode: "data" | "empty" | "screenshot", artifacts, label, runs: [{run, tags, steps}],
//          exports: {run: export JSON}, flags: {run: [tag, ...]}, histogram_tag, screenshot,
//          line_search: {run, data: its /line_search answer}}
// Exits non-zero with a message naming the failed check. Called by tests/browser/test_frontend.py.
import { createRequire } from "node:module";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const CHROMIUM = process.env.WUR_CHROMIUM || "/usr/bin/chromium";
const XSS_TAG = "<img src=x onerror=alert(1)>";

const T0 = Date.now();
class CheckFailed extends Error {}
const expectedErrors = []; // console errors a check provoked on purpose
function check(ok, message) {
  if (!ok) throw new CheckFailed(message);
}
function log(message) {
  process.stdout.write(`[${config.label}] ${((Date.now() - T0) / 1000).toFixed(1)}s ${message}\n`);
}

/** What the tooltip must say about an exported ratio (TensorBoard JSON: non-finite as strings). */
function expectedRatioText(v) {
  if (v === "NaN") return "ratio NaN";
  if (v === "Infinity") return "ratio +inf";
  if (v === 0) return "ratio 0";
  return `ratio ${Number(v).toPrecision(3)}`;
}

async function main() {
  check(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: run scripts/frontend.sh (apt-get install -y chromium)`);
  const profile = mkdtempSync(path.join(os.tmpdir(), "wur-chromium-"));
  const downloads = mkdtempSync(path.join(os.tmpdir(), "wur-downloads-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    deviceScaleFactor: config.dpr || 1,
    acceptDownloads: true,
    downloadsPath: downloads,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const errors = [];
  const dialogs = [];
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(20000);
    page.on("console", (m) => {
      const where = m.location()?.url ?? "";
      // the browser's own favicon request when the plugin page is opened on its own
      if (m.type() === "error" && !where.endsWith("/favicon.ico")) errors.push(`console: ${m.text()} @ ${where}`);
    });
    page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    page.on("dialog", async (d) => { dialogs.push(d.message()); await d.dismiss(); });
    if (config.artifacts) {
      // on a failed check, a picture of what the page showed
      const failed = path.join(config.artifacts, `wur-failed-${config.label}.png`);
      process.on("exit", (code) => { if (code) process.stderr.write(`[${config.label}] the page at the failure: ${failed}\n`); });
      page.__failedShot = failed;
    }
    try {
      await runMode(page, context);
    } catch (e) {
      if (page.__failedShot) await page.screenshot({ path: page.__failedShot }).catch(() => {});
      throw e;
    }
    check(!dialogs.length, `a dialog opened (script injection?): ${dialogs.join(", ")}`);
    const unexpected = errors.filter((e) => !expectedErrors.some((re) => re.test(e)));
    check(!unexpected.length, `errors in the browser console:\n  ${unexpected.join("\n  ")}`);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
    rmSync(downloads, { recursive: true, force: true });
  }
}

async function runMode(page, context) {
  {
    if (config.mode === "empty") await empty(page);
    else if (config.mode === "live") await live(page);
    else if (config.mode === "binned") await binned(page);
    else if (config.mode === "basic") await basic(page, await openTab(page));
    else if (config.mode === "screenshot") await screenshot(page);
    else if (config.mode === "axis") await axis(page);
    else await full(page, context);
  }
}

function frame(page) {
  return page.frameLocator('iframe[src*="plugin_entry.html?name=wur"]');
}

const heatmapRequests = [];
const wurRequests = []; // every request of the tab to its backend, in order
const wurOut = new Set(); // those not yet answered

async function openTab(page) {
  const t0 = Date.now();
  page.on("request", (r) => {
    if (r.url().includes("/data/plugin/wur/heatmap")) heatmapRequests.push(r.url());
    if (r.url().includes("/data/plugin/wur/")) {
      wurRequests.push(r.url());
      wurOut.add(r);
    }
  });
  page.on("requestfinished", (r) => wurOut.delete(r));
  page.on("requestfailed", (r) => wurOut.delete(r));
  await page.goto(`${config.url}/#wur`);
  const f = frame(page);
  await f.locator('[data-testid="wur-ready"]').waitFor({ timeout: 60000 });
  log(`tab ready in ${Date.now() - t0} ms`);
  return f;
}

async function heatmapAttrs(f) {
  return f.locator('[data-testid="wur-heatmap"]').evaluateAll((els) =>
    els.map((e) => ({ run: e.dataset.run, rows: +e.dataset.rows, cols: +e.dataset.cols, start: +e.dataset.start, end: +e.dataset.end, reduction: e.dataset.reduction })));
}

async function waitAttrs(f, predicate, what) {
  const deadline = Date.now() + 20000;
  let last;
  while (Date.now() < deadline) {
    last = await heatmapAttrs(f);
    if (predicate(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new CheckFailed(`timed out waiting for ${what}; heatmaps: ${JSON.stringify(last)}`);
}

/** Center of cell (row, col) of the heatmap of `run`, in page coordinates. */
async function cellCenter(f, run, row, col) {
  const canvas = f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`);
  // one round trip where the heatmap is in view already (the usual case): its size, and
  // whether all of it is in the tab's viewport
  const seen = await canvas.evaluate((c) => {
    const r = c.getBoundingClientRect();
    return { rows: +c.dataset.rows, cols: +c.dataset.cols, inView: r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight && r.right <= innerWidth };
  });
  if (!seen.inView) await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const { rows, cols } = seen;
  check(box && rows && cols, `heatmap of ${run} has no size (${JSON.stringify(box)}, ${rows}x${cols})`);
  return { x: box.x + ((col + 0.5) * box.width) / cols, y: box.y + ((row + 0.5) * box.height) / rows };
}

async function hoverText(page, f, run, row, col) {
  const { x, y } = await cellCenter(f, run, row, col);
  await page.mouse.move(x, y);
  const tip = f.locator('[data-testid="wur-tooltip"]');
  await tip.waitFor({ state: "visible" });
  return tip.innerText();
}

async function full(page, context) {
  const f = await openTab(page);
  const want = config.runs;
  await basic(page, f);
  await interact(page, f, want);
}

/** Rows, columns, labels of every run; every cell of the first run and some of the others
 * against the export. */
async function basic(page, f) {
  const want = config.runs;

  // rows and columns match the data, runs in order
  await waitAttrs(f, (a) => a.length === want.length, `${want.length} heatmaps`);
  let attrs = await heatmapAttrs(f);
  check(JSON.stringify(attrs.map((a) => a.run)) === JSON.stringify(want.map((w) => w.run)), `runs shown ${JSON.stringify(attrs.map((a) => a.run))}`);
  for (const [i, w] of want.entries()) {
    check(attrs[i].rows === w.tags.length, `${w.run}: data-rows ${attrs[i].rows}, want ${w.tags.length}`);
    check(attrs[i].cols === w.steps.length, `${w.run}: data-cols ${attrs[i].cols}, want ${w.steps.length}`);
    const labels = await f.locator(`[data-testid="wur-heatmap"][data-run="${w.run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').allTextContents();
    check(JSON.stringify(labels) === JSON.stringify(w.tags), `${w.run}: row labels ${JSON.stringify(labels)}, want ${JSON.stringify(w.tags)}`);
  }
  log(`heatmaps ${JSON.stringify(attrs.map((a) => `${a.run} ${a.rows}x${a.cols}`))}`);
  // one canvas pixel per cell, scaled by the compositor without smoothing: crisp at any
  // devicePixelRatio. Check it on screen: every pixel of a screenshot of the heatmap (taken
  // at the device's resolution) has the exact color of a cell, none is a blend of two.
  const hm = f.locator('[data-testid="wur-heatmap"]').first();
  const info = await hm.evaluate((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const colors = new Set();
    for (let i = 0; i < d.length; i += 4) colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    return { w: c.width, h: c.height, dpr: devicePixelRatio, rendering: getComputedStyle(c).imageRendering, colors: [...colors] };
  });
  check(info.dpr === (config.dpr || 1), `devicePixelRatio ${info.dpr}`);
  check(info.w === attrs[0].cols && info.h === attrs[0].rows && info.rendering === "pixelated", `canvas ${info.w}x${info.h} ${info.rendering}`);
  const shot = (await hm.screenshot({ scale: "device" })).toString("base64");
  const blended = await hm.evaluate(async (c, { shot, colors }) => {
    const img = new Image();
    img.src = `data:image/png;base64,${shot}`;
    await img.decode();
    const cv = document.createElement("canvas");
    cv.width = img.width; cv.height = img.height;
    const ctx = cv.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, cv.width, cv.height).data;
    const known = new Set(colors);
    let off = 0, total = 0;
    for (let y = 2; y < cv.height - 2; y++) {
      for (let x = 2; x < cv.width - 2; x++) { // the outermost pixels may blend with the page
        const i = 4 * (y * cv.width + x);
        if (!known.has((d[i] << 16) | (d[i + 1] << 8) | d[i + 2])) off++;
        total++;
      }
    }
    return { off, total, w: img.width };
  }, { shot, colors: info.colors });
  check(blended.total > 0 && blended.off / blended.total < 0.001, `blurred heatmap: ${blended.off} of ${blended.total} screen pixels are not cell colors`);
  log(`crisp at devicePixelRatio ${info.dpr}: ${blended.w} px wide screenshot, ${blended.off} blended pixels`);

  // the tooltip shows the exact exported value, for every cell of the first run and some of the second
  let hovered = 0;
  for (const w of want) {
    const exported = config.exports[w.run];
    const cols = w.run === want[0].run ? w.steps.map((_, c) => c) : [0, Math.floor(w.steps.length / 2), w.steps.length - 1];
    for (const [row, tag] of w.tags.entries()) {
      for (const col of cols) {
        const step = w.steps[col];
        const point = exported[tag].find((p) => p[1] === step);
        check(point, `export of ${w.run} lacks ${tag} at step ${step}`);
        const text = await hoverText(page, f, w.run, row, col);
        for (const part of [tag, `step ${step}`, expectedRatioText(point[2])]) {
          check(text.includes(part), `tooltip of ${w.run} ${tag} at step ${step} lacks "${part}":\n${text}`);
        }
        hovered++;
      }
    }
  }
  log(`${hovered} tooltips match the export`);
  // settled: one heatmap request at load (no refetch when the page grows a scrollbar)
  check(heatmapRequests.length === 1, `${heatmapRequests.length} heatmap requests while loading:\n  ${heatmapRequests.join("\n  ")}`);
}

async function interact(page, f, want) {
  let attrs;

  await settled(page, f);
  const marked = await flaggedRowsMarked(f);
  log(`flagged rows are marked at once (${marked} rows, before any click)`);
  await namesAreText(page, f, want);
  if (config.skipped) await skippedSteps(page, f, want);
  if (config.line_search) await lineSearch(page, f, want);

  // legend: the band and the special colors are explained
  const legend = await f.locator('[data-testid="wur-legend"]').innerText();
  for (const part of ["not logged", "did not move", "+inf", "NaN", "target"]) check(legend.includes(part), `legend lacks "${part}": ${legend}`);

  // keyboard: focus the first heatmap, move with the arrows, Enter opens the layer
  const first = want[0];
  await f.locator(`[data-testid="wur-heatmap"][data-run="${first.run}"]`).focus();
  await page.keyboard.press("ArrowRight");
  await page.keyboard.press("ArrowRight");
  await page.keyboard.press("ArrowDown");
  let tip = await f.locator('[data-testid="wur-tooltip"]').innerText();
  check(tip.includes(first.tags[1]) && tip.includes(`step ${first.steps[2]}`), `keyboard cursor tooltip: ${tip}`);
  await page.keyboard.press("Enter");
  await f.locator(`[data-testid="wur-detail"][data-tag="${first.tags[1]}"]`).waitFor();
  log("keyboard navigation works");

  // layer filter by regex; an invalid one is reported and changes nothing
  const filter = f.locator('[data-testid="wur-layer-filter"]');
  await filter.fill("dense");
  attrs = await waitAttrs(f, (a) => a.every((x, i) => x.rows === want[i].tags.filter((t) => /dense/i.test(t)).length), "the dense filter");
  await filter.fill("dense(");
  await f.locator('[data-testid="wur-filter-error"]', { hasText: "Invalid regular expression" }).waitFor();
  attrs = await heatmapAttrs(f);
  check(attrs.every((x, i) => x.rows === want[i].tags.filter((t) => /dense/i.test(t)).length), `an invalid regex changed the rows: ${JSON.stringify(attrs)}`);
  await filter.fill("");
  await waitAttrs(f, (a) => a.every((x, i) => x.rows === want[i].tags.length), "the cleared filter");
  log("layer filter works");

  // run toggle
  if (want.length > 1) {
    const last = want[want.length - 1].run;
    const got = await requestsDuring(page, f, async () => {
      await f.locator(`[data-testid="wur-run-toggle"][data-run="${last}"]`).uncheck();
      await waitAttrs(f, (a) => a.length === want.length - 1 && !a.some((x) => x.run === last), `${last} hidden`);
      if (config.line_search?.run === last) check(await f.locator('[data-testid="wur-line-search"]').count() === 0, "the line-search strip of a hidden run is shown");
    });
    const shown = await requestsDuring(page, f, async () => {
      await f.locator(`[data-testid="wur-run-toggle"][data-run="${last}"]`).check();
      await waitAttrs(f, (a) => a.length === want.length, `${last} shown again`);
    });
    // the heatmap and the flags of the runs shown; a line-search strip comes back from the
    // cache (no /line_search)
    expectRequests(got, ["heatmap", ...want.slice(1).map(() => "flags")], `hiding ${last}`);
    expectRequests(shown, ["heatmap", ...want.map(() => "flags")], `showing ${last} again`);
    if (config.line_search?.run === last) await f.locator(`[data-testid="wur-line-search"][data-run="${last}"]`).waitFor();
    log("run toggle works");
  }

  // grouping by layer: a header row per layer with 2+ variables showing the worst; collapsible
  if (config.group) {
    const g = config.group; // {name, members, worst}
    const first = want[0];
    await f.locator('[data-testid="wur-group"]').check();
    const grouped = first.tags.length + 1;
    await waitAttrs(f, (a) => a[0].rows === grouped, "grouped rows");
    const header = f.locator(`[data-testid="wur-group-label"][data-group="${g.name}"]`).first();
    check((await header.innerText()).includes(`${g.name} (${g.members.length})`), `group header: ${await header.innerText()}`);
    const headerRow = await header.evaluate((e) => [...e.parentElement.children].indexOf(e));
    const text = await hoverText(page, f, first.run, headerRow, 0);
    const point = config.exports[first.run][g.worst].find((p) => p[1] === first.steps[0]);
    check(text.includes(g.worst) && text.includes(expectedRatioText(point[2])) && text.includes(`worst of the ${g.members.length} variables`), `group row tooltip: ${text}`);
    await header.click();
    await waitAttrs(f, (a) => a[0].rows === grouped - g.members.length, "collapsed group");
    await f.locator(`[data-testid="wur-group-label"][data-group="${g.name}"]`).first().click();
    await waitAttrs(f, (a) => a[0].rows === grouped, "expanded group");
    await f.locator('[data-testid="wur-group"]').uncheck();
    await waitAttrs(f, (a) => a[0].rows === first.tags.length, "ungrouped rows");
    log("grouping by layer works");
  }

  // zoom: drag over columns 2..9 of the first run, the backend answers that range
  const a = await cellCenter(f, first.run, 0, 2);
  const b = await cellCenter(f, first.run, 0, 9);
  await page.mouse.move(a.x, a.y);
  await page.mouse.down();
  await page.mouse.move((a.x + b.x) / 2, a.y, { steps: 4 });
  await page.mouse.move(b.x, b.y, { steps: 4 });
  await page.mouse.up();
  const zoomEnd = first.steps[10] - 1;
  const inZoom = first.steps.filter((s) => s >= first.steps[2] && s <= zoomEnd);
  attrs = await waitAttrs(f, (x) => x[0].start === first.steps[2], "the zoomed range");
  check(attrs[0].end === zoomEnd && attrs[0].cols === inZoom.length, `zoom: ${JSON.stringify(attrs[0])}, want steps ${first.steps[2]}..${zoomEnd} in ${inZoom.length} columns`);
  if (config.line_search) {
    // the strip follows the zoomed columns: the searched steps of the range only
    const ls = config.line_search;
    const wantPoints = ls.data.steps.filter((s) => s >= first.steps[2] && s <= zoomEnd).length;
    const points = await f.locator(`[data-testid="wur-line-search"][data-run="${ls.run}"]`).getAttribute("data-points");
    check(Number(points) === wantPoints, `line-search points after zoom: ${points}, want ${wantPoints}`);
  }
  if (config.skipped) {
    // the skipped-step marks follow the zoomed columns
    const marked = await f.locator(`[data-testid="wur-heatmap"][data-run="${config.skipped.run}"]`).getAttribute("data-skipped-columns");
    check(marked === String(inZoom.indexOf(config.skipped.step)), `skipped columns after zoom: "${marked}", want step ${config.skipped.step} at ${inZoom.indexOf(config.skipped.step)}`);
  }
  {
    const tag = first.tags[0];
    const point = config.exports[first.run][tag].find((p) => p[1] === inZoom[3]);
    const text = await hoverText(page, f, first.run, 0, 3);
    check(text.includes(`step ${inZoom[3]}`) && text.includes(expectedRatioText(point[2])), `tooltip after zoom: ${text}`);
  }
  // reload keeps the zoom and the filter: TensorBoard's reload button and our refresh button
  await filter.fill("kernel");
  const kernelRows = want.map((w) => w.tags.filter((t) => /kernel/i.test(t)).length);
  await waitAttrs(f, (x) => x.every((h, i) => h.rows === kernelRows[i]), "the kernel filter");
  const runsRequests = [];
  page.on("request", (r) => { if (r.url().includes("/data/plugin/wur/runs")) runsRequests.push(r.url()); });
  const lineSearchRequests = () => wurRequests.filter((u) => new URL(u).pathname.endsWith("/line_search")).length;
  const lineSearchBefore = lineSearchRequests();
  await page.locator("button.reload-button").click();
  await f.locator('[data-state="loading"]').waitFor({ state: "detached", timeout: 20000 }).catch(() => {});
  const deadline = Date.now() + 15000;
  while (!runsRequests.length && Date.now() < deadline) await page.waitForTimeout(100);
  check(runsRequests.length >= 1, "TensorBoard's reload did not reach the tab (experimental.DataReloaded)");
  await f.locator('.wur-root[data-state="idle"]').waitFor();
  attrs = await heatmapAttrs(f);
  check(attrs[0].start === first.steps[2] && attrs.every((h, i) => h.rows === kernelRows[i]), `reload lost zoom or filter: ${JSON.stringify(attrs)}`);
  await f.locator('[data-testid="wur-refresh"]').click();
  while (runsRequests.length < 2 && Date.now() < deadline + 10000) await page.waitForTimeout(100);
  check(runsRequests.length >= 2, "the refresh button did not refetch");
  await f.locator('.wur-root[data-state="idle"]').waitFor();
  attrs = await heatmapAttrs(f);
  check(attrs[0].start === first.steps[2] && attrs.every((h, i) => h.rows === kernelRows[i]), `refresh lost zoom or filter: ${JSON.stringify(attrs)}`);
  if (config.line_search) {
    // each reload fetches the line search again, once (TensorBoard's reload and Refresh: 2)
    await settled(page, f);
    check(lineSearchRequests() - lineSearchBefore === runsRequests.length, `${lineSearchRequests() - lineSearchBefore} /line_search requests over ${runsRequests.length} reloads`);
    await f.locator(`[data-testid="wur-line-search"][data-run="${config.line_search.run}"]`).waitFor();
  }
  await filter.fill("");
  log("zoom works and survives reloads");
  // double-click resets the zoom; the button too
  const c = await cellCenter(f, first.run, 0, 1);
  await page.mouse.dblclick(c.x, c.y);
  await waitAttrs(f, (x) => x[0].cols === first.steps.length && x[0].start === first.steps[0], "double-click reset");
  check(await f.locator('[data-testid="wur-reset-zoom"]').isDisabled(), "reset button enabled without zoom");
  log("reset works");

  // reduction choice reaches the backend
  await f.locator('[data-testid="wur-reduction"]').selectOption("max");
  await waitAttrs(f, (x) => x.every((h) => h.reduction === "max"), "reduction max");
  await f.locator('[data-testid="wur-reduction"]').selectOption("mean_log10");
  await waitAttrs(f, (x) => x.every((h) => h.reduction === "mean_log10"), "reduction mean_log10");

  // layer detail: a click on a row opens the ratio line chart, the learning rate and the histogram density
  const htag = config.histogram_tag;
  const hrow = first.tags.indexOf(htag);
  const hc = await cellCenter(f, first.run, hrow, 5);
  await page.mouse.click(hc.x, hc.y);
  const detail = f.locator(`[data-testid="wur-detail"][data-tag="${htag}"][data-run="${first.run}"]`);
  await detail.waitFor();
  for (const id of ["wur-detail-ratio", "wur-detail-lr", "wur-detail-histogram"]) {
    const canvas = detail.locator(`[data-testid="${id}"]`);
    await canvas.waitFor();
    const inked = await canvas.evaluate((cv) => {
      const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
      let n = 0;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
      return n / (d.length / 4);
    });
    check(inked > 0.01, `${id} is blank (${inked})`);
  }
  {
    // hovering the line chart reads out the step, the ratio and the learning rate there
    const box = await detail.locator('[data-testid="wur-detail-ratio"]').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    const text = await f.locator('[data-testid="wur-tooltip"]').innerText();
    const step = Number(/step (\d+)/.exec(text)?.[1]);
    const point = config.exports[first.run][htag].find((p) => p[1] === step);
    check(point && text.includes(htag) && text.includes(expectedRatioText(point[2])) && text.includes("learning rate"), `detail chart readout: ${text}`);
  }
  {
    // the density: step, elements, the bucket under the pointer
    const box = await detail.locator('[data-testid="wur-detail-histogram"]').boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    const text = await f.locator('[data-testid="wur-tooltip"]').innerText();
    check(new RegExp(`step \\d+: ${config.histogram_elements} elements`).test(text) && /≤ \|Δw_i\|\/\|w_i\| </.test(text), `density readout: ${text}`);
  }
  log("layer detail works");
  await noRefetch(page, f, want);

  // flags: worst first, as the backend ranks them; a click scrolls to and highlights the row
  const flagTags = await f.locator('[data-testid="wur-flag"]').evaluateAll((els) => els.map((e) => [e.dataset.run, e.dataset.tag]));
  for (const [run, tags] of Object.entries(config.flags)) {
    const mine = flagTags.filter((x) => x[0] === run).map((x) => x[1]);
    check(JSON.stringify(mine) === JSON.stringify(tags), `flags of ${run}: ${JSON.stringify(mine)}, want ${JSON.stringify(tags)}`);
  }
  {
    // one table: a header row (layer, run, what, since), a row per flagged layer
    const table = f.locator('[data-testid="wur-flags"] table');
    check(await table.count() === 1, "the flags are not one table");
    const heads = await table.locator("th").allInnerTexts();
    check(JSON.stringify(heads.map((h) => h.trim().toLowerCase())) === JSON.stringify(["layer", "run", "what", "since step"]), `flag table columns: ${JSON.stringify(heads)}`);
    const row = table.locator(`[data-testid="wur-flag"][data-tag="${config.nan_tag}"]`).first();
    check(await row.evaluate((e) => e.tagName) === "TR" && (await row.locator("td").allInnerTexts())[2].startsWith("NaN"), `the NaN layer's row: ${await row.innerText()}`);
  }
  const nanFirst = flagTags[0];
  check(nanFirst[1] === config.nan_tag, `the NaN layer is not flagged first: ${JSON.stringify(flagTags)}`);
  const target = flagTags[flagTags.length - 1];
  await f.locator(`[data-testid="wur-flag"][data-run="${target[0]}"][data-tag="${target[1]}"]`).click();
  const highlight = f.locator('[data-testid="wur-row-highlight"]');
  await highlight.waitFor();
  check(await highlight.count() === 1, "not exactly one highlighted row");
  const highlightedLabel = await f.locator(`[data-testid="wur-heatmap"][data-run="${target[0]}"]`).locator("xpath=ancestor::section").locator(".wur-label.wur-highlighted").innerText();
  check(highlightedLabel === target[1], `highlighted ${highlightedLabel}, want ${target[1]}`);
  check(await highlight.isVisible() && await highlight.evaluate((e) => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }), "the highlighted row is not scrolled into view");
  // editable thresholds: a wider band flags fewer layers
  const before = flagTags.length;
  await f.locator('[data-testid="wur-band-low"]').fill("1e-7");
  await f.locator('[data-testid="wur-band-high"]').fill("1");
  await f.locator('[data-testid="wur-band-high"]').press("Tab");
  const deadlineFlags = Date.now() + 15000;
  let after = before;
  while (Date.now() < deadlineFlags && after >= before) {
    await page.waitForTimeout(100);
    after = await f.locator('[data-testid="wur-flag"]').count();
  }
  check(after < before, `a wider band did not reduce the flags (${before} -> ${after})`);
  await f.locator('[data-testid="wur-band-low"]').fill("1e-4");
  await f.locator('[data-testid="wur-band-high"]').fill("1e-2");
  await f.locator('[data-testid="wur-band-high"]').press("Tab");
  log(`flags work (${before} flagged, ${after} with a wider band)`);
  await patienceFlags(page, f, want);

  if (config.compare) await compareRuns(page, f, want);
  if (config.suggestion) await suggestedRate(page, f, want);

  // export: CSV and JSON from the backend, PNG of the canvas
  const section = f.locator(`[data-testid="wur-heatmap"][data-run="${first.run}"]`).locator("xpath=ancestor::section");
  const download = async (testid) => {
    const [d] = await Promise.all([page.waitForEvent("download"), section.locator(`[data-testid="${testid}"]`).click()]);
    const file = await d.path();
    check(file, `${testid}: the download failed (${await d.failure()})`);
    return { name: d.suggestedFilename(), bytes: readFileSync(file) };
  };
  const csv = await download("wur-export-csv");
  const lines = csv.bytes.toString("utf8").trim().split(/\r?\n/);
  check(lines[0] === "tag,step,wall_time,ratio", `CSV header: ${lines[0]}`);
  check(lines.length - 1 === first.tags.length * first.steps.length, `CSV rows: ${lines.length - 1}`);
  const json = JSON.parse((await download("wur-export-json")).bytes.toString("utf8"));
  check(JSON.stringify(Object.keys(json).sort()) === JSON.stringify([...first.tags].sort()), `JSON tags: ${Object.keys(json)}`);
  check(Object.values(json).every((points) => points.length === first.steps.length), "JSON export lacks steps");
  const view = (await download("wur-export-view")).bytes.toString("utf8").trim().split("\n");
  check(view[0] === "tag,first_step,last_step,logged_steps,ratio,held_from_step" && view.length - 1 === first.tags.length * first.steps.length, `view CSV: ${view.length - 1} rows, header ${view[0]}`);
  {
    const [tag, step] = [first.tags[0], first.steps[4]];
    const line = view.find((l) => l.startsWith(`${tag},${step},`));
    const point = config.exports[first.run][tag].find((p) => p[1] === step);
    check(line && line.endsWith(`,${Number(point[2]).toPrecision(3)},`), `view CSV line for ${tag} at ${step}: ${line}`); // measured: no held_from_step
  }
  const viewJson = JSON.parse((await download("wur-export-view-json")).bytes.toString("utf8"));
  check(viewJson.run === first.run && viewJson.columns.length === first.steps.length, `view JSON: ${viewJson.columns.length} columns`);
  {
    const [tag, k] = [first.tags[0], 4];
    const point = config.exports[first.run][tag].find((p) => p[1] === first.steps[k]);
    check(viewJson.layers[tag][k] === Number(Number(point[2]).toPrecision(3)), `view JSON value of ${tag} at ${first.steps[k]}: ${viewJson.layers[tag][k]}`);
  }
  const png = await download("wur-export-png");
  check(png.bytes.subarray(1, 4).toString() === "PNG" && png.bytes.length > 2000, `PNG export: ${png.bytes.length} bytes`);
  check(png.name.endsWith(".png"), `PNG name ${png.name}`);
  log(`export works (${csv.name}, ${png.name} ${png.bytes.length} bytes)`);

  // after every tooltip, detail, flag and export: still no element made of a name
  for (const tag of ["img", "i"]) check(await f.locator(tag).count() === 0, `a <${tag}> element exists in the tab`);

  await noRunShown(page, f, want);
  await widths(page, f, want);
  await shots(page, f);
}

const WIDTHS = [1000, 1280, 1600];

/** Every flag of the table marked at its row's label in its run's heatmap (data-flagged: the
 * reason, a dot whose title says it), and no other row; returns how many. */
async function flaggedRowsMarked(f) {
  const flags = await f.locator('[data-testid="wur-flag"]').evaluateAll((els) => els.map((e) => `${e.dataset.run} ${e.dataset.tag} ${e.dataset.reason}`));
  const marked = await f.locator('[data-testid="wur-row-label"][data-flagged]').evaluateAll((els) => els.map((e) => ({
    flag: `${e.closest("section").querySelector('[data-testid="wur-heatmap"]').dataset.run} ${e.dataset.tag} ${e.dataset.flagged}`,
    dot: e.querySelector(".wur-flag-mark")?.getAttribute("title") ?? "",
  })));
  check(flags.length > 0, "no flag to mark");
  check(JSON.stringify(marked.map((m) => m.flag).sort()) === JSON.stringify([...flags].sort()), `marked rows ${JSON.stringify(marked.map((m) => m.flag))}, flags ${JSON.stringify(flags)}`);
  check(marked.every((m) => m.dot.startsWith("Flagged: ")), `a marked row's dot does not say why: ${JSON.stringify(marked)}`);
  return marked.length;
}

/** What breaks a name or the width in the frame: the page wider than the window, a name wrapped
 * inside a word (a line may end only after "/" or "_"), a name cut (an element narrower than its
 * text) without a title naming it whole, a flag's text not across the flags' width or longer
 * than `maxWhatLines` lines. */
async function layoutProblems(f, maxWhatLines) {
  return f.locator("body").evaluate((body, maxWhatLines) => {
    const problems = [];
    const page = document.scrollingElement;
    if (page.scrollWidth > innerWidth) problems.push(`scroll width ${page.scrollWidth} > ${innerWidth}`);
    const names = [".wur-flag-tag", ".wur-flag-run", ".wur-block-head h3", ".wur-detail h3", ".wur-detail-head .wur-meta",
      ".wur-runs label > span:last-child", '[data-testid="wur-row-label"]', ".wur-compare-label"];
    let checked = 0;
    for (const el of document.querySelectorAll(names.join(","))) {
      if (!el.getClientRects().length) continue; // not shown
      const chars = [];
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (let i = 0; i < node.data.length; i++) {
          const range = document.createRange();
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          const rect = range.getClientRects()[0];
          if (rect) chars.push({ ch: node.data[i], top: rect.top });
        }
      }
      const text = chars.map((c) => c.ch).join("");
      for (let i = 1; i < chars.length; i++) {
        if (chars[i].top > chars[i - 1].top + 2 && !"/_".includes(chars[i - 1].ch) && chars[i - 1].ch !== " ") {
          problems.push(`"${text}" wraps inside a word: "${text.slice(0, i)}|${text.slice(i)}"`);
        }
      }
      // a name too long for its place is cut, never wrapped inside a word: its element or
      // the row it is in names it whole on hover
      const cut = getComputedStyle(el).overflowX !== "visible" && el.scrollWidth > el.clientWidth + 1;
      if (cut && !(el.closest("[title]")?.getAttribute("title") ?? "").includes(text)) problems.push(`"${text}" is cut and named nowhere whole: ${el.scrollWidth} > ${el.clientWidth}`);
      checked++;
    }
    if (!checked) problems.push("no name checked");
    const table = document.querySelector('[data-testid="wur-flags"] table');
    for (const what of document.querySelectorAll(".wur-flag-what")) {
      const lines = Math.round(what.getBoundingClientRect().height / parseFloat(getComputedStyle(what).lineHeight));
      if (what.getBoundingClientRect().width < 0.9 * table.getBoundingClientRect().width) problems.push(`a flag's text is ${what.getBoundingClientRect().width} px wide in a ${table.getBoundingClientRect().width} px table`);
      if (lines > maxWhatLines) problems.push(`a flag's text takes ${lines} lines: "${what.textContent}"`);
    }
    return problems;
  }, maxWhatLines);
}

/** At 1000, 1280 and 1600 px wide, with a comparison and a flagged layer's detail open: no
 * horizontal scroll, no name wrapped inside a word, the flags readable, every flagged row
 * marked; the detail says why the layer is flagged and opens below its run's heatmap, the
 * clicked row staying in view. A screenshot at each width. */
async function widths(page, f, want) {
  const reasons = (await (await page.request.get(`${config.url}/data/plugin/wur/reasons`)).json()).reasons;
  const before = page.viewportSize();
  const [runA, runB] = [want[0].run, want[1].run];
  await f.locator('[data-testid="wur-compare-a"]').selectOption(runA);
  await f.locator('[data-testid="wur-compare-b"]').selectOption(runB);
  await f.locator(`[data-testid="wur-compare"][data-run-a="${runA}"][data-run-b="${runB}"]`).waitFor();
  const measured = [];
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: 900 });
    await settled(page, f);
    await flaggedRowsMarked(f);
    // the flag of the last run with one: its row label clicked, lower down the page
    const flags = await f.locator('[data-testid="wur-flag"]').evaluateAll((els) => els.map((e) => ({
      run: e.dataset.run, tag: e.dataset.tag, reason: e.dataset.reason, text: e.querySelector(".wur-flag-what").textContent,
    })));
    const flag = flags.filter((x) => x.run === flags[flags.length - 1].run)[0];
    const section = f.locator(`[data-testid="wur-heatmap"][data-run="${flag.run}"]`).locator("xpath=ancestor::section");
    const label = section.locator(`[data-testid="wur-row-label"][data-tag="${flag.tag}"]`);
    await label.scrollIntoViewIfNeeded();
    await label.click();
    const detail = f.locator(`[data-testid="wur-detail"][data-run="${flag.run}"][data-tag="${flag.tag}"]`);
    await detail.locator('[data-testid="wur-detail-ratio"]').waitFor();
    await settled(page, f);
    const why = detail.locator('[data-testid="wur-detail-flag"]');
    const reasonWords = reasons.find((r) => r.name === flag.reason)?.label;
    const says = await why.innerText();
    check(await why.isVisible() && await why.getAttribute("data-reason") === flag.reason && reasonWords && says.includes(`Flagged: ${reasonWords}`) && says.includes(flag.text),
      `at ${width} px the detail of ${flag.run} ${flag.tag} says "${says}", want the reason "${reasonWords}" and "${flag.text}"`);
    const placed = await f.locator("body").evaluate((body, { run, tag }) => {
      const detail = document.querySelector('[data-testid="wur-detail"]');
      const section = document.querySelector(`[data-testid="wur-heatmap"][data-run="${CSS.escape(run)}"]`).closest("section");
      const row = section.querySelector(`[data-testid="wur-row-label"][data-tag="${CSS.escape(tag)}"]`).getBoundingClientRect();
      const top = document.querySelector(".wur-toolbar").getBoundingClientRect().bottom;
      return { after: section.nextElementSibling === detail, row: [row.top, row.bottom], view: [top, innerHeight], detailTop: detail.getBoundingClientRect().top };
    }, flag);
    check(placed.after, `at ${width} px the detail is not right below the heatmap of ${flag.run}`);
    check(placed.row[0] >= placed.view[0] - 1 && placed.row[1] <= placed.view[1] + 1 && placed.detailTop < placed.view[1],
      `at ${width} px the clicked row (${placed.row}) or the detail's top (${placed.detailTop}) is out of view (${placed.view})`);
    const problems = await layoutProblems(f, 6);
    check(!problems.length, `at ${width} px:\n  ${problems.join("\n  ")}`);
    measured.push(`${width}: scroll width ${await f.locator("body").evaluate(() => document.scrollingElement.scrollWidth)}`);
    if (config.artifacts) {
      mkdirSync(config.artifacts, { recursive: true });
      await page.screenshot({ path: path.join(config.artifacts, `wur-width-${config.label}-${width}.png`) });
    }
    await f.locator('[data-testid="wur-detail-close"]').click();
  }
  await f.locator('[data-testid="wur-compare-a"]').selectOption("");
  await page.setViewportSize(before);
  await settled(page, f);
  log(`widths work (${measured.join(", ")}: no horizontal scroll, names wrap only between words, the detail below its heatmap says why)`);
}

/** Waits until the tab has settled: for SETTLED_MS in a row, no request of the tab out, none
 * newly asked, and the tab idle (longer than the tab's own timers: a click's 260 ms, a
 * resize's 200 ms). */
const SETTLED_MS = 300;
// the count of the tab's requests when it last settled (-1: never)
let settledAt = -1;
async function settled(page, f) {
  const deadline = Date.now() + 20000;
  let asked = wurRequests.length, quietSince = Date.now();
  while (true) {
    await page.waitForTimeout(25);
    const quiet = wurOut.size === 0 && wurRequests.length === asked
      && await f.locator('.wur-root[data-state="idle"]').count() === 1;
    if (!quiet) {
      asked = wurRequests.length;
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= SETTLED_MS) {
      settledAt = wurRequests.length;
      return;
    }
    check(Date.now() < deadline, `the tab did not settle in 20 s (${wurOut.size} requests out)`);
  }
}

/** The routes the tab requested while `action` ran (and until it settled), sorted. */
async function requestsDuring(page, f, action) {
  // settled already where no request was made since it last settled
  if (settledAt !== wurRequests.length || wurOut.size) await settled(page, f);
  const from = wurRequests.length;
  await action();
  await settled(page, f);
  return wurRequests.slice(from).map((u) => new URL(u).pathname.replace(/^.*\/data\/plugin\/wur\//, "")).sort();
}

function expectRequests(got, want, what) {
  check(JSON.stringify(got) === JSON.stringify([...want].sort()), `${what}: the tab requested ${JSON.stringify(got)}, want exactly ${JSON.stringify(want)}`);
}

/** With a layer's detail open: a theme change fetches nothing, a band change only the flags
 * (judged on the server, one request a shown run), a zoom change only the heatmap (binned on
 * the server); the detail redraws from what it has. */
async function noRefetch(page, f, want) {
  const first = want[0];
  const detail = f.locator(`[data-testid="wur-detail"][data-run="${first.run}"][data-tag="${config.histogram_tag}"]`);
  await detail.locator('[data-testid="wur-detail-histogram"]').waitFor();
  const chart = detail.locator('[data-testid="wur-detail-ratio"]');
  const pixels = () => chart.evaluate((c) => c.toDataURL());
  const theme = () => f.locator("html").getAttribute("data-theme");
  let before = await pixels();
  // the system's color scheme
  for (const scheme of ["dark", "light"]) {
    const got = await requestsDuring(page, f, async () => {
      await page.emulateMedia({ colorScheme: scheme });
      await f.locator(`html[data-theme="${scheme}"]`).waitFor({ state: "attached" });
    });
    expectRequests(got, [], `prefers-color-scheme ${scheme}`);
    const now = await pixels();
    check(now !== before, `the detail was not redrawn for the ${scheme} theme`);
    before = now;
  }
  // TensorBoard's own theme: the host page's body.dark-mode
  for (const dark of [true, false]) {
    const got = await requestsDuring(page, f, async () => {
      await page.evaluate((on) => document.body.classList.toggle("dark-mode", on), dark);
      await f.locator(`html[data-theme="${dark ? "dark" : "light"}"]`).waitFor({ state: "attached" });
    });
    expectRequests(got, [], `host body.dark-mode ${dark ? "on" : "off"}`);
  }
  check(await theme() === "light", `theme ${await theme()} after the toggles`);
  // the band: the flags of each shown run, nothing else
  for (const low of ["1e-5", "1e-4"]) {
    const got = await requestsDuring(page, f, async () => {
      await f.locator('[data-testid="wur-band-low"]').fill(low);
      await f.locator('[data-testid="wur-band-low"]').press("Tab");
    });
    expectRequests(got, want.map(() => "flags"), `band low ${low}`);
    const now = await pixels();
    check(now !== before, `the detail's band was not redrawn for low ${low}`);
    before = now;
  }
  // the patience: the flags of each shown run, with it, nothing else
  for (const patience of ["3", "5"]) {
    const from = wurRequests.length;
    const got = await requestsDuring(page, f, async () => {
      await f.locator('[data-testid="wur-patience"]').fill(patience);
      await f.locator('[data-testid="wur-patience"]').press("Tab");
    });
    expectRequests(got, want.map(() => "flags"), `patience ${patience}`);
    const asked = wurRequests.slice(from).map((u) => new URL(u).searchParams.get("patience"));
    check(asked.every((p) => p === patience), `patience ${patience} sent as ${JSON.stringify(asked)}`);
  }
  // the zoom: one heatmap, nothing else; the detail follows the range
  await f.locator(`[data-testid="wur-heatmap"][data-run="${first.run}"]`).scrollIntoViewIfNeeded();
  const a = await cellCenter(f, first.run, 0, 2), b = await cellCenter(f, first.run, 0, 9);
  let got = await requestsDuring(page, f, async () => {
    await page.mouse.move(a.x, a.y);
    await page.mouse.down();
    await page.mouse.move((a.x + b.x) / 2, a.y, { steps: 4 });
    await page.mouse.move(b.x, b.y, { steps: 4 });
    await page.mouse.up();
    await waitAttrs(f, (x) => x[0].start === first.steps[2], "the zoomed range");
  });
  expectRequests(got, ["heatmap"], "zoom");
  check(await detail.count() === 1 && (await pixels()) !== before, "the detail did not follow the zoom");
  got = await requestsDuring(page, f, async () => {
    await f.locator('[data-testid="wur-reset-zoom"]').click();
    await waitAttrs(f, (x) => x[0].start === first.steps[0] && x[0].cols === first.steps.length, "the reset zoom");
  });
  expectRequests(got, ["heatmap"], "reset zoom");
  check((await pixels()) === before, "the detail after the reset differs from before the zoom");
  log("no refetch on theme, band (flags only) or zoom (heatmap only) changes");
}

/** The flags table for each patience lists exactly the layers of /flags (and of the report:
 * tests/browser/test_frontend.py) for the same band and patience, in its order; an invalid patience
 * says so and asks for nothing. */
async function patienceFlags(page, f, want) {
  const input = f.locator('[data-testid="wur-patience"]');
  const table = async () => f.locator('[data-testid="wur-flag"]').evaluateAll((els) => els.map((e) => [e.dataset.run, e.dataset.tag]));
  const counts = [];
  for (const [patience, byRun] of Object.entries(config.flags_by_patience)) {
    await input.fill(patience);
    await input.press("Tab");
    await settled(page, f);
    const rows = await table();
    for (const [run, tags] of Object.entries(byRun)) {
      const mine = rows.filter((x) => x[0] === run).map((x) => x[1]);
      check(JSON.stringify(mine) === JSON.stringify(tags), `patience ${patience}: flags of ${run} ${JSON.stringify(mine)}, want ${JSON.stringify(tags)}`);
    }
    check(rows.length === Object.values(byRun).flat().length, `patience ${patience}: ${rows.length} rows`);
    counts.push(`${patience}: ${rows.length}`);
  }
  for (const bad of ["0", "2.5", "x"]) {
    const got = await requestsDuring(page, f, async () => {
      await input.fill(bad);
      await input.press("Tab");
    });
    expectRequests(got, [], `invalid patience ${bad}`);
    const hint = await f.locator('[data-testid="wur-patience-error"]').innerText();
    check(/whole number/.test(hint) && await input.evaluate((e) => e.classList.contains("wur-invalid")), `invalid patience ${bad}: hint "${hint}"`);
  }
  await input.fill("5");
  await input.press("Tab");
  await settled(page, f);
  check(await f.locator('[data-testid="wur-patience-error"]').innerText() === "", "the patience hint stays");
  log(`patience works (${counts.join(", ")} flagged)`);
}

/** Two runs compared: one heatmap of ratio_A / ratio_B over their common layers and steps,
 * rows by divergence, every cell's tooltip and the ranking against numpy (from /export, in
 * tests/browser/test_frontend.py); fetched on picking the runs and on zoom only. */
async function compareRuns(page, f, want) {
  const c = config.compare;
  const canvas = f.locator('[data-testid="wur-compare"]');
  let got = await requestsDuring(page, f, async () => {
    await f.locator('[data-testid="wur-compare-a"]').selectOption(c.run_a);
  });
  expectRequests(got, [], "picking run A only");
  got = await requestsDuring(page, f, async () => {
    await f.locator('[data-testid="wur-compare-b"]').selectOption(c.run_b);
    await f.locator(`[data-testid="wur-compare"][data-run-a="${c.run_a}"][data-run-b="${c.run_b}"]`).waitFor();
  });
  expectRequests(got, ["compare"], "picking run B");
  const attrs = await canvas.evaluate((e) => ({ rows: +e.dataset.rows, cols: +e.dataset.cols }));
  check(attrs.rows === c.ranking.length && attrs.cols === c.steps.length, `comparison ${JSON.stringify(attrs)}, want ${c.ranking.length} x ${c.steps.length}`);
  // the ranking: order and divergence to 3 significant digits
  const ranked = await f.locator('[data-testid="wur-compare-ranking"] li').evaluateAll((els) => els.map((e) => [e.dataset.tag, e.textContent, e.title]));
  check(JSON.stringify(ranked.map((r) => r[0])) === JSON.stringify(c.ranking.map((r) => r.tag)), `ranking ${JSON.stringify(ranked)}, want ${JSON.stringify(c.ranking)}`);
  for (const [i, r] of c.ranking.entries()) {
    const divergence = Number(r.divergence).toPrecision(3);
    check(ranked[i][1].startsWith(`${divergence}  ·  A/B `) && ranked[i][2].includes(`divergence ${divergence}`), `ranking of ${r.tag}: "${ranked[i][1]}" (title "${ranked[i][2]}"), want divergence ${r.divergence}`);
  }
  // every cell (rows in ranking order) against numpy's ratio_A / ratio_B
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const tip = f.locator('[data-testid="wur-tooltip"]');
  let n = 0;
  for (const [row, r] of c.ranking.entries()) {
    for (const [k, step] of c.steps.entries()) {
      await page.mouse.move(box.x + ((k + 0.5) * box.width) / attrs.cols, box.y + ((row + 0.5) * box.height) / attrs.rows);
      await tip.waitFor({ state: "visible" });
      const lines = (await tip.innerText()).split("\n");
      const q = c.cells[r.tag][String(step)];
      const want = q === null || q === undefined ? null : `A/B ${Number(q).toPrecision(3)}`;
      check(lines[0] === r.tag && lines.includes(`step ${step}`) && (want ? lines.includes(want) : lines.some((l) => l.startsWith("A/B not compared"))),
        `comparison tooltip at ${r.tag}, step ${step}: ${JSON.stringify(lines)}, want ${want ?? "not compared"}`);
      n++;
    }
  }
  await page.mouse.move(1, 1);
  const legend = await f.locator('[data-testid="wur-compare-legend"]').innerText();
  check(legend.includes("ratio_A / ratio_B") && legend.includes("not compared"), `comparison legend: ${legend}`);
  // a band change does not fetch it; a zoom does (with the heatmap), over the zoomed steps
  got = await requestsDuring(page, f, async () => {
    await f.locator('[data-testid="wur-band-low"]').fill("1e-5");
    await f.locator('[data-testid="wur-band-low"]').press("Tab");
  });
  expectRequests(got, want.map(() => "flags"), "band change with a comparison shown");
  await f.locator('[data-testid="wur-band-low"]').fill("1e-4");
  await f.locator('[data-testid="wur-band-low"]').press("Tab");
  const first = want[0];
  await f.locator(`[data-testid="wur-heatmap"][data-run="${first.run}"]`).scrollIntoViewIfNeeded();
  const a = await cellCenter(f, first.run, 0, 2), b = await cellCenter(f, first.run, 0, 9);
  got = await requestsDuring(page, f, async () => {
    await page.mouse.move(a.x, a.y);
    await page.mouse.down();
    await page.mouse.move(b.x, b.y, { steps: 6 });
    await page.mouse.up();
    await waitAttrs(f, (x) => x[0].start === first.steps[2], "the zoomed range");
  });
  expectRequests(got, ["compare", "heatmap"], "zoom with a comparison shown");
  const zoomEnd = first.steps[10] - 1;
  const inZoom = c.steps.filter((s) => s >= first.steps[2] && s <= zoomEnd).length;
  const cols = +(await canvas.getAttribute("data-cols"));
  check(cols === inZoom, `comparison columns after zoom: ${cols}, want ${inZoom}`);
  got = await requestsDuring(page, f, async () => {
    await f.locator('[data-testid="wur-reset-zoom"]').click();
    await waitAttrs(f, (x) => x[0].start === first.steps[0], "the reset zoom");
  });
  expectRequests(got, ["compare", "heatmap"], "reset zoom with a comparison shown");
  log(`comparison works (${c.run_a} / ${c.run_b}: ${attrs.rows} layers x ${attrs.cols} steps, ${n} tooltips and the ranking match numpy)`);
}

/** The layer detail's suggested learning rate against numpy (tests/browser/test_frontend.py), one
 * /suggestions per run per reload; "learning rate not logged" for a run without one. */
async function suggestedRate(page, f, want) {
  const s = config.suggestion;
  const w = want.find((x) => x.run === s.run);
  const open = async (run, tag) => {
    const row = want.find((x) => x.run === run).tags.indexOf(tag);
    await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').nth(row).click();
    await f.locator(`[data-testid="wur-detail"][data-run="${run}"][data-tag="${tag}"] [data-testid="wur-detail-ratio"]`).waitFor();
  };
  const text = () => f.locator('[data-testid="wur-suggested-lr"]').innerText();
  // a refresh with a layer open fetches the suggestions once; another layer of the run none
  let got = await requestsDuring(page, f, async () => {
    await open(s.run, s.tag);
    await f.locator('[data-testid="wur-refresh"]').click();
    await page.waitForTimeout(200);
  });
  check(got.filter((r) => r === "suggestions").length === 1, `/suggestions over a refresh: ${JSON.stringify(got)}`);
  await f.locator('[data-testid="wur-suggested-lr"]', { hasText: "Suggested learning rate" }).waitFor();
  const value = Number(s.value).toPrecision(3);
  let t = await text();
  check(t.includes(`Suggested learning rate ${value} `) && t.includes("for a ratio of 1e-3") && t.includes(`last ${s.steps} judged steps`), `suggested learning rate: "${t}", want ${value} (${s.value})`);
  // the caveat: the server's words (the report prints the same), shown as sent
  const caveat = await f.locator('[data-testid="wur-suggested-lr-caveat"]').innerText();
  const sent = (await (await page.request.get(`${config.url}/data/plugin/wur/suggestions?run=${encodeURIComponent(s.run)}`)).json()).caveat;
  check(caveat === sent && /SGD/.test(caveat) && /Adam/.test(caveat) && /momentum/.test(caveat) && /schedules/.test(caveat), `caveat: "${caveat}", /suggestions says "${sent}"`);
  const other = w.tags.find((x) => x !== s.tag && x !== config.nan_tag);
  got = await requestsDuring(page, f, () => open(s.run, other));
  check(!got.includes("suggestions"), `opening another layer of ${s.run} asked for ${JSON.stringify(got)}`);
  t = await text();
  check(t.startsWith("Suggested learning rate"), `suggestion of ${other}: "${t}"`);
  // a run that logs no learning rate: said so, nothing asked
  const noLr = want.find((x) => x.run === config.no_lr_run);
  got = await requestsDuring(page, f, () => open(noLr.run, noLr.tags[0]));
  check(!got.includes("suggestions"), `a run without learning rate asked for ${JSON.stringify(got)}`);
  t = await text();
  check(t.includes("learning rate not logged"), `suggestion without a learning rate: "${t}"`);
  await f.locator('[data-testid="wur-detail-close"]').click();
  log(`suggested learning rate works (${s.tag}: ${value} for 1e-3, numpy ${s.value})`);
}

/** Every run deselected: the message, and nothing else (no heatmap, legend, zoom label, band
 * note, flags, detail); All brings them back. */
async function noRunShown(page, f, want) {
  const scroll = await f.locator("body").evaluate((b) => [b.scrollTop, document.documentElement.scrollTop]);
  await f.locator('[data-testid="wur-runs-none"]').click();
  await f.locator('[data-testid="wur-message"]', { hasText: "No run selected" }).waitFor();
  await settled(page, f);
  check(await f.locator('[data-testid="wur-heatmap"]').count() === 0, "a heatmap is shown with no run selected");
  const text = async (testid) => (await f.locator(`[data-testid="${testid}"]`).textContent()).trim();
  check(await text("wur-legend") === "" && await f.locator('[data-testid="wur-legend"] canvas').count() === 0, `the legend is shown with no run selected: "${await text("wur-legend")}"`);
  check(await text("wur-zoom-label") === "", `the zoom label says "${await text("wur-zoom-label")}" with no run selected`);
  check(await text("wur-flags-note") === "" && await f.locator('[data-testid="wur-flag"]').count() === 0, `the flags say "${await text("wur-flags-note")}" with no run selected`);
  check(!(await f.locator("body").innerText()).includes("stayed in the band"), "the band note is shown with no run selected");
  check(!(await f.locator('[data-testid="wur-detail"]').isVisible()), "the layer detail is shown with no run selected");
  await f.locator('[data-testid="wur-runs-all"]').click();
  await waitAttrs(f, (a) => a.length === want.length, "every run shown again");
  await f.locator('[data-testid="wur-legend"] canvas').waitFor();
  check(await text("wur-zoom-label") !== "", "no zoom label with the runs shown again");
  await f.locator("body").evaluate((b, [y, yy]) => { b.scrollTop = y; document.documentElement.scrollTop = yy; }, scroll);
  log("no run selected: only the message");
}

/** Tag and run names that are HTML are shown as text wherever they appear (row labels, run
 * headings, the run list, tooltips, the layer detail, the flags), never parsed: no element
 * made of them, no script run (the dialog check in main). */
async function namesAreText(page, f, want) {
  const runsWithHtml = want.filter((w) => /[<>]/.test(w.run)).map((w) => w.run);
  const tagged = want.find((w) => w.tags.includes(XSS_TAG));
  check(runsWithHtml.length && tagged, `the data lack an HTML run name or tag: ${JSON.stringify(want.map((w) => w.run))}`);
  const noElements = async (where) => {
    for (const tag of ["img", "i"]) check(await f.locator(tag).count() === 0, `a <${tag}> element exists in the tab (${where})`);
  };
  await noElements("at load");
  for (const w of want) {
    // the heading of the run's heatmap and its entry in the run list, exactly the name
    const heading = f.locator(`[data-testid="wur-heatmap"][data-run="${w.run}"]`).locator("xpath=ancestor::section").locator("h3");
    check(await heading.innerText() === w.run, `heading of ${w.run}: ${await heading.innerText()}`);
    await heading.hover();
    const listed = f.locator(`[data-testid="wur-run-toggle"][data-run="${w.run}"]`).locator("xpath=ancestor::label");
    check(await listed.innerText() === w.run, `run list entry of ${w.run}: ${await listed.innerText()}`);
    await listed.hover();
  }
  // the HTML tag: its row label and its tooltip, exactly the tag
  const row = tagged.tags.indexOf(XSS_TAG);
  const label = f.locator(`[data-testid="wur-heatmap"][data-run="${tagged.run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').nth(row);
  check(await label.innerText() === XSS_TAG && await label.getAttribute("title") === XSS_TAG, `row label of the HTML tag: ${await label.innerText()}`);
  await label.hover();
  let text = await hoverText(page, f, tagged.run, row, 1);
  check(text.split("\n")[0] === XSS_TAG, `tooltip of the HTML tag: ${text}`);
  // a tooltip of each run with an HTML name names it
  for (const run of runsWithHtml) {
    text = await hoverText(page, f, run, 0, 0);
    check(text.includes(`run ${run}`), `tooltip of ${run}: ${text}`);
  }
  // the layer detail of the HTML tag, then of a layer of each run with an HTML name
  await label.click();
  const detail = f.locator('[data-testid="wur-detail"]');
  await f.locator(`[data-testid="wur-detail"][data-run="${tagged.run}"] h3`, { hasText: "onerror" }).waitFor();
  // its charts drawn before the next click: the opened detail scrolls into view once its data
  // is in, and a scroll between Playwright's aim and its click would move the target away
  await f.locator(`[data-testid="wur-detail"][data-run="${tagged.run}"] [data-testid="wur-detail-ratio"]`).waitFor();
  check(await detail.locator("h3").innerText() === XSS_TAG, `detail heading of the HTML tag: ${await detail.locator("h3").innerText()}`);
  for (const run of runsWithHtml) {
    await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').first().click();
    await f.locator(`[data-testid="wur-detail"][data-run="${run}"] [data-testid="wur-detail-ratio"]`).waitFor();
    const meta = await detail.locator(".wur-detail-head .wur-meta").innerText();
    check(meta === `run ${run}`, `detail of a layer of ${run} says: ${meta}`);
  }
  await f.locator('[data-testid="wur-detail-close"]').click();
  // the flags name the tag and, with several runs shown, the run
  for (const run of runsWithHtml) {
    const flag = f.locator(`[data-testid="wur-flag"][data-run="${run}"]`).first();
    if (!(await flag.count())) continue;
    check(await flag.locator(".wur-flag-run").innerText() === run && await flag.locator(".wur-flag-tag").count() === 1, `flag of ${run}: ${await flag.innerText()}`);
    await flag.hover();
  }
  await noElements("after tooltips, details and flags");
  log("tag and run names are text (headings, run list, labels, tooltips, detail, flags)");
}

/** The skipped step: its column is marked above the heatmap (one canvas), the tooltips of its
 * cells and of its mark say so, the legend explains the mark, the flags do not count it. */
async function skippedSteps(page, f, want) {
  const { run, step } = config.skipped;
  const w = want.find((x) => x.run === run);
  const col = w.steps.indexOf(step);
  for (const other of want) {
    const marked = await f.locator(`[data-testid="wur-heatmap"][data-run="${other.run}"]`).getAttribute("data-skipped-columns");
    check(marked === (other.run === run ? String(col) : ""), `skipped columns of ${other.run}: "${marked}"`);
    check(await f.locator(`[data-testid="wur-skipped-marks"][data-run="${other.run}"]`).count() === (other.run === run ? 1 : 0), `marks of ${other.run}`);
  }
  // every cell of the column says the step was skipped; a cell of another column does not
  for (const row of w.tags.keys()) {
    const text = await hoverText(page, f, run, row, col);
    check(text.includes(`step ${step}`) && text.includes("ratio 0") && text.includes("skipped step: the optimizer applied no update"), `tooltip of a skipped cell: ${text}`);
  }
  const plain = await hoverText(page, f, run, 0, col + 1);
  check(!plain.includes("skipped"), `tooltip of a column without a skipped step: ${plain}`);
  // the mark: drawn over the column only, with its own tooltip
  const marks = f.locator(`[data-testid="wur-skipped-marks"][data-run="${run}"]`);
  const box = await marks.boundingBox();
  const heat = await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).boundingBox();
  check(box && Math.abs(box.x - heat.x) < 1 && Math.abs(box.width - heat.width) < 1 && box.y < heat.y, `marks not above the heatmap: ${JSON.stringify(box)} vs ${JSON.stringify(heat)}`);
  const inked = await marks.evaluate((c, cols) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, 1).data; // the top row: marks only
    const out = [];
    for (let k = 0; k < cols; k++) out.push(d[4 * Math.floor(((k + 0.5) / cols) * c.width) + 3] > 0);
    return out;
  }, w.steps.length);
  check(inked.every((on, k) => on === (k === col)), `marked columns ${JSON.stringify(inked.map((on, k) => (on ? k : -1)).filter((k) => k >= 0))}, want [${col}]`);
  await page.mouse.move(box.x + ((col + 0.5) * box.width) / w.steps.length, box.y + box.height / 2);
  const tip = f.locator('[data-testid="wur-tooltip"]');
  await tip.waitFor({ state: "visible" });
  const markText = await tip.innerText();
  check(markText.includes(`step ${step}`) && markText.includes(`run ${run}`) && markText.includes("skipped step"), `tooltip of the mark: ${markText}`);
  const legend = await f.locator('[data-testid="wur-legend-skipped"]').innerText();
  check(legend.includes("skipped step"), `legend of the mark: ${legend}`);
  // flags (the default judgement: no band set yet): the skipped step is left out of the
  // judgement, and said so (/flags' text, verbatim, or the tab's words without it)
  const flagRow = f.locator(`[data-testid="wur-flag"][data-run="${run}"]`).first();
  const flag = await flagRow.locator(".wur-flag-what").innerText();
  const layerTag = await flagRow.getAttribute("data-tag");
  const answer = (config.flags_default?.[run] ?? []).find((l) => l.tag === layerTag);
  check(answer && (answer.skipped_steps ?? 1) === 1, `/flags of ${run} ${layerTag}: ${JSON.stringify(answer)}`);
  if (typeof answer.text === "string") check(flag === answer.text, `flag of ${run} ${layerTag}: "${flag}", /flags says "${answer.text}"`);
  else check(flag.includes("1 skipped step not judged"), `flag of a run with a skipped step: ${flag}`);
  // the layer detail's readout at the skipped step names it
  await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').first().click();
  const chart = f.locator(`[data-testid="wur-detail"][data-run="${run}"][data-tag="${w.tags[0]}"] [data-testid="wur-detail-ratio"]`);
  await chart.waitFor();
  const cb = await chart.boundingBox();
  const [s0, s1] = [w.steps[0], w.steps[w.steps.length - 1]];
  await page.mouse.move(cb.x + 52 + ((step - s0) / (s1 - s0)) * (cb.width - 64), cb.y + cb.height / 2); // charts.ts PAD
  const readout = await tip.innerText();
  check(readout.includes(`step ${step}`) && readout.includes("skipped step"), `detail readout at the skipped step: ${readout}`);
  await f.locator('[data-testid="wur-detail-close"]').click();
  log(`skipped steps are marked (step ${step}: column ${col}, tooltips, mark, legend, flags, detail)`);
}

/** The line search of the run trained with tb_wur_plugin.armijo: a strip above its heatmap
 * only (one canvas, one point per searched step on the heatmap's columns), its tooltip against
 * /line_search, fetched once at load; the layer detail's step size from the same data. */
async function lineSearch(page, f, want) {
  const { run, data } = config.line_search;
  const w = want.find((x) => x.run === run);
  check(w && data.steps.length && JSON.stringify(data.steps) === JSON.stringify(w.steps), `line-search data of ${run}: steps ${JSON.stringify(data.steps)}`);
  // one /line_search at load, for that run only
  const asked = wurRequests.filter((u) => new URL(u).pathname.endsWith("/line_search")).map((u) => new URL(u).searchParams.getAll("run"));
  check(JSON.stringify(asked) === JSON.stringify([[run]]), `/line_search requests at load: ${JSON.stringify(asked)}`);
  const strips = await f.locator('[data-testid="wur-line-search"]').evaluateAll((els) => els.map((e) => ({ run: e.dataset.run, points: +e.dataset.points, columns: +e.dataset.columns })));
  check(strips.length === 1 && strips[0].run === run, `line-search strips ${JSON.stringify(strips)}, want one of ${run}`);
  check(strips[0].points === data.steps.length && strips[0].columns === data.steps.length, `strip of ${run}: ${JSON.stringify(strips[0])}, want ${data.steps.length} points in as many columns`);
  // above the heatmap, on its step axis (same x and width), with ink in it
  const strip = f.locator(`[data-testid="wur-line-search"][data-run="${run}"]`);
  await strip.scrollIntoViewIfNeeded();
  const box = await strip.boundingBox();
  const heat = await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).boundingBox();
  check(box && Math.abs(box.x - heat.x) < 1 && Math.abs(box.width - heat.width) < 1 && box.y + box.height <= heat.y, `strip not above the heatmap: ${JSON.stringify(box)} vs ${JSON.stringify(heat)}`);
  const inked = await strip.evaluate((c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  });
  check(inked > 100, `the strip is blank (${inked} pixels)`);
  // every point's tooltip: step, step size to 3 significant digits, backtracks
  const tip = f.locator('[data-testid="wur-tooltip"]');
  for (const [k, step] of data.steps.entries()) {
    await page.mouse.move(box.x + ((k + 0.5) * box.width) / w.steps.length, box.y + 17);
    await tip.waitFor({ state: "visible" });
    const text = await tip.innerText();
    for (const part of [`step ${step} `, `run ${run}`, `step size ${Number(data.step_size[k]).toPrecision(3)}`, `backtracks ${data.backtracks[k]}`]) {
      check(text.includes(part), `strip tooltip at step ${step} lacks "${part}":\n${text}`);
    }
  }
  // the layer detail of a layer of that run: its step size from the cached line search
  const got = await requestsDuring(page, f, async () => {
    await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').first().click();
    await f.locator(`[data-testid="wur-detail"][data-run="${run}"][data-tag="${w.tags[0]}"] [data-testid="wur-detail-ratio"]`).waitFor();
  });
  expectRequests(got, ["series"], "opening a layer of the line-search run");
  const detail = f.locator(`[data-testid="wur-detail"][data-run="${run}"]`);
  const chart = detail.locator('[data-testid="wur-detail-step-size"]');
  await chart.waitFor();
  const title = await detail.locator('[data-testid="wur-detail-step-size-title"]').innerText();
  check(title.includes("Step size (line search)") && title.includes(`${data.steps.length} searched steps`), `step-size chart title: ${title}`);
  const chartInk = await chart.evaluate((cv) => {
    const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n / (d.length / 4);
  });
  check(chartInk > 0.01, `the detail's step-size chart is blank (${chartInk})`);
  const cb = await chart.boundingBox();
  await page.mouse.move(cb.x + cb.width / 2, cb.y + cb.height / 2);
  let text = await tip.innerText();
  const step = Number(/step (\d+)/.exec(text.split("\n").slice(1).join("\n"))?.[1]);
  const j = data.steps.indexOf(step);
  check(j >= 0 && text.includes(`step size (line search) ${Number(data.step_size[j]).toPrecision(3)}`) && text.includes(`backtracks ${data.backtracks[j]}`), `detail step-size readout: ${text}`);
  const rb = await detail.locator('[data-testid="wur-detail-ratio"]').boundingBox();
  await page.mouse.move(rb.x + rb.width / 2, rb.y + rb.height / 2);
  text = await tip.innerText();
  const at = data.steps.indexOf(Number(/step (\d+)/.exec(text)?.[1]));
  check(at >= 0 && text.includes(`step size (line search) ${Number(data.step_size[at]).toPrecision(3)}`), `detail ratio readout of a line-search run: ${text}`);
  // a run without line search has no step-size chart
  await f.locator(`[data-testid="wur-heatmap"][data-run="${want[0].run}"]`).locator("xpath=ancestor::section").locator('[data-testid="wur-row-label"]').first().click();
  await f.locator(`[data-testid="wur-detail"][data-run="${want[0].run}"] [data-testid="wur-detail-ratio"]`).waitFor();
  await settled(page, f);
  check(!(await f.locator('[data-testid="wur-detail-step-size"]').isVisible()), "a step-size chart in the detail of a run without line search");
  await f.locator('[data-testid="wur-detail-close"]').click();
  log(`line search shown (${run}: ${data.steps.length} points, tooltips match /line_search, detail step size)`);
}

async function shots(page, f) {
  if (!config.artifacts) return;
  mkdirSync(config.artifacts, { recursive: true });
  await page.mouse.move(1, 1);
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.waitForTimeout(300);
    const bg = await f.locator("body").evaluate((b) => getComputedStyle(b).backgroundColor);
    check((scheme === "dark") === (bg === "rgb(32, 33, 36)"), `${scheme} mode background is ${bg}`);
    const file = path.join(config.artifacts, `wur-tab-${config.label}-${scheme}.png`);
    await page.screenshot({ path: file, fullPage: false });
    log(`screenshot ${file}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
  // TensorBoard's own theme menu (light system): the tab follows the host page
  const bg = () => f.locator("body").evaluate((b) => getComputedStyle(b).backgroundColor);
  await page.locator('button[aria-label="Menu for changing light or dark theme"]').click();
  await page.getByRole("menuitem", { name: /dark/i }).click();
  await f.locator('html[data-theme="dark"]').waitFor({ state: "attached" });
  check(await bg() === "rgb(32, 33, 36)", `TensorBoard's dark theme did not reach the tab: ${await bg()}`);
  await page.locator('button[aria-label="Menu for changing light or dark theme"]').click();
  await page.getByRole("menuitem", { name: /light/i }).click();
  await f.locator('html[data-theme="light"]').waitFor({ state: "attached" });
  check(await bg() === "rgb(255, 255, 255)", `TensorBoard's light theme did not reach the tab: ${await bg()}`);
  log("follows TensorBoard's theme menu");
}

async function live(page) {
  // New steps appear on TensorBoard's reload without losing the filter or the open layer.
  const f = await openTab(page);
  const run = config.runs[0];
  let attrs = await waitAttrs(f, (a) => a.length === 1 && a[0].cols === config.steps_before, `${config.steps_before} columns`);
  await f.locator('[data-testid="wur-layer-filter"]').fill(config.filter);
  const rows = run.tags.filter((t) => new RegExp(config.filter, "i").test(t)).length;
  attrs = await waitAttrs(f, (a) => a[0].rows === rows, "the filter");
  await f.locator('[data-testid="wur-row-label"]').first().click();
  const detail = f.locator('[data-testid="wur-detail"]');
  await detail.waitFor();
  const tag = await detail.getAttribute("data-tag");
  log("waiting for new steps");
  const deadline = Date.now() + 60000;
  while (!existsSync(config.go_file)) {
    check(Date.now() < deadline, "the test did not write new steps");
    await page.waitForTimeout(100);
  }
  // the fast loader picks them up within its reload interval; press TensorBoard's reload until then
  while (true) {
    await page.locator("button.reload-button").click();
    await page.waitForTimeout(1500);
    attrs = await heatmapAttrs(f);
    if (attrs[0].cols === config.steps_after) break;
    check(Date.now() < deadline, `new steps never appeared: ${JSON.stringify(attrs)}`);
  }
  check(attrs[0].rows === rows, `the filter was lost: ${JSON.stringify(attrs)}`);
  check(await f.locator('[data-testid="wur-layer-filter"]').inputValue() === config.filter, "the filter text was lost");
  check(await detail.isVisible() && (await detail.getAttribute("data-tag")) === tag, "the open layer was lost");
  log(`live update works (${config.steps_before} -> ${attrs[0].cols} columns)`);
}

async function binned(page) {
  // More steps than pixels: columns are bins of w steps; the tooltip names the bin's steps and
  // shows the chosen reduction of the exported ratios inside it.
  const f = await openTab(page);
  const run = config.runs[0];
  const last = run.steps[run.steps.length - 1];
  await f.locator('[data-testid="wur-heatmap"]').waitFor();
  let [a] = await heatmapAttrs(f);
  check(a.cols < run.steps.length, `not binned: ${a.cols} columns for ${run.steps.length} steps`);
  const first = await hoverText(page, f, run.run, 0, 0);
  const m = /steps 0–(\d+)/.exec(first);
  check(m, `the first bin's tooltip names no step range: ${first}`);
  const w = Number(m[1]) + 1;
  check(a.cols === Math.ceil((last + 1) / w), `${a.cols} columns of ${w} steps for steps 0..${last}`);
  const reduce = {
    max: (v) => (v.includes("NaN") ? "NaN" : v.includes("Infinity") ? "Infinity" : Math.max(...v)),
    min: (v) => (v.includes("NaN") ? "NaN" : Math.min(...v.filter((x) => x !== "Infinity"))),
    last: (v) => v[v.length - 1],
  };
  let checked = 0;
  for (const reduction of ["max", "min", "last"]) {
    await f.locator('[data-testid="wur-reduction"]').selectOption(reduction);
    [a] = await waitAttrs(f, (x) => x[0].reduction === reduction, `reduction ${reduction}`);
    for (const [row, tag] of run.tags.entries()) {
      const columns = config.columns.map((c) => (c < 0 ? a.cols + c : c)).concat(config.special_steps.map((st) => Math.floor(st / w)));
      for (const k of columns) {
        const lo = k * w, hi = Math.min(last, (k + 1) * w - 1);
        const values = config.exports[run.run][tag].filter((p) => p[1] >= lo && p[1] <= hi).map((p) => p[2]);
        const want = expectedRatioText(reduce[reduction](values));
        // columns are about a pixel wide and mouse events land on whole pixels: step the
        // pointer until it is over bin k
        const center = await cellCenter(f, run.run, row, k);
        let text = "";
        for (let dx = 0, tries = 0; tries < 6; tries++) {
          await page.mouse.move(Math.round(center.x) + dx, center.y);
          text = await f.locator('[data-testid="wur-tooltip"]').innerText();
          const at = Number(/steps (\d+)–/.exec(text)?.[1]);
          if (at === lo) break;
          dx += at < lo ? 1 : -1;
        }
        check(text.includes(`steps ${lo}–${hi}`) && text.includes(want) && text.includes(reduction), `${reduction} of ${tag} in steps ${lo}–${hi}: want "${want}", tooltip:\n${text}`);
        checked++;
      }
    }
  }
  log(`binned columns work (${a.cols} columns of ${w} steps, ${checked} bins checked)`);
}

/** Runs logged every 2 and every 5 steps: one column per step for both (equal step ranges),
 * no "not logged" cell inside a layer's logged range, a held cell's tooltip naming the logged
 * step it holds and drawn apart from a measured one; the flags table against /flags (reason,
 * since, text; the default judgement, then the band); the run filter hides a run's heatmap,
 * flags and comparison choice. */
async function axis(page) {
  const f = await openTab(page);
  const want = config.runs; // [{run, tags, steps, every, held_cells}]
  const last = config.last_step;
  let attrs = await waitAttrs(f, (a) => a.length === want.length, `${want.length} heatmaps`);
  for (const [i, w] of want.entries()) {
    check(attrs[i].run === w.run && attrs[i].cols === last + 1 && attrs[i].start === 0 && attrs[i].end === last, `${w.run}: ${JSON.stringify(attrs[i])}, want one column per step 0..${last}`);
    const held = +(await f.locator(`[data-testid="wur-heatmap"][data-run="${w.run}"]`).getAttribute("data-held-cells"));
    check(held === w.held_cells, `${w.run}: ${held} held cells, want ${w.held_cells}`);
  }
  // every cell: measured at a logged step, else held from the last logged step before it
  let hovered = 0, heldSeen = 0;
  for (const w of want) {
    for (const [row, tag] of w.tags.entries()) {
      const exported = config.exports[w.run][tag];
      for (let step = 0; step <= last; step++) {
        const from = Math.floor(step / w.every) * w.every;
        const point = exported.find((p) => p[1] === from);
        const text = await hoverText(page, f, w.run, row, step);
        check(!text.includes("not logged"), `${w.run} ${tag} at step ${step}: "not logged" inside its logged range:\n${text}`);
        const label = from === step ? `step ${step}  ·  run ${w.run}` : `step ${step} (held from step ${from})  ·  run ${w.run}`;
        const lines = text.split("\n");
        check(lines[0] === tag && lines[1].replace(/\s+/g, " ") === label.replace(/\s+/g, " ") && text.includes(expectedRatioText(point[2])), `${w.run} ${tag} at step ${step}: want "${label}" and ${expectedRatioText(point[2])}:\n${text}`);
        if (from !== step) heldSeen++;
        hovered++;
      }
    }
  }
  await page.mouse.move(1, 1);
  // a held cell is drawn apart from the measured cell whose value it holds (one canvas pixel
  // per cell): paler, on the light page
  const sparse = want[want.length - 1];
  const px = await f.locator(`[data-testid="wur-heatmap"][data-run="${sparse.run}"]`).evaluate((c) => {
    const d = c.getContext("2d").getImageData(0, 0, 2, 1).data;
    return [[d[0], d[1], d[2]], [d[4], d[5], d[6]]];
  });
  check(px[0].join() !== px[1].join() && px[1][0] + px[1][1] + px[1][2] > px[0][0] + px[0][1] + px[0][2] + 60, `a held cell looks like the measured one: ${JSON.stringify(px)}`);
  const legend = await f.locator('[data-testid="wur-legend-held"]').innerText();
  check(legend.includes("held"), `legend of the held cells: ${legend}`);
  if (config.artifacts) {
    mkdirSync(config.artifacts, { recursive: true });
    const file = path.join(config.artifacts, `wur-axis-${config.label}.png`);
    await page.screenshot({ path: file });
    log(`screenshot ${file}`);
  }
  log(`step axis works (${hovered} cells, ${heldSeen} held, each naming its step; no "not logged" inside a run's range)`);

  // the flags table against /flags: the default judgement (no low/high sent), then the band
  const asked = () => wurRequests.filter((u) => new URL(u).pathname.endsWith("/flags")).map((u) => new URL(u).searchParams);
  check(asked().length === want.length && asked().every((q) => !q.has("low") && !q.has("high")), `/flags at load: ${JSON.stringify(asked().map(String))}`);
  const table = f.locator('[data-testid="wur-flags"] table');
  const heads = (await table.locator("th").allInnerTexts()).map((h) => h.trim().toLowerCase());
  check(JSON.stringify(heads) === JSON.stringify(["layer", "run", "what", "since step"]), `flag table columns: ${JSON.stringify(heads)}`);
  const rowsNow = () => f.locator('[data-testid="wur-flag"]').evaluateAll((els) => els.map((e) => ({
    run: e.dataset.run, tag: e.dataset.tag, reason: e.dataset.reason, since: e.dataset.since, what: e.querySelector(".wur-flag-what").textContent,
  })));
  const compareFlags = async (answers, what) => {
    const rows = await rowsNow();
    let n = 0;
    for (const w of want) {
      const mine = rows.filter((r) => r.run === w.run);
      const layers = answers[w.run];
      check(mine.length === layers.length, `${what}: ${w.run} has ${mine.length} flag rows, /flags ${layers.length}: ${JSON.stringify(mine)}`);
      for (const [i, l] of layers.entries()) {
        const r = mine[i];
        check(r.tag === l.tag && r.reason === l.reason && r.since === (l.since === null ? "" : String(l.since)), `${what}: row ${JSON.stringify(r)} vs /flags ${JSON.stringify(l)}`);
        if (typeof l.text === "string") check(r.what === l.text, `${what}: the text of ${w.run} ${l.tag}: "${r.what}", /flags says "${l.text}"`);
        else check(r.what.length > 0, `${what}: no text for ${w.run} ${l.tag}`);
        n++;
      }
    }
    return n;
  };
  const flaggedDefault = await compareFlags(config.flags_default, "default judgement");
  check(flaggedDefault > 0, "the data flag no layer by default");
  let note = await f.locator('[data-testid="wur-flags-note"]').innerText();
  check(note.startsWith("Default judgement (no band set), patience 5:"), `flags note: ${note}`);
  const from = wurRequests.length;
  await f.locator('[data-testid="wur-band-low"]').fill(String(config.band.low));
  await f.locator('[data-testid="wur-band-high"]').fill(String(config.band.high));
  await f.locator('[data-testid="wur-band-high"]').press("Tab");
  await f.locator('[data-testid="wur-flags-note"][data-judgement="band"]').waitFor();
  await settled(page, f);
  const banded = wurRequests.slice(from).filter((u) => new URL(u).pathname.endsWith("/flags")).map((u) => new URL(u).searchParams);
  check(banded.length >= want.length && banded.slice(-want.length).every((q) => Number(q.get("low")) === config.band.low && Number(q.get("high")) === config.band.high), `/flags with the band: ${JSON.stringify(banded.map(String))}`);
  const flaggedBand = await compareFlags(config.flags_band, "band");
  note = await f.locator('[data-testid="wur-flags-note"]').innerText();
  check(note.startsWith(`Band [${config.band.low_text}, ${config.band.high_text}] with patience 5:`), `flags note with the band: ${note}`);
  log(`flags table matches /flags (${flaggedDefault} by the default judgement, ${flaggedBand} with the band: reason, since, text)`);

  // the run filter: the hidden run's heatmap, flags and comparison choice go
  const [keep, hide] = [want[1].run, want[0].run];
  await f.locator('[data-testid="wur-compare-a"]').selectOption(hide);
  const options = () => f.locator('[data-testid="wur-compare-a"] option').evaluateAll((els) => els.map((e) => e.value).filter(Boolean));
  check(JSON.stringify(await options()) === JSON.stringify(want.map((w) => w.run)), `comparison choices: ${JSON.stringify(await options())}`);
  const filter = f.locator('[data-testid="wur-run-filter"]');
  await filter.fill(keep.split("/")[0]);
  await waitAttrs(f, (a) => a.length === 1 && a[0].run === keep, `only ${keep} shown`);
  await settled(page, f);
  const listed = await f.locator('[data-testid="wur-run-toggle"]').evaluateAll((els) => els.map((e) => e.dataset.run));
  check(JSON.stringify(listed) === JSON.stringify([keep]), `run list with the filter: ${JSON.stringify(listed)}`);
  const flagRuns = [...new Set((await rowsNow()).map((r) => r.run))];
  check(JSON.stringify(flagRuns) === JSON.stringify(config.flags_band[keep].length ? [keep] : []), `flags with the filter: runs ${JSON.stringify(flagRuns)}`);
  check(JSON.stringify(await options()) === JSON.stringify([keep]), `comparison choices with the filter: ${JSON.stringify(await options())}`);
  check(await f.locator('[data-testid="wur-compare-a"]').inputValue() === "", "the comparison kept a hidden run");
  // an invalid filter changes nothing; no run matched: said so
  await filter.fill("every(");
  await f.locator('[data-testid="wur-run-filter-error"]', { hasText: "Invalid regular expression" }).waitFor();
  check((await heatmapAttrs(f)).map((a) => a.run).join() === keep, "an invalid run filter changed the heatmaps");
  await filter.fill("no such run");
  await f.locator('[data-testid="wur-message"]', { hasText: "No run matches the run filter" }).waitFor();
  check(await f.locator('[data-testid="wur-flag"]').count() === 0, "flags shown with every run filtered out");
  await filter.fill("");
  await waitAttrs(f, (a) => a.length === want.length, "every run shown again");
  await settled(page, f);
  await compareFlags(config.flags_band, "band, filter cleared");
  check(JSON.stringify(await options()) === JSON.stringify(want.map((w) => w.run)), `comparison choices after the filter: ${JSON.stringify(await options())}`);
  log("run filter works (heatmaps, flags, comparison choices)");
}

async function empty(page) {
  // The tab is disabled in TensorBoard's tab bar without data; open the plugin page itself.
  await page.goto(`${config.url}/data/plugin_entry.html?name=wur`);
  await page.locator('[data-testid="wur-ready"]').waitFor({ timeout: 30000 });
  const text = await page.locator('[data-testid="wur-empty"]').innerText();
  check(text.includes("WeightUpdateRatioCallback") && text.includes("model.fit"), `empty state lacks the example: ${text}`);
  check(await page.locator('[data-testid="wur-heatmap"]').count() === 0, "heatmaps on an empty logdir");
  log("empty state works");
  // a failing backend is reported in words, and the refresh button tries again
  await page.route("**/data/plugin/wur/runs", (route) => route.fulfill({ status: 500, contentType: "text/plain", body: "the data provider is down" }));
  await page.locator('[data-testid="wur-refresh"]').click();
  const error = page.locator('[data-testid="wur-error"]');
  await error.waitFor();
  const message = await error.innerText();
  check(message.includes("HTTP 500") && message.includes("the data provider is down"), `error state: ${message}`);
  await page.unroute("**/data/plugin/wur/runs");
  await page.locator('[data-testid="wur-refresh"]').click();
  await error.waitFor({ state: "hidden" });
  expectedErrors.push(/status of 500/);
  log("error state works");
}

async function screenshot(page) {
  const f = await openTab(page);
  await f.locator('[data-testid="wur-heatmap"]').first().waitFor();
  if (config.hover) {
    const { x, y } = await cellCenter(f, config.hover.run, config.hover.row, config.hover.col);
    await page.mouse.move(x, y);
    await f.locator('[data-testid="wur-tooltip"]').waitFor();
  }
  await page.emulateMedia({ colorScheme: config.scheme || "light" });
  await page.waitForTimeout(300);
  await page.screenshot({ path: config.screenshot });
  log(`screenshot ${config.screenshot}`);
}

main().catch((e) => {
  process.stderr.write(`[${config.label}] FAILED: ${e instanceof CheckFailed ? e.message : e.stack || e}\n`);
  process.exit(1);
});
