import { test } from "node:test";
import assert from "node:assert/strict";
import { displayMatrix, groupName, layoutRows, severity } from "../src/group";
import { CODES } from "./fixtures";

const code = (v: number) => { const [m, e] = v.toExponential(2).split("e"); return 6 + (parseInt(e, 10) - 2 + 42) * 900 + Math.round(parseFloat(m) * 100) - 100; };
const tags = ["net/conv/kernel", "net/conv/bias", "net/out/kernel", "solo", "net/conv/extra"];

test("group names are the layer paths", () => {
  assert.equal(groupName("digits/conv/kernel"), "digits/conv");
  assert.equal(groupName("kernel"), "kernel");
  assert.equal(groupName("/x"), "/x");
});

test("layout: ungrouped keeps the order; grouped puts a layer's variables under one header", () => {
  assert.deepEqual(layoutRows(tags, [0, 2], false, new Set()).map((r) => r.tag), [0, 2]);
  const rows = layoutRows(tags, [0, 1, 2, 3, 4], true, new Set());
  assert.deepEqual(rows.map((r) => [r.kind, r.name]), [
    ["group", "net/conv"], ["tag", "net/conv/kernel"], ["tag", "net/conv/bias"], ["tag", "net/conv/extra"],
    ["tag", "net/out/kernel"], ["tag", "solo"],
  ]);
  assert.deepEqual(rows[0].members, [0, 1, 4]);
  const collapsed = layoutRows(tags, [0, 1, 2, 3, 4], true, new Set(["net/conv"]));
  assert.deepEqual(collapsed.map((r) => r.name), ["net/conv", "net/out/kernel", "solo"]);
  assert.equal(collapsed[0].collapsed, true);
});

test("severity: NaN worst, then inf, huge, zero, tiny, then distance from the target; missing least", () => {
  const t = -3;
  const order = [1, 2, 5, 3, 4].map((c) => severity(c, t, CODES));
  assert.deepEqual([...order].sort((a, b) => b - a), order);
  assert.ok(severity(code(1e-3), t, CODES) < 0.01);
  assert.ok(severity(code(1e-6), t, CODES) > severity(code(1e-1), t, CODES));
  assert.equal(severity(0, t, CODES), -1);
});

test("a group header shows its worst member per column", () => {
  const cols = 3;
  // rows: conv/kernel, conv/bias, out/kernel, solo, conv/extra
  const codes = new Uint16Array([
    code(1e-3), code(1e-5), 0,
    code(2e-3), 1, 0,
    code(1e-3), code(1e-3), code(1e-3),
    code(1e-3), code(1e-3), code(1e-3),
    code(5e-2), code(1e-3), code(1e-3),
  ]);
  const specs = layoutRows(tags, [0, 1, 2, 3, 4], true, new Set(["net/conv"]));
  const d = displayMatrix(codes, cols, specs, -3, CODES);
  assert.deepEqual(Array.from(d.codes.subarray(0, 3)), [code(5e-2), 1, code(1e-3)]);
  assert.deepEqual(Array.from(d.source.subarray(0, 3)), [4, 1, 4]);
  assert.deepEqual(Array.from(d.codes.subarray(3, 6)), Array.from(codes.subarray(6, 9)));
  assert.deepEqual(Array.from(d.source.subarray(3, 6)), [2, 2, 2]);
});
