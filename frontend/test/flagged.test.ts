// Flagged rows at once in their heatmap: the flags by run and tag, a group header's flag, the
// mark's words; names that wrap only between levels; the detail opened in view.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Reason } from "../src/api";
import { flagMarkTitle, flagsOfRun, isNanFlag, reasonLabel, rowFlag } from "../src/flagged";
import { layoutRows } from "../src/group";
import { scrollToShow } from "../src/layout";
import { LONG_LEVEL, nameParts, numberParts } from "../src/names";
import type { FlagRow } from "../src/state";

const flag = (run: string, tag: string, reason: string, extra: Partial<FlagRow> = {}): FlagRow =>
  ({ run, tag, reason, since: 0, text: `${reason} of ${tag}`, ...extra });
const reasons: Reason[] = [
  { name: "nan", judgement: "default", label: "NaN", streak: false },
  { name: "slow_outlier", judgement: "default", label: "far slower than its peers", streak: true },
];

test("flags of a run by tag, in the ranking's order; other runs' left out", () => {
  const ranked = [flag("a", "x/bias", "nan"), flag("b", "x/kernel", "slow_outlier"), flag("a", "x/kernel", "slow_outlier")];
  const a = flagsOfRun(ranked, "a");
  assert.deepEqual([...a.keys()], ["x/bias", "x/kernel"]);
  assert.equal(a.get("x/kernel"), ranked[2]);
  assert.equal(flagsOfRun(ranked, "c").size, 0);
});

test("a row's flag: a tag's own; a group header's first flagged member in the ranking", () => {
  const tags = ["net/conv/kernel", "net/conv/bias", "net/out/kernel"];
  const byTag = flagsOfRun([flag("r", "net/conv/bias", "nan"), flag("r", "net/conv/kernel", "slow_outlier")], "r");
  const grouped = layoutRows(tags, [0, 1, 2], true, new Set());
  assert.deepEqual(grouped.map((spec) => rowFlag(spec, tags, byTag)?.tag ?? null),
    ["net/conv/bias", "net/conv/kernel", "net/conv/bias", null]);
  const collapsed = layoutRows(tags, [0, 1, 2], true, new Set(["net/conv"]));
  assert.equal(rowFlag(collapsed[0], tags, byTag)?.reason, "nan"); // the mark stays when collapsed
  assert.equal(rowFlag(collapsed[1], tags, new Map()), null);
});

test("the mark's words: the reason's label and the flag's text; a NaN is one", () => {
  const f = flag("r", "net/conv/kernel", "slow_outlier");
  assert.equal(flagMarkTitle(f, reasons, false), "Flagged: far slower than its peers. slow_outlier of net/conv/kernel");
  assert.equal(flagMarkTitle(f, reasons, true), "Flagged (net/conv/kernel): far slower than its peers. slow_outlier of net/conv/kernel");
  assert.equal(reasonLabel(reasons, "new_reason"), "new_reason");
  assert.ok(isNanFlag(flag("r", "t", "nan")));
  assert.ok(isNanFlag(flag("r", "t", "not_moving", { nan_since: 4 })));
  assert.ok(!isNanFlag(flag("r", "t", "not_moving", { nan_since: null })));
});

test("names wrap after a '/', and inside a long level after a '_'; never inside a word", () => {
  assert.deepEqual(nameParts("digits/logits/kernel"), ["digits/", "logits/", "kernel"]);
  assert.deepEqual(nameParts("slow_logits"), ["slow_logits"]);
  assert.deepEqual(nameParts("beta/<i onmouseover=alert(2)>train"), ["beta/", "<i onmouseover=alert(2)>train"]);
  const long = "transformer_block_attention_output";
  assert.ok(long.length > LONG_LEVEL);
  assert.deepEqual(nameParts(`model/${long}/kernel`), ["model/", "transformer_", "block_", "attention_", "output/", "kernel"]);
  assert.deepEqual(nameParts("/x/"), ["/", "x/"]);
  assert.deepEqual(nameParts(""), [""]);
  for (const name of ["a//b", `${long}/`, "_a_", "x"]) assert.equal(nameParts(name).join(""), name);
});

test("prose keeps its numbers in exponent notation whole", () => {
  const text = "slow outlier: ratio 1,768× below (its median ratio 9.33e-07, the others' 0.00173; 1e+24 or more) at 114 steps";
  const parts = numberParts(text);
  assert.deepEqual(parts.filter((_, i) => i % 2), ["9.33e-07", "1e+24"]);
  assert.equal(parts.join(""), text);
  assert.deepEqual(numberParts("no number here"), ["no number here"]);
});

test("the detail opened below a row: shown whole when the row stays in view, else the row kept at the top", () => {
  const view = { top: 100, bottom: 900 };
  // fits already: no scroll
  assert.equal(scrollToShow({ top: 300, bottom: 318 }, { top: 400, bottom: 800 }, view), 0);
  // below the window: scrolled just enough to show it whole
  assert.equal(scrollToShow({ top: 500, bottom: 518 }, { top: 700, bottom: 1000 }, view), 108);
  // taller than the room left: the row stops 8 px under the toolbar
  assert.equal(scrollToShow({ top: 500, bottom: 518 }, { top: 700, bottom: 1600 }, view), 392);
  // the row already at the top: no scroll
  assert.equal(scrollToShow({ top: 104, bottom: 122 }, { top: 700, bottom: 1600 }, view), 0);
});
