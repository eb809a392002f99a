// Bundles src/index.ts and its dependencies into ONE ES module (no chunks, no CDN):
//   node build.mjs                      -> ../tb_wur_plugin/static/index.js
//   node build.mjs --outfile PATH       -> PATH (the freshness test compares the two)
// Deterministic: same sources and lockfile -> same bytes (no timestamps, no absolute paths).
import * as esbuild from "esbuild";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const at = args.indexOf("--outfile");
const outfile = at >= 0 ? path.resolve(args[at + 1]) : path.join(here, "..", "tb_wur_plugin", "static", "index.js");

await esbuild.build({
  absWorkingDir: here,
  entryPoints: ["src/index.ts"],
  outfile,
  bundle: true,
  // An IIFE in a module-scoped variable, then a plain `export function render()`: the module
  // TensorBoard imports says what it exports in so many words (plugin_entry.html calls render()).
  format: "iife",
  globalName: "wurTab",
  footer: { js: "export function render() {\n  return wurTab.render();\n}" },
  platform: "browser",
  target: ["es2020"],
  minify: true,
  legalComments: "eof",
  sourcemap: false,
  charset: "utf8",
  banner: { js: "// The WUR tab of tb-wur-plugin. Generated from frontend/src by `npm run build`; do not edit." },
  logLevel: "warning",
});
