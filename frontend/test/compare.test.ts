// The run comparison (/compare): parsing, the diverging colors centred on 1, the rows by
// ranking, the tooltip; the suggested learning rate's text and cache; the new routes' URLs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { api } from "../src/api";
import { parseComparison } from "../src/codec";
import { compareColorTable, compareSpecialColors, divergingColor, divergingDomain, packRGBA, parseCssColor } from "../src/color";
import { compareDomain, compareTooltipLines, divergenceText, quotientText, rankedRows, rankingText } from "../src/compare";
import { RunCache } from "../src/cache";
import { suggestionText } from "../src/suggest";
import { CODES, encode, pack } from "./fixtures";

function comparison() {
  // 2 layers x 3 columns: A/B = 2, 0.5, missing / 100, NaN, 1
  return parseComparison(pack(
    { run_a: "a<b>", run_b: "b", start: 0, end: 29, columns: 3, codes: CODES, tags: ["x/kernel", "y/kernel"],
      ranking: [{ tag: "y/kernel", divergence: 1, median_log10_ratio: 1, steps: 2 }, { tag: "x/kernel", divergence: 0.30103, median_log10_ratio: 0, steps: 2 }] },
    {
      column_start: { dtype: "float64", data: [0, 10, 20] },
      column_first: { dtype: "float64", data: [0, 10, 20] },
      column_last: { dtype: "float64", data: [0, 10, 25] },
      column_count: { dtype: "uint32", data: [1, 1, 2] },
      codes: { dtype: "uint16_planes", data: [encode(2), encode(0.5), CODES.missing, encode(100), CODES.nan, encode(1)] },
    },
  ));
}

test("parseComparison: header, columns, cells, ranking", () => {
  const c = comparison();
  assert.equal(c.runA, "a<b>");
  assert.equal(c.runB, "b");
  assert.deepEqual(c.tags, ["x/kernel", "y/kernel"]);
  assert.equal(c.columns, 3);
  assert.equal(c.cells.length, 6);
  assert.equal(c.ranking[0].tag, "y/kernel");
  assert.equal(c.columnCount[2], 2);
});

test("the diverging domain is symmetric in log10 around 0, whole decades, at least one", () => {
  assert.deepEqual(divergingDomain(-0.3, 0.2), { lo: -1, hi: 1 });
  assert.deepEqual(divergingDomain(-0.3, 2), { lo: -2, hi: 2 });
  assert.deepEqual(divergingDomain(-2.5, 0.1), { lo: -3, hi: 3 });
  assert.deepEqual(divergingDomain(NaN, NaN), { lo: -1, hi: 1 });
  assert.deepEqual(compareDomain(comparison()), { lo: -2, hi: 2 });
});

test("diverging colors: centred on A/B = 1 (white), mirrored hues, A larger orange, B larger purple", () => {
  const d = { lo: -2, hi: 2 };
  const [r0, g0, b0] = parseCssColor(divergingColor(0, d));
  assert.ok(r0 > 225 && g0 > 225 && b0 > 225 && Math.max(r0, g0, b0) - Math.min(r0, g0, b0) < 16, `centre ${divergingColor(0, d)}`);
  const [ra, , ba] = parseCssColor(divergingColor(1, d)), [rb, , bb] = parseCssColor(divergingColor(-1, d));
  assert.ok(ra > ba, `A larger is orange: ${divergingColor(1, d)}`);
  assert.ok(bb > rb, `B larger is purple: ${divergingColor(-1, d)}`);
  assert.equal(divergingColor(5, d), divergingColor(2, d), "clamped");
  const t = compareColorTable(d, { dark: false }, CODES);
  assert.equal(t[encode(1)], packRGBA(...parseCssColor(divergingColor(0, d))));
  assert.notEqual(t[encode(10)], t[encode(0.1)]);
  const sp = compareSpecialColors({ dark: false });
  assert.equal(t[CODES.missing], packRGBA(...parseCssColor(sp.missing)));
  assert.equal(t[CODES.nan], packRGBA(...parseCssColor(sp.nan)));
  assert.equal(t[CODES.zero], packRGBA(...parseCssColor(sp.zero)));
  assert.equal(t[CODES.inf], packRGBA(...parseCssColor(sp.inf)));
  assert.equal(t[CODES.huge], t[encode(100)], "huge at the A end");
  assert.equal(t[CODES.tiny], t[encode(0.01)], "tiny at the B end");
});

test("rows by ranking; tooltip: layer, step or range, A/B to 3 significant digits", () => {
  const c = comparison();
  assert.deepEqual(rankedRows(c.tags, c.ranking), [1, 0]);
  assert.deepEqual(rankedRows(["p", "q", "r"], [{ tag: "r", divergence: 1, median_log10_ratio: 1, steps: 1 }]), [2, 0, 1]);
  const lines = compareTooltipLines(c, 0, 0);
  assert.deepEqual(lines.slice(0, 3), ["x/kernel", "step 0", "A/B 2.00"]);
  assert.ok(lines.includes("A: a<b>") && lines.includes("B: b"));
  assert.match(lines[3], /^log10\(A\/B\) \+0\.30: A's ratio is the larger$/);
  assert.equal(compareTooltipLines(c, 0, 1)[2], "A/B 0.500");
  assert.match(compareTooltipLines(c, 0, 2)[2], /^A\/B not compared/);
  assert.deepEqual(compareTooltipLines(c, 1, 2).slice(1, 3), ["steps 20–29", "A/B 1.00"]);
  assert.ok(compareTooltipLines(c, 1, 2).includes("geometric mean of 2 common steps"));
  assert.match(quotientText(CODES.nan, CODES), /NaN/);
  assert.equal(divergenceText(c.ranking[1]), "divergence 0.301, A/B typically 1.00");
  assert.equal(divergenceText({ tag: "t", divergence: null, median_log10_ratio: null, steps: 0 }), "no common finite step");
  // beside the row: short, the same numbers
  assert.equal(rankingText(c.ranking[1]), "0.301  ·  A/B 1.00");
  assert.equal(rankingText({ tag: "t", divergence: 2.9, median_log10_ratio: 2.9, steps: 9 }), "2.90  ·  A/B 794");
  assert.equal(rankingText({ tag: "t", divergence: 0.5, median_log10_ratio: null, steps: 1 }), "0.500");
  assert.equal(rankingText({ tag: "t", divergence: null, median_log10_ratio: null, steps: 0 }), "no common finite step");
});

test("suggested learning rate: value to 3 significant digits and the target; not logged", () => {
  const answer = { run: "r", target: 1e-3, last: 10, has_learning_rate: true,
    layers: [{ tag: "k", suggested_learning_rate: 0.0471234, ratio: 0.00212, learning_rate: 0.1, steps: 10 },
      { tag: "n", suggested_learning_rate: null, ratio: null, learning_rate: null, steps: 0 }] };
  assert.match(suggestionText(answer, "k"), /^Suggested learning rate 0\.0471 for a ratio of 1e-3 \(now ratio 0\.00212 at learning rate 0\.100/);
  assert.match(suggestionText(answer, "n"), /learning rate not logged/);
  assert.match(suggestionText(null, "k"), /learning rate not logged/);
  assert.match(suggestionText({ ...answer, has_learning_rate: false }, "k"), /learning rate not logged/);
});

test("the per-run cache fetches once per run until cleared; a failure is not kept", async () => {
  const asked: string[] = [];
  let fail = true;
  const cache = new RunCache<string>(async (run) => { asked.push(run); if (run === "bad" && fail) throw new Error("x"); return run; });
  await cache.get("a"); await cache.get("a"); await cache.get("b");
  assert.deepEqual(asked, ["a", "b"]);
  await assert.rejects(cache.get("bad"));
  fail = false;
  assert.equal(await cache.get("bad"), "bad");
  cache.clear();
  await cache.get("a");
  assert.deepEqual(asked, ["a", "b", "bad", "bad", "a"]);
});

test("the URLs of /flags (patience), /compare and /suggestions", async () => {
  const original = globalThis.fetch;
  const urls: string[] = [];
  const body = pack({ run_a: "a", run_b: "b", start: 0, end: 0, columns: 1, codes: CODES, tags: ["t"], ranking: [] }, {
    column_start: { dtype: "float64", data: [0] }, column_first: { dtype: "float64", data: [0] },
    column_last: { dtype: "float64", data: [0] }, column_count: { dtype: "uint32", data: [1] },
    codes: { dtype: "uint16_planes", data: [encode(1)] },
  });
  globalThis.fetch = (async (url: string) => {
    urls.push(url);
    return url.startsWith("./compare") ? new Response(body) : new Response('{"run":"r","low":1,"high":2,"patience":3,"layers":[]}');
  }) as typeof fetch;
  try {
    await api.flags("r/x", null, 3, "frobenius"); // no band set: the default judgement
    await api.flags("r/x", { low: 1e-4, high: 1e-2 }, 3, "frobenius");
    await api.compare({ runA: "a/1", runB: "b", columns: 500, start: 10, end: 20, metric: "frobenius" });
    await api.compare({ runA: "a", runB: "b", columns: 5, metric: "frobenius" });
    await api.suggestions("r", "frobenius");
    // another metric than the default is named; the default one is not (the server's default)
    await api.flags("r/x", null, 3, "spectral");
    await api.compare({ runA: "a", runB: "b", columns: 5, metric: "spectral" });
    await api.suggestions("r", "spectral");
  } finally {
    globalThis.fetch = original;
  }
  assert.deepEqual(urls, [
    "./flags?run=r%2Fx&patience=3",
    "./flags?run=r%2Fx&low=0.0001&high=0.01&patience=3",
    "./compare?run_a=a%2F1&run_b=b&columns=500&start=10&end=20",
    "./compare?run_a=a&run_b=b&columns=5",
    "./suggestions?run=r",
    "./flags?run=r%2Fx&patience=3&metric=spectral",
    "./compare?run_a=a&run_b=b&columns=5&metric=spectral",
    "./suggestions?run=r&metric=spectral",
  ]);
});
