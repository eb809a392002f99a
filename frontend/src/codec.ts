// The /heatmap and /compare wire format (see tb_wur_plugin/http_api.md;
// tb_wur_plugin/read/heatmap_wire.py `pack`/`unpack`/`decode_cells` is the reference
// implementation).

export interface Codes {
  missing: number;
  nan: number;
  inf: number;
  zero: number;
  tiny: number;
  huge: number;
  first_value: number;
  mantissas: number;
  min_exponent: number;
  max_exponent: number;
}

const CODE_NAMES: (keyof Codes)[] = [
  "missing", "nan", "inf", "zero", "tiny", "huge", "first_value", "mantissas", "min_exponent", "max_exponent",
];

/** The header's `codes`: every constant the decoder needs, each an integer. There is no
 * default: a header without them is an error (the user sees it), not a silent guess. */
export function parseCodes(raw: unknown): Codes {
  if (!raw || typeof raw !== "object") throw new Error("heatmap header lacks its codes");
  const out = {} as Codes;
  for (const name of CODE_NAMES) {
    const v = (raw as Record<string, unknown>)[name];
    if (typeof v !== "number" || !Number.isInteger(v)) throw new Error(`heatmap header lacks codes.${name}`);
    out[name] = v;
  }
  if (out.mantissas <= 0 || out.max_exponent < out.min_exponent) throw new Error("heatmap header has inconsistent codes");
  return out;
}

/** /compare's ranking: a common layer, by decreasing divergence (median |log10(A/B)|; null
 * when no step counts). */
export interface CompareRank { tag: string; divergence: number | null; median_log10_ratio: number | null; steps: number }
/** /compare: ratio_A / ratio_B per common layer and step, as cell codes (codec.ts). */
export interface Comparison {
  runA: string; runB: string; start: number; end: number; columns: number; codes: Codes;
  columnStart: Float64Array; columnFirst: Float64Array; columnLast: Float64Array; columnCount: Uint32Array;
  tags: string[];
  /** row-major [layer][column], layers in the order of `tags` */
  cells: Uint16Array;
  ranking: CompareRank[];
}

/** A run's held cells (/heatmap's held_i, held_from_i): runs of cells of one layer where it
 * logged no step, showing the ratio of its last logged step before them. */
export interface HeldRuns {
  /** per run of held cells: the layer row, its first column, its number of columns */
  rows: Uint32Array;
  first: Uint32Array;
  count: Uint32Array;
  /** the logged step whose ratio the cells hold */
  from: Float64Array;
}

export interface HeatmapRun {
  run: string;
  tags: string[];
  /** Row-major [layer][column] codes. */
  codes: Uint16Array;
  /** Per column: how many of its logged steps the optimizer skipped (ratios 0 by design). */
  skipped: Uint32Array;
  held: HeldRuns;
  /** Row-major [layer][column]: the index in `held` of a held cell, -1 for a measured (or
   * missing) one; null when no cell is held. */
  heldIndex: Int32Array | null;
  /** held cells */
  heldCells: number;
}

export interface Heatmap {
  start: number;
  end: number;
  reduction: string;
  columns: number;
  codes: Codes;
  columnStart: Float64Array;
  columnFirst: Float64Array;
  columnLast: Float64Array;
  columnCount: Uint32Array;
  runs: HeatmapRun[];
}

interface ArraySpec { dtype: string; offset: number; length: number }

function readArray(bytes: Uint8Array, base: number, spec: ArraySpec): Float64Array | Uint32Array | Uint16Array {
  const start = base + spec.offset;
  const n = spec.length;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (spec.dtype) {
    case "uint16_planes": {
      if (start + 2 * n > bytes.length) throw new Error("heatmap payload is truncated");
      const out = new Uint16Array(n);
      for (let i = 0; i < n; i++) out[i] = (bytes[start + i] << 8) | bytes[start + n + i];
      return out;
    }
    case "float64": {
      if (start + 8 * n > bytes.length) throw new Error("heatmap payload is truncated");
      const out = new Float64Array(n);
      for (let i = 0; i < n; i++) out[i] = view.getFloat64(start + 8 * i, true);
      return out;
    }
    case "uint32": {
      if (start + 4 * n > bytes.length) throw new Error("heatmap payload is truncated");
      const out = new Uint32Array(n);
      for (let i = 0; i < n; i++) out[i] = view.getUint32(start + 4 * i, true);
      return out;
    }
    default:
      throw new Error(`unsupported dtype in heatmap payload: ${spec.dtype}`);
  }
}

/** The header and an array reader of an (already decompressed) WUR1 payload. */
function readPayload(buffer: ArrayBuffer | Uint8Array): { header: any; get: (name: string) => Float64Array | Uint32Array | Uint16Array } {
  const bytes = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  if (bytes.length < 8 || bytes[0] !== 0x57 || bytes[1] !== 0x55 || bytes[2] !== 0x52 || bytes[3] !== 0x31) {
    throw new Error("not a WUR1 heatmap payload");
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = view.getUint32(4, true);
  if (8 + length > bytes.length) throw new Error("heatmap payload is truncated");
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const base = 8 + length;
  const arrays: Record<string, ArraySpec> = header.arrays;
  const get = (name: string) => {
    const spec = arrays[name];
    if (!spec) throw new Error(`heatmap payload lacks array ${name}`);
    return readArray(bytes, base, spec);
  };
  return { header, get };
}

const toF64 = (a: Float64Array | Uint32Array | Uint16Array) => (a instanceof Float64Array ? a : Float64Array.from(a));
const toU32 = (a: Float64Array | Uint32Array | Uint16Array) => (a instanceof Uint32Array ? a : Uint32Array.from(a));

/** Parses an (already decompressed) WUR1 payload of /heatmap. */
export function parseHeatmap(buffer: ArrayBuffer | Uint8Array): Heatmap {
  const { header, get } = readPayload(buffer);
  const columns: number = header.columns;
  const codes = parseCodes(header.codes);
  const count = get("column_count");
  const runs: HeatmapRun[] = (header.runs as { run: string; tags: string[]; codes: string; skipped?: string; held?: string; held_from?: string }[]).map((r) => {
    const codes = get(r.codes);
    if (!(codes instanceof Uint16Array)) throw new Error("heatmap codes must be uint16");
    if (codes.length !== r.tags.length * columns) throw new Error("heatmap codes do not match tags x columns");
    const read = r.skipped ? get(r.skipped) : new Uint32Array(columns); // absent: none skipped
    if (read.length !== columns) throw new Error("heatmap skipped steps do not match the columns");
    const skipped = read instanceof Uint32Array ? read : Uint32Array.from(read);
    // absent (an older backend): nothing held
    const triples = r.held ? toU32(get(r.held)) : new Uint32Array(0);
    const from = r.held_from ? toF64(get(r.held_from)) : new Float64Array(0);
    const held = heldRuns(triples, from, r.tags.length, columns);
    const { index, cells } = heldCellIndex(held, r.tags.length, columns);
    return { run: r.run, tags: r.tags, codes, skipped, held, heldIndex: index, heldCells: cells };
  });
  return {
    start: header.start,
    end: header.end,
    reduction: header.reduction,
    columns,
    codes,
    columnStart: toF64(get("column_start")),
    columnFirst: toF64(get("column_first")),
    columnLast: toF64(get("column_last")),
    columnCount: count instanceof Uint32Array ? count : Uint32Array.from(count),
    runs,
  };
}

/** The held runs of `held_i` (row, first column, columns per run) and `held_from_i`,
 * checked against the matrix. */
function heldRuns(triples: Uint32Array, from: Float64Array, rows: number, columns: number): HeldRuns {
  const n = from.length;
  if (triples.length !== 3 * n) throw new Error("heatmap held cells do not match their steps");
  const out: HeldRuns = { rows: new Uint32Array(n), first: new Uint32Array(n), count: new Uint32Array(n), from };
  for (let j = 0; j < n; j++) {
    const [r, k, c] = [triples[3 * j], triples[3 * j + 1], triples[3 * j + 2]];
    if (r >= rows || c < 1 || k + c > columns) throw new Error("heatmap held cells lie outside the matrix");
    out.rows[j] = r; out.first[j] = k; out.count[j] = c;
  }
  return out;
}

/** Per cell ([layer][column]) the index of its held run, -1 where none; null when none. */
function heldCellIndex(held: HeldRuns, rows: number, columns: number): { index: Int32Array | null; cells: number } {
  if (!held.from.length) return { index: null, cells: 0 };
  const index = new Int32Array(rows * columns).fill(-1);
  let cells = 0;
  for (let j = 0; j < held.from.length; j++) {
    const base = held.rows[j] * columns + held.first[j];
    index.fill(j, base, base + held.count[j]);
    cells += held.count[j];
  }
  return { index, cells };
}

/** The logged step whose ratio cell (layer row, column k) of `run` holds; NaN for a measured
 * (or missing) cell. */
export function heldFrom(run: HeatmapRun, row: number, k: number, columns: number): number {
  const j = run.heldIndex ? run.heldIndex[row * columns + k] : -1;
  return j >= 0 ? run.held.from[j] : NaN;
}

/** Parses a (decompressed) WUR1 payload of /compare: ratio_A / ratio_B as cell codes, and
 * the ranking of the common layers. */
export function parseComparison(buffer: ArrayBuffer | Uint8Array): Comparison {
  const { header, get } = readPayload(buffer);
  const columns: number = header.columns, tags: string[] = header.tags;
  const codes = parseCodes(header.codes);
  const cells = get("codes");
  if (!(cells instanceof Uint16Array)) throw new Error("comparison codes must be uint16");
  if (cells.length !== tags.length * columns) throw new Error("comparison codes do not match tags x columns");
  return {
    runA: header.run_a, runB: header.run_b, start: header.start, end: header.end, columns, codes,
    columnStart: toF64(get("column_start")), columnFirst: toF64(get("column_first")), columnLast: toF64(get("column_last")),
    columnCount: toU32(get("column_count")), tags, cells, ranking: header.ranking ?? [],
  };
}

export type CellKind = "missing" | "nan" | "inf" | "zero" | "tiny" | "huge" | "value";

export function cellKind(code: number, c: Codes): CellKind {
  if (code >= c.first_value) return "value";
  switch (code) {
    case c.missing: return "missing";
    case c.nan: return "nan";
    case c.inf: return "inf";
    case c.zero: return "zero";
    case c.tiny: return "tiny";
    case c.huge: return "huge";
    default: return "nan";
  }
}

/** Mantissa (100..999) and decimal exponent k of a value code: value = m * 10^k. */
export function codeParts(code: number, c: Codes): { m: number; k: number } {
  const index = code - c.first_value;
  return { m: (index % c.mantissas) + 100, k: Math.floor(index / c.mantissas) + c.min_exponent };
}

/** The ratio a code stands for: the double nearest to m·10^k; NaN for missing and NaN,
 * +Infinity for inf and huge, 0 for zero and tiny (like heatmap.decode_cells). */
export function decodeCode(code: number, c: Codes): number {
  switch (cellKind(code, c)) {
    case "value": {
      const { m, k } = codeParts(code, c);
      return parseFloat(`${m}e${k}`);
    }
    case "inf": case "huge": return Infinity;
    case "zero": case "tiny": return 0;
    default: return NaN;
  }
}

/** log10 of a value code's ratio (exact from m and k). */
export function codeLog10(code: number, c: Codes): number {
  const { m, k } = codeParts(code, c);
  return Math.log10(m) + k;
}

/** What the columns of /heatmap and /compare have in common. */
export type ColumnAxis = Pick<Heatmap, "columns" | "end" | "columnStart" | "columnFirst" | "columnLast" | "columnCount">;

/** Inclusive step range [first, last] covered by column `k`. */
export function columnRange(h: ColumnAxis, k: number): [number, number] {
  const start = h.columnStart[k];
  const end = k + 1 < h.columns ? h.columnStart[k + 1] - 1 : h.end;
  return [start, end];
}
