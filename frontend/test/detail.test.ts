// The layer detail's data cache: one fetch per (run, tag, metric) until a reload clears it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DetailCache, DetailData } from "../src/detail";
import { rangeIndices } from "../src/charts";

function data(tag: string): DetailData {
  return { series: { run: "r", tag, kind: "ratio", description: "", steps: [0, 5], wall_times: [0, 0], values: [1e-3, 2e-3] }, values: [1e-3, 2e-3], histograms: null, lr: null };
}

test("one fetch per layer; band, theme and zoom redraws ask the cache, not the server", async () => {
  const fetched: string[] = [];
  const cache = new DetailCache(async (run, tag, metric) => { fetched.push(`${run}|${tag}|${metric}`); return data(tag); });
  const a = await cache.get("r", "a", "frobenius");
  assert.equal(a.series.tag, "a");
  assert.equal(await cache.get("r", "a", "frobenius"), a, "the same data again");
  await cache.get("r", "b", "frobenius");
  await cache.get("s", "a", "frobenius");
  assert.deepEqual(fetched, ["r|a|frobenius", "r|b|frobenius", "s|a|frobenius"]);
  assert.ok(cache.has("r", "a", "frobenius") && !cache.has("r", "c", "frobenius"));
  // another metric of the same layer is fetched on its own, then kept beside the first
  const spectral = await cache.get("r", "a", "spectral");
  assert.notEqual(spectral, a);
  assert.equal(await cache.get("r", "a", "frobenius"), a);
  assert.equal(fetched.length, 4);
  // a run and tag that contain the separator of another key do not collide
  await cache.get("r|a", "", "frobenius");
  assert.equal(fetched.length, 5);
});

test("concurrent asks share one fetch; a failed fetch is not kept", async () => {
  let calls = 0, fail = true;
  const cache = new DetailCache(async (_run, tag) => { calls++; await new Promise((r) => setTimeout(r, 5)); if (fail) throw new Error("HTTP 500"); return data(tag); });
  const [x, y] = [cache.get("r", "a", "frobenius"), cache.get("r", "a", "frobenius")];
  await assert.rejects(x, /HTTP 500/);
  await assert.rejects(y, /HTTP 500/);
  assert.equal(calls, 1);
  assert.equal(cache.has("r", "a", "frobenius"), false, "the failure is not cached");
  fail = false;
  assert.equal((await cache.get("r", "a", "frobenius")).series.tag, "a");
  assert.equal(calls, 2);
});

test("clear() (a reload) makes the next ask fetch again; the least recently used go first", async () => {
  let calls = 0;
  const cache = new DetailCache(async (_run, tag) => { calls++; return data(tag); }, 2);
  await cache.get("r", "a", "frobenius");
  cache.clear();
  assert.equal(cache.size, 0);
  await cache.get("r", "a", "frobenius");
  assert.equal(calls, 2);
  await cache.get("r", "b", "frobenius");
  await cache.get("r", "a", "frobenius"); // a is now the most recent
  await cache.get("r", "c", "frobenius"); // evicts b
  assert.ok(cache.has("r", "a", "frobenius") && cache.has("r", "c", "frobenius") && !cache.has("r", "b", "frobenius"));
  assert.equal(cache.size, 2);
});

test("rangeIndices: the sorted steps inside [x0, x1]", () => {
  const steps = [0, 5, 10, 10, 15, 20];
  assert.deepEqual(rangeIndices(steps, 0, 20), [0, 6]);
  assert.deepEqual(rangeIndices(steps, 5, 10), [1, 4]);
  assert.deepEqual(rangeIndices(steps, 6, 9), [2, 2]);
  assert.deepEqual(rangeIndices(steps, 11, 100), [4, 6]);
  assert.deepEqual(rangeIndices(steps, 30, 40), [6, 6]);
  assert.deepEqual(rangeIndices([], 0, 1), [0, 0]);
});
