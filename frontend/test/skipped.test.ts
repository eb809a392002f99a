// Skipped steps (the optimizer applied no update): per-column counts from the payload, their
// tooltip text, the marks above the heatmap and where the pointer finds them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseHeatmap } from "../src/codec";
import { markAt, markSpans } from "../src/draw";
import { skippedLines, skippedText, tooltipLines } from "../src/format";
import { CODES, pack, sample, sampleWithSkipped } from "./fixtures";

test("parseHeatmap reads the skipped steps per column; none when the payload has none", () => {
  assert.deepEqual(Array.from(parseHeatmap(sampleWithSkipped()).runs[0].skipped), [1, 0, 1]);
  const h = parseHeatmap(sample());
  assert.ok(h.runs[0].skipped instanceof Uint32Array);
  assert.deepEqual(Array.from(h.runs[0].skipped), [0, 0, 0]);
  assert.throws(() => parseHeatmap(pack(
    { start: 0, end: 0, reduction: "max", columns: 1, codes: CODES, runs: [{ run: "r", tags: ["a"], codes: "c", skipped: "s" }] },
    { column_start: { dtype: "float64", data: [0] }, column_first: { dtype: "float64", data: [0] },
      column_last: { dtype: "float64", data: [0] }, column_count: { dtype: "uint32", data: [1] },
      c: { dtype: "uint16_planes", data: [3] }, s: { dtype: "uint32", data: [0, 1] } },
  )), /skipped steps do not match/);
});

test("a cell of a skipped column says so, for one step and for a bin", () => {
  const h = parseHeatmap(sampleWithSkipped());
  assert.deepEqual(tooltipLines(h, 0, 0, 0), [
    "a/kernel", "step 0  ·  run r<b>", "ratio 0 (weights did not move)", "log10 -inf",
    "skipped step: the optimizer applied no update (ratios 0)",
  ]);
  assert.equal(skippedText(h, 0, 1), null);
  assert.equal(tooltipLines(h, 0, 1, 1).length, 4); // no skipped line
  assert.equal(skippedText(h, 0, 2), "skipped steps: 1 of 2 logged steps had no update applied (ratios 0)");
  assert.equal(tooltipLines(h, 0, 1, 2).at(-1), skippedText(h, 0, 2));
  const all = parseHeatmap(sampleWithSkipped([0, 0, 2]));
  assert.equal(skippedText(all, 0, 2), "skipped steps: all 2 logged steps had no update applied (ratios 0)");
  assert.deepEqual(skippedLines(h, 0, 2), ["steps 20–29  ·  run r<b>", skippedText(h, 0, 2)]);
});

test("marks: one span per skipped column, at least 3 px wide, overlapping ones merged", () => {
  // wide columns: the column itself
  assert.deepEqual(markSpans([1, 0, 1], 3, 300), [[0, 100], [200, 300]]);
  // 1 px columns: widened around the column's centre, clamped to the strip
  assert.deepEqual(markSpans([1, 0, 0, 0, 0, 1, 0, 0, 0, 1], 10, 10), [[0, 2], [4, 7], [8, 10]]);
  // touching or overlapping marks merge
  assert.deepEqual(markSpans([1, 0, 0, 0, 0, 0, 1, 0, 0, 1], 10, 10), [[0, 2], [5, 10]]);
  assert.deepEqual(markSpans([0, 1, 1, 0], 4, 4), [[0, 4]]);
  assert.deepEqual(markSpans([0, 0, 0], 3, 300), []);
  assert.deepEqual(markSpans([], 0, 300), []);
});

test("the pointer finds the mark under it, the nearest of overlapping ones", () => {
  const counts = [0, 0, 1, 0, 0, 0, 0, 1, 0, 0];
  assert.equal(markAt(counts, 10, 10, 2.5), 2);
  assert.equal(markAt(counts, 10, 10, 1.2), 2); // within the 3 px mark of column 2
  assert.equal(markAt(counts, 10, 10, 0.5), -1);
  assert.equal(markAt(counts, 10, 10, 5), -1);
  assert.equal(markAt(counts, 10, 10, 8.9), 7);
  assert.equal(markAt([1, 1, 0], 3, 3, 1.4), 1);
  assert.equal(markAt([0, 1, 0], 3, 300, 150), 1);
  assert.equal(markAt([0, 1, 0], 3, 300, 99), -1);
  assert.equal(markAt(counts, 10, 10, -1), -1);
  assert.equal(markAt(counts, 10, 10, 10), -1);
});
