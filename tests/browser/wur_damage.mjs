// Browser test of the notice of a run's damaged event files on its heatmap block, in Debian's
// chromium, driven by playwright-core.
//   node tests/browser/wur_damage.mjs CONFIG.json
// CONFIG: {url, label, damaged: {run: [line, ...]}, whole: [run, ...]}: the lines each damaged
// run's notice shows (after its title), the runs that show none.
// Exits non-zero with a message naming the failed check. Called by
// tests/read/test_damaged_files.py.
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

async function main() {
  check(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: run scripts/frontend.sh`);
  const profile = mkdtempSync(path.join(os.tmpdir(), "wur-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const errors = [];
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(20000);
    page.on("console", (m) => { if (m.type() === "error" && !(m.location()?.url ?? "").endsWith("/favicon.ico")) errors.push(`console: ${m.text()}`); });
    page.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    page.on("dialog", (d) => { errors.push(`a dialog opened: ${d.message()}`); d.dismiss(); });
    await page.goto(`${config.url}/#wur`);
    const f = page.frameLocator('iframe[src*="plugin_entry.html?name=wur"]');
    await f.locator('[data-testid="wur-ready"]').waitFor({ timeout: 60000 });
    await f.locator('.wur-root[data-state="idle"]').waitFor();
    for (const [run, lines] of Object.entries(config.damaged)) {
      const notice = f.locator(`[data-testid="wur-damaged"][data-run="${run}"]`);
      check(await notice.isVisible(), `no damage notice on run ${run}`);
      const shown = await notice.locator(".wur-damage-line").allTextContents();
      check(JSON.stringify(shown) === JSON.stringify(lines), `run ${run}'s notice says ${JSON.stringify(shown)}, expected ${JSON.stringify(lines)}`);
      const block = f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).locator("xpath=ancestor::section");
      check(await block.locator('[data-testid="wur-damaged"]').count() === 1, `run ${run}'s notice is not on its block`);
      check(await notice.locator("img, script, b").count() === 0, `run ${run}'s notice made elements of a file name`);
    }
    for (const run of config.whole) {
      check(await f.locator(`[data-testid="wur-heatmap"][data-run="${run}"]`).isVisible(), `no heatmap of run ${run}`);
      check(await f.locator(`[data-testid="wur-damaged"][data-run="${run}"]:visible`).count() === 0, `run ${run} is whole but shows a damage notice`);
    }
    check(!errors.length, `errors in the browser:\n  ${errors.join("\n  ")}`);
    process.stdout.write(`[${config.label}] damage notices shown\n`);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`[${config.label}] ${e instanceof CheckFailed ? "check failed" : "error"}: ${e.stack || e}\n`);
  process.exit(1);
});
