// Text shown to the user: ratios, steps, ticks (d3-scale's), tooltips. Pure functions.
import { scaleLinear, scaleLog } from "d3-scale";
import { cellKind, codeLog10, Codes, ColumnAxis, decodeCode, Heatmap, columnRange, heldFrom } from "./codec";

/** A ratio to 3 significant digits, as JavaScript's toPrecision(3) writes it. */
export function formatRatio(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+inf";
  if (value === -Infinity) return "-inf";
  if (value === 0) return "0";
  return value.toPrecision(3);
}

/** A short ratio for labels: 1e-4, 2.5e-3 (3 significant digits at most). */
export function formatShortRatio(value: number): string {
  if (!(value > 0) || !Number.isFinite(value)) return formatRatio(value);
  return Number(value.toPrecision(3)).toExponential();
}

/** An integer step, plain digits (searchable: "12000", not "12,000"). */
export function formatStep(step: number): string {
  if (!Number.isFinite(step)) return String(step);
  return String(Math.round(step));
}

/** A compact step for axis ticks: 1500 -> "1.5k", 2000000 -> "2M". */
export function formatStepShort(step: number): string {
  const a = Math.abs(step);
  const trim = (x: number) => String(Number(x.toPrecision(3)));
  if (a >= 1e9) return trim(step / 1e9) + "G";
  if (a >= 1e6) return trim(step / 1e6) + "M";
  if (a >= 1e4) return trim(step / 1e3) + "k";
  return String(Math.round(step));
}

/** "Nice" integer tick values in [lo, hi], about `target` of them: d3-scale's linear ticks
 * (1-2-5 steps), the whole steps among them (a step is an integer). */
export function stepTicks(lo: number, hi: number, target = 6): number[] {
  if (!(hi >= lo) || !Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  return scaleLinear().domain([lo, hi]).ticks(Math.max(1, target)).filter(Number.isInteger);
}

/** Label of a power of ten: 1e-3 for -3, 1 for 0, 10 for 1. */
export function formatPow10(k: number): string {
  if (k === 0) return "1";
  if (k === 1) return "10";
  return `1e${k}`;
}

/** The decades (as log10: integers) among d3-scale's log ticks of [10^lo, 10^hi], about
 * `max` of them (d3 thins wide ranges to every 2nd, 5th, 10th... decade). */
export function decadeTicks(lo: number, hi: number, max = 8): number[] {
  if (!(hi >= lo) || !Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  const out: number[] = [];
  for (const t of scaleLog().domain([10 ** lo, 10 ** hi]).ticks(max)) {
    const k = Math.round(Math.log10(t));
    if (Math.abs(Math.log10(t) - k) < 1e-9 && k >= lo - 1e-9 && k <= hi + 1e-9 && out[out.length - 1] !== k) out.push(k);
  }
  return out;
}

/** "step 40" for a column holding one logged step, else "steps 40–49". */
export function columnLabel(h: ColumnAxis, k: number): string {
  if (h.columnCount[k] === 1 && !Number.isNaN(h.columnFirst[k])) return `step ${formatStep(h.columnFirst[k])}`;
  const [a, b] = columnRange(h, k);
  if (a === b) return `step ${formatStep(a)}`;
  return `steps ${formatStep(a)}–${formatStep(b)}`;
}

/** The ratio part of a tooltip: value and log10, or what a special cell means. */
export function cellValueText(code: number, c: Codes): { ratio: string; log10: string } {
  switch (cellKind(code, c)) {
    case "value": {
      const lg = codeLog10(code, c);
      return { ratio: formatRatio(decodeCode(code, c)), log10: lg.toFixed(2) };
    }
    case "missing": return { ratio: "not logged", log10: "" };
    case "nan": return { ratio: "NaN (weights or update not finite)", log10: "" };
    case "inf": return { ratio: "+inf (zero weights moved)", log10: "" };
    case "zero": return { ratio: "0 (weights did not move)", log10: "-inf" };
    case "tiny": return { ratio: "< 1.00e-40", log10: "< -40" };
    case "huge": return { ratio: "≥ 1.00e+24", log10: "≥ 24" };
  }
}

/** A held cell's column label: "step 11 (held from step 10)". */
export function heldLabel(h: ColumnAxis, k: number, from: number): string {
  const [a, b] = columnRange(h, k);
  return `${a === b ? `step ${formatStep(a)}` : `steps ${formatStep(a)}–${formatStep(b)}`} (held from step ${formatStep(from)})`;
}

/** Lines of the hover tooltip of the cell (row, column k) of run `runIndex`. A held cell
 * names the logged step whose ratio it shows. */
export function tooltipLines(h: Heatmap, runIndex: number, row: number, k: number, reduction?: string): string[] {
  const run = h.runs[runIndex];
  const code = run.codes[row * h.columns + k];
  const { ratio, log10 } = cellValueText(code, h.codes);
  const from = heldFrom(run, row, k, h.columns);
  const held = !Number.isNaN(from);
  const lines = [run.tags[row], `${held ? heldLabel(h, k, from) : columnLabel(h, k)}  ·  run ${run.run}`, `ratio ${ratio}`];
  if (log10) lines.push(`log10 ${log10}`);
  if (held) {
    lines.push(`held: ${run.tags[row]} logged no step here; the ratio of step ${formatStep(from)}, its last logged step before`);
  } else if (h.columnCount[k] > 1 && cellKind(code, h.codes) !== "missing") {
    lines.push(`${h.columnCount[k]} logged steps, ${reduction ?? h.reduction}`);
  }
  const skipped = skippedText(h, runIndex, k);
  if (skipped) lines.push(skipped);
  return lines;
}

/** What column k says about the steps the optimizer skipped in run `runIndex` (their ratios
 * are 0 by design, not a stalled layer); null when none was skipped. */
export function skippedText(h: Heatmap, runIndex: number, k: number): string | null {
  const n = h.runs[runIndex].skipped[k] ?? 0;
  if (!n) return null;
  const logged = h.columnCount[k];
  if (logged <= 1) return "skipped step: the optimizer applied no update (ratios 0)";
  const which = n === logged ? `all ${logged}` : `${n} of ${logged}`;
  return `skipped steps: ${which} logged steps had no update applied (ratios 0)`;
}

/** The tooltip of the skipped-step mark of column k. */
export function skippedLines(h: Heatmap, runIndex: number, k: number): string[] {
  return [`${columnLabel(h, k)}  ·  run ${h.runs[runIndex].run}`, skippedText(h, runIndex, k) ?? "no skipped step"];
}

/** JSON of what a heatmap shows: the columns' step ranges and, per shown layer, its ratios
 * as displayed (3 significant digits; "NaN", "Infinity" as TensorBoard writes them; null
 * when not logged). */
export function viewJson(h: Heatmap, runIndex: number, rows: ArrayLike<number>): string {
  const run = h.runs[runIndex];
  const columns = Array.from({ length: h.columns }, (_, k) => {
    const [first, last] = columnRange(h, k);
    return { first_step: first, last_step: last, logged_steps: h.columnCount[k] };
  });
  const layers: Record<string, (number | string | null)[]> = {};
  const heldFromStep: Record<string, (number | null)[]> = {};
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r];
    const values: (number | string | null)[] = [];
    const from: (number | null)[] = [];
    for (let k = 0; k < h.columns; k++) {
      const code = run.codes[row * h.columns + k];
      const kind = cellKind(code, h.codes);
      values.push(kind === "missing" ? null : kind === "nan" ? "NaN" : kind === "inf" || kind === "huge" ? "Infinity" : kind === "zero" || kind === "tiny" ? 0 : Number(decodeCode(code, h.codes).toPrecision(3)));
      const s = heldFrom(run, row, k, h.columns);
      from.push(Number.isNaN(s) ? null : s);
    }
    layers[run.tags[row]] = values;
    if (from.some((s) => s !== null)) heldFromStep[run.tags[row]] = from;
  }
  // held_from_step: per layer with held cells, the logged step each cell holds (null: measured)
  return JSON.stringify({ run: run.run, reduction: h.reduction, columns, layers, held_from_step: heldFromStep });
}

/** CSV of what a heatmap shows: one line per shown (layer, column), ratios as displayed
 * (3 significant digits; nan, inf, 0; empty when not logged), and for a held cell the logged
 * step whose ratio it holds (empty for a measured one). */
export function viewCsv(h: Heatmap, runIndex: number, rows: ArrayLike<number>): string {
  const run = h.runs[runIndex];
  const quote = (t: string) => (/[",\n\r]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t);
  const lines = ["tag,first_step,last_step,logged_steps,ratio,held_from_step"];
  const ranges = Array.from({ length: h.columns }, (_, k) => columnRange(h, k));
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r];
    const tag = quote(run.tags[row]);
    for (let k = 0; k < h.columns; k++) {
      const code = run.codes[row * h.columns + k];
      const kind = cellKind(code, h.codes);
      const value = kind === "missing" ? "" : kind === "nan" ? "nan" : kind === "inf" || kind === "huge" ? "inf" : kind === "zero" || kind === "tiny" ? "0" : decodeCode(code, h.codes).toPrecision(3);
      const from = heldFrom(run, row, k, h.columns);
      lines.push(`${tag},${ranges[k][0]},${ranges[k][1]},${h.columnCount[k]},${value},${Number.isNaN(from) ? "" : from}`);
    }
  }
  return lines.join("\n") + "\n";
}
