// The line search of a run: its steps on the heatmap's columns (one column per step, bins,
// the zoomed range), the strip's tooltip, the per-run cache, the store's marks.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { LineSearch, RunInfo } from "../src/api";
import { parseHeatmap } from "../src/codec";
import { lineSearchDomain } from "../src/draw";
import { RunCache } from "../src/cache";
import { columnOfStep, lineSearchAt, lineSearchColumns, lineSearchLines } from "../src/line_search";
import { Part, Scheduler, Store } from "../src/state";
import { CODES, encode, pack, sample } from "./fixtures";

/** A heatmap of one layer over `starts` (column starts), steps start..end. */
function heatmap(starts: number[], end: number, counts = starts.map(() => 1)) {
  return parseHeatmap(pack(
    { start: starts[0], end, reduction: "mean_log10", columns: starts.length, codes: CODES, runs: [{ run: "r", tags: ["a"], codes: "c" }] },
    {
      column_start: { dtype: "float64", data: starts }, column_first: { dtype: "float64", data: starts },
      column_last: { dtype: "float64", data: starts }, column_count: { dtype: "uint32", data: counts },
      c: { dtype: "uint16_planes", data: starts.map(() => encode(1e-3)) },
    },
  ));
}

test("a step falls in the column whose range holds it; none outside the heatmap's range", () => {
  const h = parseHeatmap(sample()); // columns start at 0, 10, 20; steps 0..29
  assert.deepEqual([0, 9, 10, 19, 20, 29].map((s) => columnOfStep(h, s)), [0, 0, 1, 1, 2, 2]);
  assert.deepEqual([-1, 30, NaN].map((s) => columnOfStep(h, s)), [-1, -1, -1]);
  const zoomed = heatmap([10, 15], 19); // a zoom on steps 10..19
  assert.deepEqual([9, 10, 14, 15, 19, 20].map((s) => columnOfStep(zoomed, s)), [-1, 0, 0, 1, 1, -1]);
});

test("one column per step: each step at its own column, its own step size and backtracks", () => {
  const h = heatmap([0, 5, 10, 15], 15);
  const ls: LineSearch = { steps: [0, 5, 10, 15], step_size: [0.5, 0.123456, 0, 2], backtracks: [3, 0, 7, 1] };
  const v = lineSearchColumns(h, ls);
  assert.equal(v.points, 4);
  assert.deepEqual(v.columns.map((c) => [c.k, c.count, c.first, c.stepSize, c.backtracks]), [[0, 1, 0, 0.5, 3], [1, 1, 5, 0.123456, 0], [2, 1, 10, 0, 7], [3, 1, 15, 2, 1]]);
  assert.deepEqual(Array.from(v.counts), [1, 1, 1, 1]);
  assert.deepEqual(Array.from(v.index), [0, 1, 2, 3]);
  assert.equal(v.lo, 0.123456);
  assert.equal(v.hi, 2);
  assert.equal(v.maxBacktracks, 7);
  assert.deepEqual(lineSearchLines("r<b>", v.columns[1]), ["step 5  ·  run r<b>", "step size 0.123 (line search)", "backtracks 0"]);
  assert.deepEqual(lineSearchLines("r", v.columns[2]).slice(1), ["step size 0 (line search; the gradient was too small: nothing moved)", "backtracks 7"]);
});

test("bins: the geometric mean of the step sizes of a column's steps; zoom leaves steps out", () => {
  const h = parseHeatmap(sample()); // columns 0..9, 10..19, 20..29
  const ls: LineSearch = { steps: [0, 1, 2, 12, 25, 31], step_size: [0.01, 1, 0, 0.5, NaN, 9], backtracks: [1, 2, 4, 0, 0, 3] };
  const v = lineSearchColumns(h, ls);
  assert.equal(v.points, 5, "step 31 is outside the heatmap");
  assert.deepEqual(v.columns.map((c) => c.k), [0, 1, 2]);
  const bin = v.columns[0];
  assert.ok(Math.abs(bin.stepSize - 0.1) < 1e-12, `geometric mean of 0.01 and 1 (the 0 left out): ${bin.stepSize}`);
  assert.deepEqual([bin.count, bin.first, bin.last, bin.zeros, bin.min, bin.max, bin.backtracks, bin.maxBacktracks], [3, 0, 2, 1, 0.01, 1, 7, 4]);
  assert.ok(Number.isNaN(v.columns[2].stepSize), "no finite step size: nothing to draw");
  assert.equal(v.maxBacktracks, 7 / 3, "a bin's bar is its mean backtracks per step");
  assert.deepEqual(lineSearchLines("r", bin), [
    "steps 0–2  ·  run r",
    "step size 0.100 (line search; geometric mean of 2 steps, 0.0100–1.00)",
    "1 of 3 steps with step size 0 (nothing moved)",
    "backtracks 7 in 3 steps (at most 4 in one)",
  ]);
  const empty = lineSearchColumns(h, { steps: [], step_size: [], backtracks: [] });
  assert.equal(empty.points, 0);
  assert.ok(Number.isNaN(empty.lo));
  assert.deepEqual(Array.from(empty.index), [-1, -1, -1]);
});

test("the strip's log domain: whole decades around the step sizes, a decade around one value", () => {
  assert.deepEqual(lineSearchDomain(0.0123, 0.5), [0.01, 1]);
  assert.deepEqual(lineSearchDomain(0.2, 0.2), [0.1, 1]);
  assert.equal(lineSearchDomain(NaN, NaN), null);
  assert.equal(lineSearchDomain(0, 1), null);
});

test("the step size at a step, for the detail's readout", () => {
  const ls: LineSearch = { steps: [0, 5, 10], step_size: [0.5, 0.25, 0.125], backtracks: [1, 2, 3] };
  assert.deepEqual(lineSearchAt(ls, 5), { stepSize: 0.25, backtracks: 2 });
  assert.deepEqual(lineSearchAt(ls, 10), { stepSize: 0.125, backtracks: 3 });
  assert.equal(lineSearchAt(ls, 4), null);
  assert.equal(lineSearchAt(null, 5), null);
});

test("the cache fetches a run once until cleared; a failure is not kept", async () => {
  const asked: string[] = [];
  let fail = true;
  const cache = new RunCache<LineSearch>(async (run) => {
    asked.push(run);
    if (run === "bad" && fail) throw new Error("HTTP 500");
    return { steps: [1], step_size: [0.5], backtracks: [0] };
  });
  const a = await cache.get("a");
  assert.equal(await cache.get("a"), a, "the same answer, not fetched again");
  assert.ok(cache.has("a"));
  await assert.rejects(cache.get("bad"));
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(cache.has("bad"), false);
  fail = false;
  await cache.get("bad");
  assert.deepEqual(asked, ["a", "bad", "bad"]);
  cache.clear();
  assert.equal(cache.size, 0);
  await cache.get("a");
  assert.deepEqual(asked, ["a", "bad", "bad", "a"]);
});

test("the store: a line search marks the strips and the detail, not the cells; runs without one get none", () => {
  const queue: (() => void)[] = [];
  let dirty: Part[] = [];
  const store = new Store(new Scheduler((d) => { dirty = [...d].sort() as Part[]; }, (cb) => { queue.push(cb); }));
  const after = (change: () => void) => { change(); queue.splice(0).forEach((cb) => cb()); const d = dirty; dirty = []; return d; };
  const run = (name: string, hasLineSearch?: boolean): RunInfo => ({
    run: name, first_step: 0, last_step: 9, has_learning_rate: false, ...(hasLineSearch === undefined ? {} : { has_line_search: hasLineSearch }),
    layers: [{ tag: "a", description: "", first_step: 0, last_step: 9, logged_steps: 10, has_histograms: false }],
  });
  after(() => store.setRuns([run("a", true), run("b", false), run("c")], null));
  assert.deepEqual(store.lineSearchRuns(), ["a"], "a missing has_line_search is false");
  const data: LineSearch = { steps: [0], step_size: [1], backtracks: [0] };
  assert.deepEqual(after(() => store.setLineSearch("a", data)), ["detail", "lineSearch"]);
  assert.deepEqual(after(() => store.setLineSearch("a", data)), [], "the same data marks nothing");
  store.setRunShown("a", false);
  assert.deepEqual(store.lineSearchRuns(), []);
  store.setRunShown("a", true);
  assert.equal(store.s.lineSearch.get("a"), data);
  store.setRuns([run("a", false)], null);
  assert.equal(store.s.lineSearch.has("a"), false, "dropped when /runs no longer says it has one");
});
