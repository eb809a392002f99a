// Bundles each test/*.test.ts with esbuild into .test-build/ and runs them with `node --test`.
import * as esbuild from "esbuild";
import { spawnSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, ".test-build");
rmSync(out, { recursive: true, force: true });
const tests = readdirSync(path.join(here, "test")).filter((f) => f.endsWith(".test.ts")).sort();
await esbuild.build({
  absWorkingDir: here,
  entryPoints: tests.map((f) => `test/${f}`),
  outdir: out,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  format: "esm",
  platform: "node",
  target: ["node20"],
  packages: "bundle",
  logLevel: "warning",
});
const files = tests.map((f) => path.join(out, f.replace(/\.ts$/, ".mjs")));
const result = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
process.exit(result.status ?? 1);
