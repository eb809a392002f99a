// Used by benchmarks/frontend_tensorboard_bench.py: opens TensorBoard on another tab, clicks
// the WUR tab and times click -> heatmap drawn (the wur-heatmap canvas exists and the tab is
// idle), `repeat` times in fresh browser profiles.
import { createRequire } from "node:module";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "frontend", "package.json"));
const { chromium } = require("playwright-core");
const config = JSON.parse(readFileSync(process.argv[2], "utf8"));

const times = [];
for (let i = 0; i < config.repeat; i++) {
  const profile = mkdtempSync(path.join(os.tmpdir(), "wur-click-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium", headless: true, viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`${config.url}/#timeseries`);
    const tab = page.locator(".plugin-name", { hasText: /^\s*WUR\s*$/ }).or(page.getByText("WUR", { exact: true })).first();
    await tab.waitFor({ timeout: 60000 });
    await page.waitForTimeout(1000); // let the landing tab settle
    const t0 = Date.now();
    await tab.click();
    const f = page.frameLocator('iframe[src*="plugin_entry.html?name=wur"]');
    await f.locator(`[data-testid="wur-heatmap"][data-rows="${config.layers}"]`).waitFor({ timeout: 60000 });
    await f.locator('.wur-root[data-state="idle"]').waitFor({ timeout: 60000 });
    const ms = Date.now() - t0;
    const cols = await f.locator('[data-testid="wur-heatmap"]').getAttribute("data-cols");
    times.push(ms);
    console.log(`click on the WUR tab -> ${config.layers} x ${cols} heatmap drawn: ${ms} ms`);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
const sorted = [...times].sort((a, b) => a - b);
console.log(`median ${sorted[Math.floor(sorted.length / 2)]} ms over ${times.length} (budget 2000 ms)`);
