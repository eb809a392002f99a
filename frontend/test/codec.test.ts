import { test } from "node:test";
import assert from "node:assert/strict";
import { cellKind, codeLog10, codeParts, columnRange, decodeCode, parseHeatmap } from "../src/codec";
import { CODES, encode, pack, sample } from "./fixtures";

test("value codes decode to m*10^k and print as toPrecision(3) of the exact value", () => {
  for (const v of [1e-3, 1.23e-3, 0.000521, 9.99e-7, 4.567e-4, 1.2345e-3, 2e-2, 3.14159, 1e-40, 9.99e23]) {
    const code = encode(v);
    assert.equal(decodeCode(code, CODES).toPrecision(3), v.toPrecision(3), `value ${v}`);
  }
  assert.deepEqual(codeParts(6, CODES), { m: 100, k: -42 });
  assert.deepEqual(codeParts(6 + 900 * 39 + 23, CODES), { m: 123, k: -3 });
  assert.equal(decodeCode(6 + 900 * 39 + 23, CODES), 0.123);
  assert.ok(Math.abs(codeLog10(6 + 900 * 42, CODES) - 2) < 1e-12); // 100 * 10^0
});

test("special codes", () => {
  assert.equal(cellKind(0, CODES), "missing");
  assert.ok(Number.isNaN(decodeCode(0, CODES)));
  assert.equal(cellKind(1, CODES), "nan");
  assert.ok(Number.isNaN(decodeCode(1, CODES)));
  assert.equal(decodeCode(2, CODES), Infinity);
  assert.equal(decodeCode(3, CODES), 0);
  assert.equal(cellKind(4, CODES), "tiny");
  assert.equal(decodeCode(4, CODES), 0);
  assert.equal(cellKind(5, CODES), "huge");
  assert.equal(decodeCode(5, CODES), Infinity);
  assert.equal(cellKind(6, CODES), "value");
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

test("the header's codes are required, every one of them: no default", () => {
  const payload = (codes: unknown) => pack(
    { start: 0, end: 0, reduction: "max", columns: 1, codes, runs: [{ run: "r", tags: ["a"], codes: "c" }] },
    { column_start: { dtype: "float64", data: [0] }, column_first: { dtype: "float64", data: [0] },
      column_last: { dtype: "float64", data: [0] }, column_count: { dtype: "uint32", data: [1] },
      c: { dtype: "uint16_planes", data: [3] } },
  );
  assert.deepEqual(parseHeatmap(payload(CODES)).codes, CODES);
  assert.throws(() => parseHeatmap(payload(undefined)), /lacks its codes/);
  const { max_exponent: _, ...old } = CODES;
  assert.throws(() => parseHeatmap(payload(old)), /lacks codes\.max_exponent/);
  assert.throws(() => parseHeatmap(payload({ ...CODES, nan: "1" })), /lacks codes\.nan/);
  // other constants decode other codes
  const shifted = { ...CODES, first_value: 10, mantissas: 900, min_exponent: -40 };
  const h = parseHeatmap(payload(shifted));
  assert.equal(decodeCode(10 + 900 * 37 + 23, h.codes), 0.123);
  assert.deepEqual(codeParts(10, h.codes), { m: 100, k: -40 });
  assert.equal(cellKind(9, h.codes), "nan", "a code below first_value that names nothing is not a value");
});
