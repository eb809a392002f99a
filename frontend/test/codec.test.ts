import { test } from "node:test";
import assert from "node:assert/strict";
import { cellKind, codeLog10, codeParts, columnRange, decodeCode, parseHeatmap } from "../src/codec";
import { encode, sample } from "./fixtures";

test("value codes decode to m*10^k and print as toPrecision(3) of the exact value", () => {
  for (const v of [1e-3, 1.23e-3, 0.000521, 9.99e-7, 4.567e-4, 1.2345e-3, 2e-2, 3.14159, 1e-40, 9.99e23]) {
    const code = encode(v);
    assert.equal(decodeCode(code).toPrecision(3), v.toPrecision(3), `value ${v}`);
  }
  assert.deepEqual(codeParts(6), { m: 100, k: -42 });
  assert.deepEqual(codeParts(6 + 900 * 39 + 23), { m: 123, k: -3 });
  assert.equal(decodeCode(6 + 900 * 39 + 23), 0.123);
  assert.ok(Math.abs(codeLog10(6 + 900 * 42) - 2) < 1e-12); // 100 * 10^0
});

test("special codes", () => {
  assert.equal(cellKind(0), "missing");
  assert.ok(Number.isNaN(decodeCode(0)));
  assert.equal(cellKind(1), "nan");
  assert.ok(Number.isNaN(decodeCode(1)));
  assert.equal(decodeCode(2), Infinity);
  assert.equal(decodeCode(3), 0);
  assert.equal(cellKind(4), "tiny");
  assert.equal(decodeCode(4), 0);
  assert.equal(cellKind(5), "huge");
  assert.equal(decodeCode(5), Infinity);
  assert.equal(cellKind(6), "value");
});

test("parseHeatmap reads header, columns and the uint16 planes", () => {
  const h = parseHeatmap(sample());
  assert.equal(h.columns, 3);
  assert.equal(h.end, 29);
  assert.deepEqual(Array.from(h.columnStart), [0, 10, 20]);
  assert.deepEqual(Array.from(h.columnCount), [1, 1, 2]);
  assert.equal(h.runs[0].tags[1], "<img src=x onerror=alert(1)>");
  assert.deepEqual(Array.from(h.runs[0].codes), [encode(1.23e-3), 0, 1, 2, 3, encode(4.56e-5)]);
  assert.deepEqual(columnRange(h, 0), [0, 9]);
  assert.deepEqual(columnRange(h, 2), [20, 29]);
});

test("parseHeatmap refuses what is not a WUR1 payload", () => {
  assert.throws(() => parseHeatmap(new TextEncoder().encode("<html>not found</html>")), /not a WUR1/);
  const truncated = sample().subarray(0, 100);
  assert.throws(() => parseHeatmap(truncated), /truncated|JSON/);
});
