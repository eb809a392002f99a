// Held cells (/heatmap's held_i, held_from_i): decoded, named in the tooltip, drawn pale,
// exported, and followed by a group's row.
import { test } from "node:test";
import assert from "node:assert/strict";
import { heldFrom, parseHeatmap } from "../src/codec";
import { codeColorTable, heldColor, heldColorTable, unpackRGBA } from "../src/color";
import { paintCells } from "../src/draw";
import { tooltipLines, viewCsv, viewJson } from "../src/format";
import { displayMatrix, layoutRows } from "../src/group";
import { CODES, sample, sampleWithHeld } from "./fixtures";

test("held runs decode to a per-cell index; a payload without them holds nothing", () => {
  const h = parseHeatmap(sampleWithHeld());
  const [a, b] = h.runs;
  assert.deepEqual(Array.from(a.heldIndex!), [-1, 0, -1, 1, -1, -1]);
  assert.equal(a.heldCells, 2);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((k) => heldFrom(a, 0, k, h.columns)), [NaN, 0, NaN, 2, NaN, NaN]);
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((k) => heldFrom(b, 0, k, h.columns)), [NaN, 0, 0, 0, 0, NaN]);
  assert.equal(b.heldCells, 4);
  const old = parseHeatmap(sample());
  assert.equal(old.runs[0].heldIndex, null);
  assert.equal(old.runs[0].heldCells, 0);
});

test("the tooltip of a held cell names the step it holds", () => {
  const h = parseHeatmap(sampleWithHeld());
  const lines = tooltipLines(h, 1, 0, 3);
  assert.equal(lines[1], "step 3 (held from step 0)  ·  run every5");
  assert.equal(lines[2], "ratio 0.000500");
  assert.ok(lines.some((l) => l.startsWith("held: w logged no step here")), lines.join("\n"));
  assert.equal(tooltipLines(h, 1, 0, 5)[1], "step 5  ·  run every5");
  assert.ok(!tooltipLines(h, 1, 0, 5).some((l) => l.startsWith("held")));
});

test("held cells are drawn pale: the same hue toward the background, apart from measured ones", () => {
  const h = parseHeatmap(sampleWithHeld());
  const table = codeColorTable({ lo: -5, hi: -1 }, { dark: false }, CODES);
  const faded = heldColorTable(table, { dark: false });
  const run = h.runs[1];
  const out = new Uint32Array(6);
  paintCells(run.codes, 6, [0], table, out, { index: run.heldIndex!, table: faded });
  // columns 0 (measured) and 1..4 (held from step 0) show the same code
  assert.equal(out[0], table[run.codes[0]]);
  for (const k of [1, 2, 3, 4]) assert.equal(out[k], faded[run.codes[k]]);
  assert.notEqual(out[1], out[0]);
  const [r0, g0, b0] = unpackRGBA(out[0]), [r1, g1, b1] = unpackRGBA(out[1]);
  assert.ok(r1 > r0 && g1 > g0 && b1 > b0, "lighter on a light page");
  const [rd] = unpackRGBA(heldColor(table[run.codes[0]], { dark: true }));
  assert.ok(Math.abs(rd - 32) < Math.abs(r0 - 32), "toward the dark background on a dark page");
});

test("a group's row is held where the member it shows is", () => {
  const h = parseHeatmap(sampleWithHeld());
  const run = h.runs[0];
  const specs = layoutRows(["g/a"], [0], true, new Set());
  const d = displayMatrix(run.codes, 6, specs, -3, CODES, run.heldIndex);
  assert.deepEqual(Array.from(d.held!), [-1, 0, -1, 1, -1, -1]);
  assert.equal(displayMatrix(run.codes, 6, specs, -3, CODES).held, null);
});

test("the view's CSV and JSON say which cells are held, and from which step", () => {
  const h = parseHeatmap(sampleWithHeld());
  const csv = viewCsv(h, 1, [0]).trim().split("\n");
  assert.equal(csv[0], "tag,first_step,last_step,logged_steps,ratio,held_from_step");
  assert.equal(csv[1], "w,0,0,1,0.000500,");
  assert.equal(csv[2], "w,1,1,0,0.000500,0");
  const view = JSON.parse(viewJson(h, 1, [0]));
  assert.deepEqual(view.held_from_step, { w: [null, 0, 0, 0, 0, null] });
});
