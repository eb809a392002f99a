// Test fixtures: payloads laid out like tb_wur_plugin/heatmap.py `pack`.
import type { Reason } from "../src/api";
import type { Codes } from "../src/codec";

/** The codes a /heatmap header carries (tb_wur_plugin/heatmap.py's constants): the tests'
 * stand-in for the server, the frontend has no copy of them. */
export const CODES: Codes = {
  missing: 0, nan: 1, inf: 2, zero: 3, tiny: 4, huge: 5,
  first_value: 6, mantissas: 900, min_exponent: -42, max_exponent: 21,
};

/** Python's heatmap.encode_cells for a positive value, for the tests (exact decimal rounding). */
export function encode(value: number): number {
  const [m, e] = value.toExponential(2).split("e");
  const mantissa = Math.round(parseFloat(m) * 100);
  const k = parseInt(e, 10) - 2;
  return 6 + (k + 42) * 900 + (mantissa - 100);
}

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
    { start: 0, end: 29, reduction: "mean_log10", columns: 3, codes: CODES,
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


/** sample() with skipped-step counts: column 0 (one step) and 1 of the 2 steps of column 2. */
export function sampleWithSkipped(counts: number[] = [1, 0, 1]) {
  return pack(
    { start: 0, end: 29, reduction: "mean_log10", columns: 3, codes: CODES,
      runs: [{ run: "r<b>", tags: ["a/kernel", "b/kernel"], codes: "codes_0", skipped: "skipped_0" }] },
    {
      column_start: { dtype: "float64", data: [0, 10, 20] },
      column_first: { dtype: "float64", data: [0, 10, 20] },
      column_last: { dtype: "float64", data: [0, 10, 25] },
      column_count: { dtype: "uint32", data: [1, 1, 2] },
      codes_0: { dtype: "uint16_planes", data: [3, encode(1e-3), 3, 3, encode(2e-3), encode(5e-4)] },
      skipped_0: { dtype: "uint32", data: counts },
    },
  );
}

/** Two runs on one column axis of one step each (steps 0..5): "every2" logged at 0, 2, 4 (its
 * ratios held at 1, 3), "every5" at 0 and 5 (held at 1..4); one layer each. */
export function sampleWithHeld() {
  return pack(
    { start: 0, end: 5, reduction: "mean_log10", columns: 6, codes: CODES,
      runs: [
        { run: "every2", tags: ["w"], codes: "codes_0", skipped: "skipped_0", held: "held_0", held_from: "held_from_0" },
        { run: "every5", tags: ["w"], codes: "codes_1", skipped: "skipped_1", held: "held_1", held_from: "held_from_1" },
      ] },
    {
      column_start: { dtype: "float64", data: [0, 1, 2, 3, 4, 5] },
      column_first: { dtype: "float64", data: [0, NaN, 2, NaN, 4, 5] },
      column_last: { dtype: "float64", data: [0, NaN, 2, NaN, 4, 5] },
      column_count: { dtype: "uint32", data: [1, 0, 1, 0, 1, 1] },
      codes_0: { dtype: "uint16_planes", data: [encode(1e-3), encode(1e-3), encode(2e-3), encode(2e-3), encode(3e-3), 0] },
      skipped_0: { dtype: "uint32", data: [0, 0, 0, 0, 0, 0] },
      held_0: { dtype: "uint32", data: [0, 1, 1, 0, 3, 1] },
      held_from_0: { dtype: "float64", data: [0, 2] },
      codes_1: { dtype: "uint16_planes", data: [encode(5e-4), encode(5e-4), encode(5e-4), encode(5e-4), encode(5e-4), encode(6e-4)] },
      skipped_1: { dtype: "uint32", data: [0, 0, 0, 0, 0, 0] },
      held_1: { dtype: "uint32", data: [0, 1, 4] },
      held_from_1: { dtype: "float64", data: [0] },
    },
  );
}

/** A stand-in for /reasons (the server's table: tb_wur_plugin/judgement/reasons.py), made up
 * so that the tests show the tab follows whatever table it is sent. */
export const REASONS: Reason[] = [
  { name: "nan", judgement: "default", label: "NaN", streak: false },
  { name: "inf", judgement: "default", label: "+inf after first update", streak: false },
  { name: "stuck", judgement: "default", label: "stuck", streak: true },
  { name: "below_band", judgement: "band", label: "below band", streak: true },
  { name: "above_band", judgement: "band", label: "above band", streak: true },
];
