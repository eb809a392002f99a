// The stochastic Armijo line search of a run (/line_search: its step sizes and backtracks per
// step): the mapping of its steps onto a heatmap's columns and the strip's tooltip text (its
// per-run cache is a RunCache of cache.ts, held by the app). Pure (the strip is drawn by
// draw.ts, held by heatmap_block.ts).
import type { LineSearch } from "./api";
import type { Heatmap } from "./codec";
import { formatRatio, formatStep } from "./format";

/** The searched steps that fall in one heatmap column. */
export interface LineSearchColumn {
  /** the heatmap column */
  k: number;
  /** searched steps in it */
  count: number;
  /** their first and last step */
  first: number;
  last: number;
  /** the step size drawn: the step's own (one step), else the geometric mean of the positive
   * finite step sizes; 0 when all of them are 0 (nothing moved); NaN when none is finite */
  stepSize: number;
  /** the smallest and largest positive finite step size (NaN when none) */
  min: number;
  max: number;
  /** steps whose step size is 0 (the gradient was too small: nothing moved) */
  zeros: number;
  /** backtracks: their sum and the most in one step */
  backtracks: number;
  maxBacktracks: number;
}

export interface LineSearchView {
  /** the columns holding a searched step, ascending */
  columns: LineSearchColumn[];
  /** per heatmap column: how many searched steps it holds (for markAt) */
  counts: Uint32Array;
  /** per heatmap column: its index in `columns`, or -1 */
  index: Int32Array;
  /** searched steps inside the heatmap's step range (all drawn, one column each) */
  points: number;
  /** extent of the drawn positive finite step sizes (NaN when none) */
  lo: number;
  hi: number;
  /** the most backtracks per step of a column (its mean for a bin) */
  maxBacktracks: number;
}

/** The heatmap column holding `step`, or -1 outside [h.start, h.end]. */
export function columnOfStep(h: Heatmap, step: number): number {
  if (!h.columns || !(step >= h.start) || !(step <= h.end) || step < h.columnStart[0]) return -1;
  let lo = 0, hi = h.columns - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (h.columnStart[mid] <= step) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/** Mean backtracks per step of a column (its own count for one step). */
export function meanBacktracks(c: LineSearchColumn): number {
  return c.count ? c.backtracks / c.count : 0;
}

/** The searched steps of `ls` on the columns of `h`: each step in the column that holds it
 * (the heatmap's own step → column mapping); a column holding several (a bin) draws the
 * geometric mean of their step sizes. Steps outside the heatmap's range (zoom) are left out. */
export function lineSearchColumns(h: Heatmap, ls: LineSearch): LineSearchView {
  const counts = new Uint32Array(h.columns), index = new Int32Array(h.columns).fill(-1);
  const columns: LineSearchColumn[] = [];
  const logSums: number[] = [], positives: number[] = [];
  let points = 0;
  for (let i = 0; i < ls.steps.length; i++) {
    const step = ls.steps[i], k = columnOfStep(h, step);
    if (k < 0) continue;
    points++;
    const v = Number(ls.step_size[i]), b = Number(ls.backtracks[i]) || 0;
    let j = index[k];
    if (j < 0) {
      j = index[k] = columns.length;
      columns.push({ k, count: 0, first: step, last: step, stepSize: NaN, min: NaN, max: NaN, zeros: 0, backtracks: 0, maxBacktracks: 0 });
      logSums.push(0);
      positives.push(0);
    }
    const c = columns[j];
    counts[k]++;
    c.count++;
    c.first = Math.min(c.first, step);
    c.last = Math.max(c.last, step);
    c.backtracks += b;
    c.maxBacktracks = Math.max(c.maxBacktracks, b);
    if (v === 0) c.zeros++;
    else if (v > 0 && Number.isFinite(v)) {
      positives[j]++;
      logSums[j] += Math.log(v);
      c.min = Number.isNaN(c.min) ? v : Math.min(c.min, v);
      c.max = Number.isNaN(c.max) ? v : Math.max(c.max, v);
    }
  }
  let lo = NaN, hi = NaN, maxBacktracks = 0;
  columns.forEach((c, j) => {
    if (positives[j] === 1) c.stepSize = c.min; // exact: what /line_search says
    else if (positives[j] > 1) c.stepSize = Math.exp(logSums[j] / positives[j]);
    else if (c.zeros) c.stepSize = 0;
    if (c.stepSize > 0) {
      lo = Number.isNaN(lo) ? c.stepSize : Math.min(lo, c.stepSize);
      hi = Number.isNaN(hi) ? c.stepSize : Math.max(hi, c.stepSize);
    }
    maxBacktracks = Math.max(maxBacktracks, meanBacktracks(c));
  });
  columns.sort((a, b) => a.k - b.k);
  columns.forEach((c, j) => { index[c.k] = j; });
  return { columns, counts, index, points, lo, hi, maxBacktracks };
}

/** The tooltip of the strip over column `c` of run `run`. */
export function lineSearchLines(run: string, c: LineSearchColumn): string[] {
  const one = c.count === 1;
  const lines = [`${one ? `step ${formatStep(c.first)}` : `steps ${formatStep(c.first)}–${formatStep(c.last)}`}  ·  run ${run}`];
  if (one) {
    lines.push(c.stepSize === 0 ? "step size 0 (line search; the gradient was too small: nothing moved)" : `step size ${formatRatio(c.stepSize)} (line search)`);
    lines.push(`backtracks ${formatStep(c.backtracks)}`);
    return lines;
  }
  if (c.stepSize > 0) {
    const spread = c.min === c.max ? "" : `, ${formatRatio(c.min)}–${formatRatio(c.max)}`;
    lines.push(`step size ${formatRatio(c.stepSize)} (line search; geometric mean of ${c.count - c.zeros} steps${spread})`);
  } else {
    lines.push(`step size ${formatRatio(c.stepSize)} (line search)`);
  }
  if (c.zeros) lines.push(`${c.zeros} of ${c.count} steps with step size 0 (nothing moved)`);
  lines.push(`backtracks ${formatStep(c.backtracks)} in ${c.count} steps (at most ${formatStep(c.maxBacktracks)} in one)`);
  return lines;
}

/** The step size and backtracks of `ls` at exactly `step`, or null (binary search: steps
 * ascending). */
export function lineSearchAt(ls: LineSearch | null, step: number): { stepSize: number; backtracks: number } | null {
  if (!ls) return null;
  let lo = 0, hi = ls.steps.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (ls.steps[mid] === step) return { stepSize: Number(ls.step_size[mid]), backtracks: Number(ls.backtracks[mid]) };
    if (ls.steps[mid] < step) lo = mid + 1; else hi = mid - 1;
  }
  return null;
}
