import { test } from "node:test";
import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import { api, HttpError } from "../src/api";
import { sample } from "./fixtures";

function withFetch(handler: (url: string) => Response, body: () => Promise<void>) {
  const original = globalThis.fetch;
  const urls: string[] = [];
  globalThis.fetch = (async (url: string) => { urls.push(url); return handler(url); }) as typeof fetch;
  return body().finally(() => { globalThis.fetch = original; }).then(() => urls);
}

test("heatmap: asks for the runs, columns, range and reduction; inflates a gzip body the browser left alone", async () => {
  const urls = await withFetch(() => new Response(gzipSync(sample())), async () => {
    const h = await api.heatmap({ runs: ["a/train", "b"], columns: 700, start: 10, end: 49, reduction: "max", metric: "frobenius" });
    assert.equal(h.columns, 3);
    assert.equal(h.runs[0].tags[0], "a/kernel");
  });
  assert.deepEqual(urls, ["./heatmap?run=a%2Ftrain&run=b&columns=700&start=10&end=49&reduction=max"]);
  await withFetch(() => new Response(sample()), async () => {
    assert.equal((await api.heatmap({ runs: ["r"], columns: 5, reduction: "mean_log10", metric: "frobenius" })).end, 29);
  });
});

test("errors carry the status and the server's one-line reason", async () => {
  await withFetch(() => new Response("run 'x' holds no wur data\nmore", { status: 404 }), async () => {
    await assert.rejects(api.flags("x", null, 5, "frobenius"), (e: unknown) => e instanceof HttpError && e.status === 404 && /HTTP 404 — run 'x' holds no wur data$/.test(e.message));
  });
});

test("series: TensorBoard's non-finite strings become numbers", async () => {
  await withFetch(() => new Response('{"run":"r","tag":"t","kind":"ratio","description":"","steps":[0,1,2],"wall_times":[0,0,0],"values":["NaN",0.5,"Infinity"]}'), async () => {
    const s = await api.series("r", "t");
    assert.ok(Number.isNaN(s.values[0] as number));
    assert.deepEqual(s.values.slice(1), [0.5, Infinity]);
  });
});

test("metric: the heatmap, series and export of the spectral ratios name it; the default metric goes unnamed", async () => {
  const urls = await withFetch((url) => (url.startsWith("./heatmap") ? new Response(sample())
    : new Response('{"run":"r","tag":"t","kind":"ratio","description":"","steps":[],"wall_times":[],"values":[]}')), async () => {
    await api.heatmap({ runs: ["r"], columns: 5, reduction: "max", metric: "spectral" });
    await api.series("r", "t", "spectral");
    await api.series("r", "t", "frobenius");
    await api.series("r", "lr"); // the learning rate's series: no metric
  });
  assert.deepEqual(urls, [
    "./heatmap?run=r&columns=5&reduction=max&metric=spectral",
    "./series?run=r&tag=t&metric=spectral",
    "./series?run=r&tag=t",
    "./series?run=r&tag=lr",
  ]);
  assert.equal(api.exportUrl("a/b", "csv", "spectral"), "./export?run=a%2Fb&format=csv&metric=spectral");
  assert.equal(api.exportUrl("a/b", "json", "frobenius"), "./export?run=a%2Fb&format=json");
});

test("reasons: the server's table, asked for with no parameter", async () => {
  const table = '{"reasons":[{"name":"nan","judgement":"default","label":"NaN","streak":false},{"name":"above_band","judgement":"band","label":"above band","streak":true}]}';
  const urls = await withFetch(() => new Response(table), async () => {
    const { reasons } = await api.reasons();
    assert.deepEqual(reasons.map((r) => [r.name, r.judgement, r.label, r.streak]), [["nan", "default", "NaN", false], ["above_band", "band", "above band", true]]);
  });
  assert.deepEqual(urls, ["./reasons"]);
});
