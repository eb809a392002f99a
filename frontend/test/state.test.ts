// The dirty-mark scheduler and the store's setters: a setter marks what it made stale, one
// frame commits everything marked, once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { metricChoices, Part, runHasMetric, Scheduler, Store } from "../src/state";

function fakeFrames() {
  const queue: (() => void)[] = [];
  return { frame: (cb: () => void) => { queue.push(cb); }, run: () => { const q = queue.splice(0); q.forEach((cb) => cb()); }, get pending() { return queue.length; } };
}

test("marks made before a frame are committed together, once", () => {
  const frames = fakeFrames();
  const commits: Part[][] = [];
  const s = new Scheduler((d) => commits.push([...d].sort() as Part[]), frames.frame);
  s.mark("heatmaps");
  s.mark("legend", "heatmaps");
  s.mark("detail");
  assert.equal(frames.pending, 1, "one frame requested for three marks");
  assert.equal(commits.length, 0, "nothing drawn before the frame");
  assert.ok(s.isMarked("legend"));
  frames.run();
  assert.deepEqual(commits, [["detail", "heatmaps", "legend"]]);
  assert.equal(s.isMarked("legend"), false);
  frames.run();
  assert.equal(commits.length, 1, "no commit without marks");
  s.mark();
  assert.equal(frames.pending, 0, "marking nothing asks for no frame");
});

test("a mark made during a commit is drawn in the next frame; flush() commits now", () => {
  const frames = fakeFrames();
  const commits: Part[][] = [];
  const s: Scheduler = new Scheduler((d) => {
    commits.push([...d]);
    if (d.has("heatmaps")) s.mark("selection");
  }, frames.frame);
  s.mark("heatmaps");
  frames.run();
  assert.deepEqual(commits, [["heatmaps"]]);
  assert.equal(frames.pending, 1);
  frames.run();
  assert.deepEqual(commits, [["heatmaps"], ["selection"]]);
  s.mark("flags");
  s.flush();
  assert.deepEqual(commits.at(-1), ["flags"]);
  frames.run(); // the frame asked for by the mark finds nothing left
  assert.equal(commits.length, 3);
});

test("setters mark what shows what they change", () => {
  const frames = fakeFrames();
  let dirty: Part[] = [];
  const store = new Store(new Scheduler((d) => { dirty = [...d].sort() as Part[]; }, frames.frame));
  const after = (change: () => void) => { change(); frames.run(); const d = dirty; dirty = []; return d; };
  assert.deepEqual(after(() => store.setBand({ low: 1e-5, high: 1e-2, target: 1e-3 })), ["detail", "heatmaps", "legend"]);
  assert.deepEqual(after(() => store.setDark(true)), ["compare", "detail", "heatmaps", "legend"]);
  assert.deepEqual(after(() => store.setZoom({ start: 10, end: 20 })), ["detail", "zoom"]);
  assert.deepEqual(after(() => store.setSelected({ run: "r", tag: "t" })), ["detail", "selection"]);
  assert.deepEqual(after(() => store.setHighlight({ run: "r", tag: "t" })), ["selection"]);
  assert.deepEqual(after(() => store.setLayerFilter(/dense/)), ["heatmaps"]);
  assert.deepEqual(after(() => store.setRunShown("r", false)), ["compare", "detail", "flags", "heatmaps", "legend", "runs", "zoom"]);
  assert.deepEqual(after(() => store.setPatience(3)), [], "the patience shows once the new flags are in");
  assert.equal(store.s.patience, 3);
  assert.deepEqual(after(() => store.setFlags([])), ["flags"]);
  assert.deepEqual(after(() => store.setComparePair(["a", "b"])), ["compare"]);
  assert.deepEqual(store.s.comparePair, ["a", "b"]);
  assert.deepEqual(after(() => store.setComparison(null, "none")), ["compare"]);
  assert.equal(store.s.compareError, "none");
  assert.deepEqual(after(() => store.setReduction("max")), [], "the reduction shows once the new heatmap is in");
  assert.equal(store.s.zoom?.end, 20);
  assert.equal(store.s.dark, true);
});

test("shown runs: the selected ones, in order; those with ratios for the heatmap", () => {
  const store = new Store(new Scheduler(() => {}, () => {}));
  const run = (name: string, ratios: boolean) => ({ run: name, first_step: ratios ? 0 : null, last_step: ratios ? 9 : null, has_learning_rate: false, layers: ratios ? [{ tag: "a", description: "", first_step: 0, last_step: 9, logged_steps: 10, has_histograms: false }] : [] });
  store.setRuns([run("a", true), run("b", false), run("c", true)], null);
  store.setRunShown("c", false);
  assert.deepEqual(store.selectedRuns(), ["a", "b"]);
  assert.deepEqual(store.heatmapRuns(), ["a"]);
  store.setRunShown("c", true);
  assert.deepEqual(store.heatmapRuns(), ["a", "c"]);
  // the run filter hides the runs it does not match, checked or not
  store.setRunFilter(/^c|b/i);
  assert.deepEqual(store.filteredRuns(), ["b", "c"]);
  assert.deepEqual(store.selectedRuns(), ["b", "c"]);
  assert.deepEqual(store.heatmapRuns(), ["c"]);
  assert.equal(store.isShown("a"), false);
  store.setRunShown("c", false);
  assert.deepEqual(store.heatmapRuns(), []);
  store.setRunFilter(null);
  assert.deepEqual(store.heatmapRuns(), ["a"]);
});

test("the band: the colors' always, the flags' only once the user set it", () => {
  const store = new Store(new Scheduler(() => {}, () => {}));
  assert.equal(store.s.flagBand, null);
  store.setBand({ low: 1e-5, high: 1e-1, target: 1e-3 });
  assert.deepEqual(store.s.flagBand, { low: 1e-5, high: 1e-1, target: 1e-3 });
  store.setBand({ low: 1e-4, high: 1e-2, target: 1e-3 }, false);
  assert.equal(store.s.flagBand, null);
  assert.equal(store.s.band.low, 1e-4);
});

test("the metric switch: offered only when /runs has more than the Frobenius ratios", () => {
  assert.equal(metricChoices(undefined), null, "an older backend: no switch");
  assert.equal(metricChoices([]), null);
  assert.equal(metricChoices(["frobenius"]), null);
  assert.deepEqual(metricChoices(["frobenius", "spectral"]), ["frobenius", "spectral"]);
  assert.deepEqual(metricChoices(["spectral"]), ["spectral"], "only spectral ratios: still a choice to show");
});

test("the metric: switching marks every view of ratios, the heatmap runs are those with the metric, a metric gone falls back", () => {
  const frames = fakeFrames();
  let dirty: Part[] = [];
  const store = new Store(new Scheduler((d) => { dirty = [...d].sort() as Part[]; }, frames.frame));
  const layer = { tag: "k", description: "", first_step: 0, last_step: 9, logged_steps: 10, has_histograms: false };
  const run = (name: string, metrics?: string[]) => ({ run: name, first_step: 0, last_step: 9, has_learning_rate: false, layers: [layer], metrics });
  const runs = [run("both", ["frobenius", "spectral"]), run("frob", ["frobenius"]), run("old")];
  assert.ok(runHasMetric(runs[0], "spectral") && !runHasMetric(runs[1], "spectral"));
  assert.ok(runHasMetric(runs[2], "frobenius") && !runHasMetric(runs[2], "spectral"), "no metrics: Frobenius only");
  store.setRuns(runs, null, ["frobenius", "spectral"]);
  frames.run();
  assert.equal(store.s.metric, "frobenius");
  assert.deepEqual(store.s.metrics, ["frobenius", "spectral"]);
  assert.deepEqual(store.heatmapRuns(), ["both", "frob", "old"]);
  store.setComparison(null, "stale");
  frames.run();
  store.setMetric("spectral");
  frames.run();
  assert.deepEqual(dirty, ["compare", "detail", "flags", "heatmaps", "legend", "zoom"]);
  assert.equal(store.s.compareError, null, "the other metric's comparison goes");
  assert.deepEqual(store.heatmapRuns(), ["both"]);
  dirty = [];
  store.setMetric("spectral");
  frames.run();
  assert.deepEqual(dirty, [], "the same metric again marks nothing");
  // a reload where no run has spectral ratios any more: back to Frobenius, no switch
  store.setRuns(runs.slice(1), null, ["frobenius"]);
  assert.equal(store.s.metric, "frobenius");
  assert.equal(store.s.metrics, null);
  assert.deepEqual(store.heatmapRuns(), ["frob", "old"]);
});
