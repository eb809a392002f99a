// Color of a cell: log10(ratio) on viridis (perceptually uniform, from d3-scale-chromatic)
// over a domain shared by every heatmap on screen; fixed, distinct colors for the special
// cells. Colors are packed as RGBA in a Uint32 (little-endian ImageData byte order).
import { interpolatePuOr, interpolateViridis } from "d3-scale-chromatic";
import { cellKind, codeLog10, Codes, Heatmap } from "./codec";

export type Special = "missing" | "zero" | "tiny" | "inf" | "huge" | "nan";

export interface Theme {
  dark: boolean;
}

/** CSS colors of the special cells; the legend shows each with its meaning. */
export function specialColors(theme: Theme): Record<Special, string> {
  return {
    missing: theme.dark ? "#3c4043" : "#e8eaed",
    zero: "#000000",
    tiny: "#5f6368",
    inf: "#ff2bd6",
    huge: "#ffffff",
    nan: "#e8000b",
  };
}

export const SPECIAL_MEANING: Record<Special, string> = {
  missing: "not logged in this column",
  zero: "0: the weights did not move",
  tiny: "below 1e-40",
  inf: "+inf: zero weights that moved",
  huge: "1e24 or more",
  nan: "NaN: weights or update not finite",
};

export interface Domain { lo: number; hi: number }

/** The band and its target, as ratios. */
export interface Band { low: number; high: number; target: number }
export const DEFAULT_BAND: Band = { low: 1e-4, high: 1e-2, target: 1e-3 };

/** A color domain in log10 units: integers, covering the band with a decade to spare on each
 * side, widened to the data's extent (finite positive cells of every shown run). */
export function colorDomain(dataLo: number, dataHi: number, band: Band = DEFAULT_BAND): Domain {
  let lo = Math.floor(Math.log10(band.low)) - 1;
  let hi = Math.ceil(Math.log10(band.high)) + 1;
  if (Number.isFinite(dataLo)) lo = Math.min(lo, Math.floor(dataLo));
  if (Number.isFinite(dataHi)) hi = Math.max(hi, Math.ceil(dataHi));
  if (hi <= lo) hi = lo + 1;
  return { lo, hi };
}

/** Position 0..1 of log10 value `x` in the domain, clamped. */
export function domainPosition(x: number, d: Domain): number {
  const t = (x - d.lo) / (d.hi - d.lo);
  return t < 0 ? 0 : t > 1 ? 1 : t;
}

export function parseCssColor(css: string): [number, number, number] {
  const hex = /^#([0-9a-f]{6})$/i.exec(css);
  if (hex) {
    const v = parseInt(hex[1], 16);
    return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  }
  const rgb = /^rgba?\(\s*(\d+)[,\s]+(\d+)[,\s]+(\d+)/i.exec(css);
  if (rgb) return [+rgb[1], +rgb[2], +rgb[3]];
  throw new Error(`unsupported color ${css}`);
}

export function packRGBA(r: number, g: number, b: number, a = 255): number {
  return ((a << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

export function unpackRGBA(v: number): [number, number, number, number] {
  return [v & 255, (v >>> 8) & 255, (v >>> 16) & 255, (v >>> 24) & 255];
}

export const RAMP_SIZE = 256;
let ramp: Uint32Array | null = null;
/** viridis sampled at RAMP_SIZE points. */
export function viridisRamp(): Uint32Array {
  if (!ramp) {
    ramp = new Uint32Array(RAMP_SIZE);
    for (let i = 0; i < RAMP_SIZE; i++) {
      const [r, g, b] = parseCssColor(interpolateViridis(i / (RAMP_SIZE - 1)));
      ramp[i] = packRGBA(r, g, b);
    }
  }
  return ramp;
}

/** A lookup table: every uint16 code -> packed RGBA. Codes past the header's max_exponent
 * (none is sent) draw as `huge`. One table per (domain, theme, codes) makes drawing one array
 * lookup per cell. */
export function codeColorTable(d: Domain, theme: Theme, c: Codes): Uint32Array {
  const last = c.first_value + (c.max_exponent - c.min_exponent + 1) * c.mantissas - 1;
  const table = new Uint32Array(65536);
  const specials = specialColors(theme);
  const special = (kind: Special) => packRGBA(...parseCssColor(specials[kind]));
  const v = viridisRamp();
  const huge = special("huge");
  for (let code = 0; code < table.length; code++) {
    const kind = cellKind(code, c);
    if (kind !== "value") table[code] = special(kind);
    else if (code > last) table[code] = huge;
    else table[code] = v[Math.round(domainPosition(codeLog10(code, c), d) * (RAMP_SIZE - 1))];
  }
  return table;
}

/** How far a held cell's color goes toward the page's background (0: not at all, 1: all the
 * way): held cells are drawn pale, in the hue of their value. */
export const HELD_FADE = 0.55;

/** The background held cells fade toward. */
export function heldBackground(theme: Theme): [number, number, number] {
  return theme.dark ? [32, 33, 36] : [255, 255, 255];
}

/** A held cell's color: `rgba` (packed) faded HELD_FADE of the way toward the background. */
export function heldColor(rgba: number, theme: Theme): number {
  const [r, g, b] = unpackRGBA(rgba), bg = heldBackground(theme);
  const mix = (c: number, k: number) => Math.round(c + (bg[k] - c) * HELD_FADE);
  return packRGBA(mix(r, 0), mix(g, 1), mix(b, 2));
}

/** The held cells' table: every entry of `table` faded (heldColor). */
export function heldColorTable(table: Uint32Array, theme: Theme): Uint32Array {
  const out = new Uint32Array(table.length);
  const memo = new Map<number, number>();
  for (let i = 0; i < table.length; i++) {
    const v = table[i];
    let faded = memo.get(v);
    if (faded === undefined) memo.set(v, (faded = heldColor(v, theme)));
    out[i] = faded;
  }
  return out;
}

/** Extent [min, max] of log10 over the value codes of the given arrays (NaN, NaN if none). */
export function codeExtent(arrays: Uint16Array[], c: Codes): [number, number] {
  let lo = Infinity, hi = -Infinity;
  for (const a of arrays) {
    for (let i = 0; i < a.length; i++) {
      const code = a[i];
      if (code >= c.first_value) {
        if (code < lo) lo = code;
        if (code > hi) hi = code;
      }
    }
  }
  if (lo === Infinity) return [NaN, NaN];
  return [codeLog10(lo, c), codeLog10(hi, c)]; // codes are monotonic in the value
}

/** The color domain and code table of the heatmap shown, kept until the heatmap, the band or
 * the theme changes (the extent is computed once per heatmap). */
export class ColorTables {
  private extent: { h: Heatmap; lo: number; hi: number } | null = null;
  private last: { key: string; table: Uint32Array; held: Uint32Array | null; dark: boolean } | null = null;

  domain(h: Heatmap, band: Band): Domain {
    if (this.extent?.h !== h) {
      const [lo, hi] = codeExtent(h.runs.map((r) => r.codes), h.codes);
      this.extent = { h, lo, hi };
    }
    return colorDomain(this.extent.lo, this.extent.hi, band);
  }

  table(h: Heatmap, band: Band, dark: boolean): Uint32Array {
    const d = this.domain(h, band);
    const key = JSON.stringify([d, dark, h.codes]);
    if (this.last?.key !== key) this.last = { key, table: codeColorTable(d, { dark }, h.codes), held: null, dark };
    return this.last.table;
  }

  /** The held cells' table that goes with `table(h, band, dark)` (made on first use). */
  heldTable(h: Heatmap, band: Band, dark: boolean): Uint32Array {
    const table = this.table(h, band, dark), last = this.last!;
    if (!last.held) last.held = heldColorTable(table, { dark });
    return last.held;
  }
}

// --- the comparison's diverging scale ---------------------------------------------------

/** Colors of the comparison's special cells (quotient ratio_A / ratio_B). */
export type CompareSpecial = "missing" | "zero" | "inf" | "nan";
export function compareSpecialColors(theme: Theme): Record<CompareSpecial, string> {
  return { missing: theme.dark ? "#3c4043" : "#bdc1c6", zero: "#000000", inf: "#ff2bd6", nan: "#e8000b" };
}
export const COMPARE_SPECIAL_MEANING: Record<CompareSpecial, string> = {
  missing: "not compared (a run did not log the step, or skipped it)",
  zero: "0: only B moved",
  inf: "+inf: only A moved",
  nan: "NaN in either run",
};

/** The comparison's domain in log10(A/B): symmetric around 0 (A/B = 1), a whole number of
 * decades covering the data's largest |log10| (at least one decade). */
export function divergingDomain(dataLo: number, dataHi: number): Domain {
  let m = 1;
  for (const x of [dataLo, dataHi]) if (Number.isFinite(x)) m = Math.max(m, Math.ceil(Math.abs(x) - 1e-9));
  return { lo: -m, hi: m };
}

/** Color of log10(A/B) = x in a symmetric domain: PuOr (d3-scale-chromatic) with its white
 * centre at A/B = 1, orange where A's ratio is the larger, purple where B's is. */
export function divergingColor(x: number, d: Domain): string {
  return interpolatePuOr(domainPosition(x, d));
}

let divergingRampCache: Uint32Array | null = null;
/** PuOr sampled at RAMP_SIZE points, from log10 = lo (B larger) to hi (A larger). */
export function divergingRamp(): Uint32Array {
  if (!divergingRampCache) {
    divergingRampCache = new Uint32Array(RAMP_SIZE);
    for (let i = 0; i < RAMP_SIZE; i++) divergingRampCache[i] = packRGBA(...parseCssColor(interpolatePuOr(i / (RAMP_SIZE - 1))));
  }
  return divergingRampCache;
}

/** Every uint16 code of a comparison -> packed RGBA: value codes on the diverging ramp (tiny
 * and huge clamped to its ends), the specials in their own colors. */
export function compareColorTable(d: Domain, theme: Theme, c: Codes): Uint32Array {
  const table = new Uint32Array(65536);
  const specials = compareSpecialColors(theme);
  const special = (kind: CompareSpecial) => packRGBA(...parseCssColor(specials[kind]));
  const v = divergingRamp();
  const last = c.first_value + (c.max_exponent - c.min_exponent + 1) * c.mantissas - 1;
  for (let code = 0; code < table.length; code++) {
    const kind = cellKind(code, c);
    if (kind === "value" && code <= last) table[code] = v[Math.round(domainPosition(codeLog10(code, c), d) * (RAMP_SIZE - 1))];
    else if (kind === "value" || kind === "huge") table[code] = v[RAMP_SIZE - 1];
    else if (kind === "tiny") table[code] = v[0];
    else if (kind === "missing" || kind === "zero" || kind === "inf") table[code] = special(kind);
    else table[code] = special("nan");
  }
  return table;
}
