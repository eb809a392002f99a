import { test } from "node:test";
import assert from "node:assert/strict";
import { cellKind, codeLog10, codeParts, columnRange, decodeCode, DEFAULT_CODES, parseHeatmap } from "../src/codec";

/** Python's heatmap.encode_cells for a positive value, for the tests (exact decimal rounding). */
function encode(value: number): number {
  const [m, e] = value.toExponential(2).split("e");
  const mantissa = Math.round(parseFloat(m) * 100);
  const k = parseInt(e, 10) - 2;
  return 6 + (k + 42) * 900 + (mantissa - 100);
}

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

/** A payload laid out like heatmap.pack (uncompressed). */
export function pack(header: Record<string, unknown>, arrays: Record<string, { dtype: string; data: number[] }>): Uint8Array {
  const layout: Record<string, unknown> = {};
  const chunks: Uint8Array[] = [];
  let offset = 0;
  for (const [name, { dtype, data }] of Object.entries(arrays)) {
    let bytes: Uint8Array;
    if (dtype === "uint16_planes") {
      bytes = new Uint8Array(2 * data.length);
      data.forEach((v, i) => { bytes[i] = v >> 8; bytes[data.length + i] = v & 255; });
    } else if (dtype === "float64") {
      bytes = new Uint8Array(new Float64Array(data).buffer);
    } else {
      bytes = new Uint8Array(new Uint32Array(data).buffer);
    }
    layout[name] = { dtype, offset, length: data.length };
    const padded = new Uint8Array(Math.ceil(bytes.length / 8) * 8);
    padded.set(bytes);
    chunks.push(padded);
    offset += padded.length;
  }
  let text = JSON.stringify({ ...header, arrays: layout });
  while ((text.length + 8) % 8) text += " ";
  const head = new TextEncoder().encode(text);
  const out = new Uint8Array(8 + head.length + offset);
  out.set([0x57, 0x55, 0x52, 0x31]);
  new DataView(out.buffer).setUint32(4, head.length, true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

export function sample() {
  // 2 layers x 3 columns; column 2 is a bin of steps 20..29 holding 2 logged steps
  return pack(
    { start: 0, end: 29, reduction: "mean_log10", columns: 3, codes: DEFAULT_CODES,
      runs: [{ run: "r<b>", tags: ["a/kernel", "<img src=x onerror=alert(1)>"], codes: "codes_0" }] },
    {
      column_start: { dtype: "float64", data: [0, 10, 20] },
      column_first: { dtype: "float64", data: [0, 10, 20] },
      column_last: { dtype: "float64", data: [0, 10, 25] },
      column_count: { dtype: "uint32", data: [1, 1, 2] },
      codes_0: { dtype: "uint16_planes", data: [encode(1.23e-3), 0, 1, 2, 3, encode(4.56e-5)] },
    },
  );
}

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
