// The layer detail: ratio over time (log y, band shaded), learning rate on the same step
// axis, and the histogram density (steps x log10 ratio). Small hand-drawn canvases.
import { interpolateViridis } from "d3-scale-chromatic";
import { Band } from "./color";
import { decadeTicks, formatPow10, formatStepShort, stepTicks } from "./format";
import type { ChartColors } from "./theme";

export const PAD = { left: 52, right: 12, top: 8, bottom: 22 };

/** The step under CSS x of a chart `width` wide over steps [x0, x1]. */
export function stepAtX(x: number, x0: number, x1: number, width: number): number {
  return x0 + ((x - PAD.left) / (width - PAD.left - PAD.right)) * (x1 - x0);
}

/** Index of the step nearest to `step` in sorted `steps` (-1 if empty). */
export function nearestIndex(steps: number[], step: number): number {
  if (!steps.length) return -1;
  let lo = 0, hi = steps.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] < step) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && step - steps[lo - 1] <= steps[lo] - step ? lo - 1 : lo;
}

/** The indices [i0, i1) of sorted `steps` inside [x0, x1] (binary search: /series and
 * /histograms answer in step order). */
export function rangeIndices(steps: number[], x0: number, x1: number): [number, number] {
  const bound = (x: number, strict: boolean) => {
    let lo = 0, hi = steps.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (strict ? steps[mid] <= x : steps[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  };
  return [bound(x0, false), Math.max(bound(x0, false), bound(x1, true))];
}

function setup(canvas: HTMLCanvasElement, width: number, height: number) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px Roboto, Arial, sans-serif";
  return ctx;
}

function xAxis(ctx: CanvasRenderingContext2D, x0: number, x1: number, width: number, height: number, c: ChartColors) {
  const plotW = width - PAD.left - PAD.right;
  const sx = (s: number) => PAD.left + ((s - x0) / Math.max(1e-9, x1 - x0)) * plotW;
  ctx.fillStyle = c.muted;
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const t of stepTicks(x0, x1, Math.max(2, Math.floor(plotW / 80)))) {
    ctx.fillText(formatStepShort(t), sx(t), height - PAD.bottom + 5);
    ctx.fillRect(Math.round(sx(t)), height - PAD.bottom, 1, 3);
  }
  return sx;
}

function logYAxis(ctx: CanvasRenderingContext2D, lo: number, hi: number, width: number, height: number, c: ChartColors) {
  const plotH = height - PAD.top - PAD.bottom;
  const sy = (v: number) => PAD.top + (1 - (v - lo) / (hi - lo)) * plotH;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const k of decadeTicks(lo, hi, Math.max(2, Math.floor(plotH / 22)))) {
    ctx.fillStyle = c.grid;
    ctx.fillRect(PAD.left, Math.round(sy(k)), width - PAD.left - PAD.right, 1);
    ctx.fillStyle = c.muted;
    ctx.fillText(formatPow10(k), PAD.left - 6, sy(k));
  }
  return sy;
}

export interface LogSeries { steps: number[]; values: number[] }

/** log10 range of the positive finite values, padded; null if none. */
function logRange(values: number[], extra: number[] = []): [number, number] | null {
  let lo = Infinity, hi = -Infinity;
  for (const v of values.concat(extra)) {
    if (v > 0 && Number.isFinite(v)) {
      const l = Math.log10(v);
      if (l < lo) lo = l;
      if (l > hi) hi = l;
    }
  }
  if (lo === Infinity) return null;
  if (hi - lo < 1) { const m = (hi + lo) / 2; lo = m - 0.5; hi = m + 0.5; }
  return [Math.floor(lo * 4) / 4 - 0.1, Math.ceil(hi * 4) / 4 + 0.1];
}

/** A log-y line chart over steps [x0, x1]; `band` shaded when given. Non-finite and zero
 * values are marked (NaN and +inf in the error color on top, 0 at the bottom). */
export function drawLogLine(canvas: HTMLCanvasElement, s: LogSeries, x0: number, x1: number, width: number, height: number, c: ChartColors, band?: Band): void {
  const ctx = setup(canvas, width, height);
  const range = logRange(s.values, band ? [band.low, band.high] : []);
  const sx = xAxis(ctx, x0, x1, width, height, c);
  if (!range) {
    ctx.fillStyle = c.muted;
    ctx.textAlign = "left";
    ctx.fillText("no positive finite value to plot", PAD.left + 4, PAD.top + 12);
    return;
  }
  const [lo, hi] = range;
  const sy = logYAxis(ctx, lo, hi, width, height, c);
  const plotW = width - PAD.left - PAD.right;
  if (band) {
    const y0 = Math.max(PAD.top, sy(Math.log10(band.high)));
    const y1 = Math.min(height - PAD.bottom, sy(Math.log10(band.low)));
    ctx.fillStyle = c.band;
    if (y1 > y0) ctx.fillRect(PAD.left, y0, plotW, y1 - y0);
    ctx.strokeStyle = c.bandLine;
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    const yt = sy(Math.log10(band.target));
    ctx.moveTo(PAD.left, yt);
    ctx.lineTo(PAD.left + plotW, yt);
    ctx.stroke();
    ctx.setLineDash([]);
  }
  ctx.save();
  ctx.beginPath();
  ctx.rect(PAD.left, PAD.top, plotW, height - PAD.top - PAD.bottom);
  ctx.clip();
  ctx.strokeStyle = c.line;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let pen = false;
  for (let i = 0; i < s.steps.length; i++) {
    const v = s.values[i];
    if (!(v > 0 && Number.isFinite(v))) { pen = false; continue; }
    const x = sx(s.steps[i]), y = sy(Math.log10(v));
    if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    pen = true;
  }
  ctx.stroke();
  if (s.steps.length < 200) {
    ctx.fillStyle = c.line;
    for (let i = 0; i < s.steps.length; i++) {
      const v = s.values[i];
      if (v > 0 && Number.isFinite(v)) ctx.fillRect(sx(s.steps[i]) - 1.5, sy(Math.log10(v)) - 1.5, 3, 3);
    }
  }
  ctx.restore();
  for (let i = 0; i < s.steps.length; i++) {
    const v = s.values[i];
    const x = sx(s.steps[i]);
    if (Number.isNaN(v) || v === Infinity) {
      ctx.fillStyle = c.error;
      ctx.fillRect(x - 1, PAD.top, 2, 6);
    } else if (v === 0) {
      ctx.fillStyle = c.text;
      ctx.fillRect(x - 1, height - PAD.bottom - 6, 2, 6);
    }
  }
}

export interface Density { steps: number[]; edges: number[]; firstBin: number; counts: number[][] }

/** Steps x log10(ratio) density: one column per histogram, each normalised to its max. */
export function drawDensity(canvas: HTMLCanvasElement, d: Density, x0: number, x1: number, width: number, height: number, c: ChartColors): { lo: number; hi: number } | null {
  const ctx = setup(canvas, width, height);
  const sx = xAxis(ctx, x0, x1, width, height, c);
  const nb = d.edges.length - 1;
  if (nb <= 0 || !d.steps.length) return null;
  // rows with any count, to zoom the y axis onto the populated bins
  let bLo = nb, bHi = -1;
  for (const row of d.counts) for (let b = 0; b < nb; b++) if ((row[d.firstBin + b] ?? 0) > 0) { bLo = Math.min(bLo, b); bHi = Math.max(bHi, b); }
  if (bHi < 0) { ctx.fillStyle = c.muted; ctx.fillText("no finite positive ratios in the histograms", PAD.left + 4, PAD.top + 12); return null; }
  bLo = Math.max(0, bLo - 1); bHi = Math.min(nb - 1, bHi + 1);
  const lo = Math.log10(d.edges[bLo]), hi = Math.log10(d.edges[bHi + 1]);
  const sy = logYAxis(ctx, lo, hi, width, height, c);
  const plotW = width - PAD.left - PAD.right;
  ctx.save();
  ctx.beginPath();
  ctx.rect(PAD.left, PAD.top, plotW, height - PAD.top - PAD.bottom);
  ctx.clip();
  for (let i = 0; i < d.steps.length; i++) {
    const row = d.counts[i];
    let max = 0;
    for (let b = bLo; b <= bHi; b++) max = Math.max(max, row[d.firstBin + b] ?? 0);
    if (!max) continue;
    const xa = sx(d.steps[i]);
    const xb = i + 1 < d.steps.length ? sx(d.steps[i + 1]) : Math.max(xa + 2, sx(x1));
    for (let b = bLo; b <= bHi; b++) {
      const n = row[d.firstBin + b] ?? 0;
      if (!n) continue;
      ctx.fillStyle = interpolateViridis(0.15 + 0.85 * (n / max));
      const ya = sy(Math.log10(d.edges[b + 1])), yb = sy(Math.log10(d.edges[b]));
      ctx.fillRect(xa, ya, Math.max(1, xb - xa), Math.max(1, yb - ya));
    }
  }
  ctx.restore();
  return { lo, hi };
}

/** log10 value at CSS y of a chart `height` tall whose y axis spans [lo, hi]. */
export function log10AtY(y: number, lo: number, hi: number, height: number): number {
  return lo + (1 - (y - PAD.top) / (height - PAD.top - PAD.bottom)) * (hi - lo);
}

/** The bucket k with edges[k] <= 10^v < edges[k+1], or -1 outside. */
export function bucketOf(edges: number[], log10v: number): number {
  const v = Math.pow(10, log10v);
  if (!(v >= edges[0]) || !(v < edges[edges.length - 1])) return -1;
  let lo = 0, hi = edges.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (edges[mid] <= v) lo = mid; else hi = mid - 1;
  }
  return lo;
}
