// Browser test of the WUR tab's metric switch (Frobenius / spectral) in Debian's chromium,
// driven by playwright-core.
//   node tests/browser/wur_metric.mjs CONFIG.json
// CONFIG: {url, label, run, frobenius: {tag: {step: ratio}}, spectral: {tag: {step: ratio}}}
// Exits non-zero with a message naming the failed check. Called by tests/browser/test_frontend.py.
import { createRequire } from "node:module";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const CHROMIUM = process.env.WUR_CHROMIUM || "/usr/bin/chromium";

class CheckFailed extends Error {}
function check(ok, message) {
  if (!ok) throw new CheckFailed(message);
}
function log(message) {
  process.stdout.write(`[${config.label}] ${message}\n`);
}

/** The /export JSON ({tag: [[wall_time, step, ratio], ...]}) as {tag: {step: ratio}}. */
function exportedRatios(answer) {
  const out = {};
  for (const [tag, rows] of Object.entries(answer)) {
    out[tag] = {};
    for (const [, step, ratio] of rows) out[tag][step] = Number(ratio);
  }
  return out;
}

/** `got` holds every ratio of `want` (relative tolerance: float32 storage), and no other tag. */
function sameRatios(got, want, what) {
  check(JSON.stringify(Object.keys(got).sort()) === JSON.stringify(Object.keys(want).sort()),
    `${what}: tags ${JSON.stringify(Object.keys(got))}, expected ${JSON.stringify(Object.keys(want))}`);
  for (const [tag, steps] of Object.entries(want)) {
    for (const [step, value] of Object.entries(steps)) {
      const g = got[tag][step];
      check(g !== undefined && Math.abs(g - value) <= 1e-6 * Math.abs(value), `${what}: ${tag} at step ${step} is ${g}, expected ${value}`);
    }
  }
}

async function rowLabels(f) {
  return f.locator(`[data-testid="wur-heatmap"][data-run="${config.run}"]`).locator("xpath=ancestor::section")
    .locator('[data-testid="wur-row-label"]').allTextContents();
}

async function idle(f) {
  await f.locator('.wur-root[data-state="idle"]').waitFor();
}

async function main() {
  check(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: run scripts/frontend.sh`);
  const profile = mkdtempSync(path.join(os.tmpdir(), "wur-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const errors = [];
  const requests = [];
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(20000);
    page.on("console", (m) => { if (m.type() === "error" && !(m.location()?.url ?? "").endsWith("/favicon.ico")) errors.push(`console: ${m.text()}`); });
    page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    page.on("request", (r) => { if (r.url().includes("/data/plugin/wur/")) requests.push(r.url()); });
    await page.goto(`${config.url}/#wur`);
    const f = page.frameLocator('iframe[src*="plugin_entry.html?name=wur"]');
    await f.locator('[data-testid="wur-ready"]').waitFor({ timeout: 60000 });
    await idle(f);

    const frobTags = Object.keys(config.frobenius), specTags = Object.keys(config.spectral);
    const metric = f.locator('[data-testid="wur-metric"]');
    check(await metric.isVisible(), "no metric switch although /runs lists spectral ratios");
    check(await metric.inputValue() === "frobenius", `the switch starts at ${await metric.inputValue()}`);
    check(JSON.stringify(await rowLabels(f)) === JSON.stringify(frobTags), `Frobenius rows: ${JSON.stringify(await rowLabels(f))}`);
    const csv = f.locator('[data-testid="wur-export-csv"]'), json = f.locator('[data-testid="wur-export-json"]');
    check(!(await json.getAttribute("href")).includes("metric="), "the Frobenius export link names a metric");
    check(!requests.some((u) => u.includes("metric=")), "a request names a metric before the switch");
    const fetchJson = (href) => f.locator("body").evaluate(async (_b, h) => (await fetch(h)).json(), href);
    sameRatios(exportedRatios(await fetchJson(await json.getAttribute("href"))), config.frobenius, "Frobenius export");

    // open a layer's detail, then flip the switch: heatmap, flags, detail and links follow
    const tag = specTags[0];
    await f.locator('[data-testid="wur-row-label"]', { hasText: tag }).first().click();
    await f.locator(`[data-testid="wur-detail"][data-tag="${tag}"] [data-testid="wur-detail-ratio"]`).waitFor();
    await idle(f);
    const before = requests.length;
    await metric.selectOption("spectral");
    await f.locator('[data-testid="wur-export-json"][href*="metric=spectral"]').waitFor();
    await idle(f);
    const after = requests.slice(before);
    for (const route of ["heatmap", "flags", "series"]) {
      check(after.some((u) => u.includes(`/data/plugin/wur/${route}?`) && u.includes("metric=spectral")), `no /${route} with metric=spectral after the switch: ${after.join(" ")}`);
    }
    const series = after.find((u) => u.includes("/series?") && u.includes("metric=spectral"));
    check(new URL(series).searchParams.get("tag") === tag, `the detail asked for ${series}`);
    check(JSON.stringify(await rowLabels(f)) === JSON.stringify(specTags), `spectral rows: ${JSON.stringify(await rowLabels(f))}, expected ${JSON.stringify(specTags)}`);
    check((await csv.getAttribute("href")).includes("metric=spectral"), "the CSV link does not name the spectral metric");
    sameRatios(exportedRatios(await fetchJson(await json.getAttribute("href"))), config.spectral, "spectral export");
    const detailSeries = await fetchJson(new URL(series).pathname.replace("/data/plugin/wur/", "./") + new URL(series).search);
    check(detailSeries.metric === "spectral", `the detail's series is of ${detailSeries.metric}`);
    check(await f.locator('[data-testid="wur-error"]').isHidden(), "the tab shows an error after the switch");
    log("spectral shown: rows, detail series, export links");

    // and back: the Frobenius rows again, links without the metric
    await metric.selectOption("frobenius");
    await f.locator('[data-testid="wur-export-json"]:not([href*="metric="])').waitFor();
    await idle(f);
    check(JSON.stringify(await rowLabels(f)) === JSON.stringify(frobTags), `rows after switching back: ${JSON.stringify(await rowLabels(f))}`);
    check(!errors.length, `errors in the browser console:\n  ${errors.join("\n  ")}`);
    log("metric switch works");
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`[${config.label}] ${e instanceof CheckFailed ? "check failed" : "error"}: ${e.stack || e}\n`);
  process.exit(1);
});
