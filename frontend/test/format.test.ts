import { test } from "node:test";
import assert from "node:assert/strict";
import { parseHeatmap } from "../src/codec";
import { cellValueText, columnLabel, viewCsv, viewJson, decadeTicks, formatPow10, formatRatio, formatShortRatio, formatStep, formatStepShort, stepTicks, tooltipLines } from "../src/format";
import { CODES, sample } from "./fixtures";

test("ratios to 3 significant digits, specials in words", () => {
  assert.equal(formatRatio(0.000521), "0.000521");
  assert.equal(formatRatio(1.2345e-7), "1.23e-7");
  assert.equal(formatRatio(NaN), "NaN");
  assert.equal(formatRatio(Infinity), "+inf");
  assert.equal(formatRatio(0), "0");
  assert.equal(formatShortRatio(1e-4), "1e-4");
  assert.equal(formatShortRatio(0.0025), "2.5e-3");
});

test("steps: plain digits in text, compact on axes", () => {
  assert.equal(formatStep(12000), "12000");
  assert.equal(formatStepShort(950), "950");
  assert.equal(formatStepShort(12000), "12k");
  assert.equal(formatStepShort(1500000), "1.5M");
});

test("step ticks are 1-2-5 multiples inside the range", () => {
  assert.deepEqual(stepTicks(0, 145, 6), [0, 20, 40, 60, 80, 100, 120, 140]);
  assert.deepEqual(stepTicks(0, 4999, 5), [0, 1000, 2000, 3000, 4000]);
  assert.deepEqual(stepTicks(10, 49, 4), [10, 20, 30, 40]);
  assert.deepEqual(stepTicks(7, 7), [7]);
  assert.deepEqual(stepTicks(0, 3, 10), [0, 1, 2, 3]); // never fractional steps
  assert.deepEqual(stepTicks(5, 1), []);
});

test("decade ticks and their labels", () => {
  assert.deepEqual(decadeTicks(-6.2, -0.5), [-6, -5, -4, -3, -2, -1]);
  assert.deepEqual(decadeTicks(-40, 0, 5), [-40, -30, -20, -10, 0]);
  assert.equal(formatPow10(-3), "1e-3");
  assert.equal(formatPow10(0), "1");
  assert.equal(formatPow10(1), "10");
});

test("column labels: one step, or the step range of a bin", () => {
  const h = parseHeatmap(sample());
  assert.equal(columnLabel(h, 0), "step 0");
  assert.equal(columnLabel(h, 1), "step 10");
  assert.equal(columnLabel(h, 2), "steps 20–29");
});

test("tooltip: tag, step, ratio to 3 digits and log10; specials explained", () => {
  const h = parseHeatmap(sample());
  assert.deepEqual(tooltipLines(h, 0, 0, 0), ["a/kernel", "step 0  ·  run r<b>", "ratio 0.00123", "log10 -2.91"]);
  assert.deepEqual(tooltipLines(h, 0, 0, 2), ["a/kernel", "steps 20–29  ·  run r<b>", "ratio NaN (weights or update not finite)", "2 logged steps, mean_log10"]);
  assert.equal(tooltipLines(h, 0, 0, 1)[2], "ratio not logged");
  assert.equal(tooltipLines(h, 0, 1, 0)[2], "ratio +inf (zero weights moved)");
  assert.equal(tooltipLines(h, 0, 1, 1)[2], "ratio 0 (weights did not move)");
  assert.deepEqual(tooltipLines(h, 0, 1, 2).slice(2), ["ratio 0.0000456", "log10 -4.34", "2 logged steps, mean_log10"]);
  assert.equal(tooltipLines(h, 0, 1, 0)[0], "<img src=x onerror=alert(1)>"); // text, the DOM layer sets textContent
  assert.equal(cellValueText(4, CODES).ratio, "< 1.00e-40");
  assert.equal(cellValueText(5, CODES).ratio, "≥ 1.00e+24");
});

test("CSV of the view: shown rows and columns, values as displayed", () => {
  const h = parseHeatmap(sample());
  assert.equal(viewCsv(h, 0, [1, 0]), [
    "tag,first_step,last_step,logged_steps,ratio,held_from_step",
    "<img src=x onerror=alert(1)>,0,9,1,inf,",
    "<img src=x onerror=alert(1)>,10,19,1,0,",
    "<img src=x onerror=alert(1)>,20,29,2,0.0000456,",
    "a/kernel,0,9,1,0.00123,",
    "a/kernel,10,19,1,,",
    "a/kernel,20,29,2,nan,",
  ].join("\n") + "\n");
});

test("JSON of the view: shown rows and columns, values as displayed", () => {
  const h = parseHeatmap(sample());
  const view = JSON.parse(viewJson(h, 0, [1, 0]));
  assert.deepEqual(view.columns[2], { first_step: 20, last_step: 29, logged_steps: 2 });
  assert.deepEqual(Object.keys(view.layers), ["<img src=x onerror=alert(1)>", "a/kernel"]);
  assert.deepEqual(view.layers["<img src=x onerror=alert(1)>"], ["Infinity", 0, 0.0000456]);
  assert.deepEqual(view.layers["a/kernel"], [0.00123, null, "NaN"]);
});

import { nearestIndex, stepAtX, PAD } from "../src/charts";
test("detail charts: x to step, nearest logged step", () => {
  assert.equal(stepAtX(PAD.left, 0, 100, 500), 0);
  assert.equal(stepAtX(500 - PAD.right, 0, 100, 500), 100);
  assert.equal(nearestIndex([0, 5, 10, 20], 7), 1);
  assert.equal(nearestIndex([0, 5, 10, 20], 8), 2);
  assert.equal(nearestIndex([0, 5, 10, 20], 16), 3);
  assert.equal(nearestIndex([0, 5, 10, 20], -3), 0);
  assert.equal(nearestIndex([0, 5, 10, 20], 99), 3);
  assert.equal(nearestIndex([], 1), -1);
});

import { bucketOf, log10AtY } from "../src/charts";
test("density chart: y to log10, log10 to bucket", () => {
  assert.equal(log10AtY(PAD.top, -5, -1, 160), -1);
  assert.equal(log10AtY(160 - PAD.bottom, -5, -1, 160), -5);
  const edges = [1e-4, 1e-3, 1e-2, 1e-1];
  assert.equal(bucketOf(edges, -3.5), 0);
  assert.equal(bucketOf(edges, -2.5), 1);
  assert.equal(bucketOf(edges, -1.2), 2);
  assert.equal(bucketOf(edges, -5), -1);
  assert.equal(bucketOf(edges, 0), -1);
});

import { parseBand } from "../src/toolbar";
test("the band from its two inputs", () => {
  assert.deepEqual(parseBand("1e-4", "1e-2"), { low: 1e-4, high: 1e-2, target: Math.sqrt(1e-6) });
  assert.deepEqual(parseBand("1e-5", ""), { low: 1e-5, high: 1e-2, target: Math.sqrt(1e-7) }); // an empty field: the default bound
  assert.deepEqual(parseBand("", ""), { low: 1e-4, high: 1e-2, target: Math.sqrt(1e-6) });
  for (const [a, b] of [["1e-2", "1e-4"], ["0", "1"], ["x", "1"], ["1e-4", "Infinity"]]) assert.equal(typeof parseBand(a, b), "string", `${a}, ${b}`);
});

import { FLAG_COLUMNS, flagsNote, rankFlags } from "../src/sidebar";
import type { FlagInfo } from "../src/api";
import { REASONS } from "./fixtures";
export function flagOf(run: string, tag: string, over: Partial<FlagInfo>): FlagInfo & { run: string } {
  return {
    run, tag, since: 0, reason: "above_band", text: "above band", nan_since: null, inf_since: null, streak_since: 0, streak_length: 5,
    median: 1e-3, last: 1e-3, above: 5, below: 0, nonfinite: 0, logged_steps: 30, skipped_steps: 0,
    out_of_band_fraction: 0.2, below_steps: 0, above_steps: 5, first_out_of_band_step: 0, last_out_of_band_step: 20,
    nan_steps: 0, first_nan_step: null, inf_steps: 0, first_inf_step: null, ...over,
  };
}
test("flags: NaN first, then by since, then tag, then run (as /flags orders them)", () => {
  const ranked = rankFlags([
    flagOf("b", "x", { since: 5 }), flagOf("a", "y", { since: 5 }), flagOf("a", "z", { since: 40, reason: "nan", nan_since: 40 }),
    flagOf("a", "x", { since: 5 }), flagOf("a", "w", { since: 0 }),
  ]);
  assert.deepEqual(ranked.map((f) => `${f.run}/${f.tag}`), ["a/z", "a/w", "a/x", "b/x", "a/y"]);
  // the NaN layer first also when only its reason says NaN
  const byReason = rankFlags([flagOf("r", "b", { since: 1, reason: "not_moving" }), flagOf("r", "a", { since: 9, reason: "nan" })]);
  assert.deepEqual(byReason.map((f) => f.tag), ["a", "b"]);
});

import { parsePatience } from "../src/toolbar";
test("the patience: a whole number of steps >= 1", () => {
  assert.equal(parsePatience("5"), 5);
  assert.equal(parsePatience(" 12 "), 12);
  for (const t of ["0", "-1", "2.5", "x", "", "1e3", "Infinity"]) assert.equal(typeof parsePatience(t), "string", t);
});

test("the flags note names the judgement in force and what it flags, from the server's reasons; the since column its unit", () => {
  assert.equal(flagsNote(3, null, 5, REASONS),
    "Default judgement (no band set), patience 5: 3 layers flagged. It flags NaN / +inf after first update at any step, and for 5 judged steps in a row: stuck. Set the band to also flag for 5 judged steps in a row: below band / above band.");
  assert.match(flagsNote(0, null, 1, REASONS), /no layer flagged\. It flags NaN \/ \+inf after first update at any step, and for 1 judged step in a row: stuck\./);
  assert.equal(flagsNote(1, { low: 1e-4, high: 1e-2 }, 25, REASONS),
    "Band [1e-4, 1e-2] with patience 25: 1 layer flagged. The default judgement's findings, and for 25 judged steps in a row: below band / above band.");
  // a reason the server adds shows up; before /reasons came in, the note names none
  const more = [...REASONS, { name: "spiky", judgement: "default" as const, label: "spiky", streak: true }];
  assert.match(flagsNote(0, null, 5, more), /in a row: stuck \/ spiky\./);
  assert.equal(flagsNote(2, null, 5, []), "Default judgement (no band set), patience 5: 2 layers flagged.");
  assert.equal(FLAG_COLUMNS[3], "since step");
});
