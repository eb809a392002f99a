// Canvas drawing of a heatmap: one pixel per cell in an offscreen image, scaled up to the
// canvas' device pixels with nearest-neighbour sampling (crisp at any devicePixelRatio); the
// skipped-step marks; the line-search strip; the step axis; the PNG export's image.
import { scaleLog } from "d3-scale";
import { columnRange, Heatmap } from "./codec";
import { formatStepShort, stepTicks } from "./format";
import { LineSearchView, meanBacktracks } from "./line_search";
import type { ChartColors } from "./theme";

/** Held cells and their colors: `index` ([L][C] like the codes) is ≥ 0 where a cell is held,
 * drawn from `table` (heldColorTable) instead. */
export interface HeldPaint { index: Int32Array; table: Uint32Array }

/** Fills `out` (C x R packed RGBA) with the colors of rows `rows` of `codes` ([L][C]);
 * `table` (codeColorTable) has a color for every uint16 code; held cells take theirs from
 * `held.table`. */
export function paintCells(codes: Uint16Array, columns: number, rows: ArrayLike<number>, table: Uint32Array, out: Uint32Array, held: HeldPaint | null = null): void {
  let o = 0;
  for (let r = 0; r < rows.length; r++) {
    const base = rows[r] * columns;
    if (!held) {
      for (let k = 0; k < columns; k++) out[o++] = table[codes[base + k]];
      continue;
    }
    const index = held.index, faded = held.table;
    for (let k = 0; k < columns; k++) out[o++] = index[base + k] >= 0 ? faded[codes[base + k]] : table[codes[base + k]];
  }
}

/** Draws the heatmap of `rows` into `canvas`: one canvas pixel per cell, shown at
 * cssWidth x cssHeight CSS pixels with `image-rendering: pixelated`, so the compositor scales
 * it with nearest-neighbour sampling to the screen's device pixels (crisp at any
 * devicePixelRatio, and only columns x rows pixels to fill). */
export function drawHeatmap(
  canvas: HTMLCanvasElement, codes: Uint16Array, columns: number, rows: ArrayLike<number>,
  table: Uint32Array, cssWidth: number, cssHeight: number, held: HeldPaint | null = null,
): void {
  const w = Math.max(1, columns), h = Math.max(1, rows.length);
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== h) canvas.height = h;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  canvas.style.imageRendering = "pixelated";
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  if (!rows.length || !columns) {
    ctx.clearRect(0, 0, w, h);
    return;
  }
  const image = ctx.createImageData(columns, rows.length);
  paintCells(codes, columns, rows, table, new Uint32Array(image.data.buffer), held);
  ctx.putImageData(image, 0, 0);
}

/** Cell (row index into the shown rows, column) under CSS point (x, y), or null. */
export function cellAt(x: number, y: number, cssWidth: number, rowHeight: number, nRows: number, columns: number): { row: number; col: number } | null {
  if (x < 0 || y < 0 || x >= cssWidth) return null;
  const row = Math.floor(y / rowHeight);
  const col = Math.floor((x / cssWidth) * columns);
  if (row >= nRows || col >= columns || col < 0) return null;
  return { row, col };
}

/** The marks of the columns holding a skipped step, as [x0, x1] spans in CSS px of a strip
 * `cssWidth` wide over `columns` columns: each at least `minWidth` wide (centred on its
 * column, so a 1 px bin stays visible), overlapping ones merged. */
export function markSpans(counts: ArrayLike<number>, columns: number, cssWidth: number, minWidth = 3): [number, number][] {
  const spans: [number, number][] = [];
  if (!columns) return spans;
  const cw = cssWidth / columns, half = Math.max(cw, minWidth) / 2;
  for (let k = 0; k < columns; k++) {
    if (!counts[k]) continue;
    const c = (k + 0.5) * cw;
    const x0 = Math.max(0, c - half), x1 = Math.min(cssWidth, c + half);
    const last = spans[spans.length - 1];
    if (last && x0 <= last[1]) last[1] = Math.max(last[1], x1);
    else spans.push([x0, x1]);
  }
  return spans;
}

/** The column of the skipped-step mark under CSS x (marks as drawn by `markSpans`, the
 * nearest one when they overlap), or -1. */
export function markAt(counts: ArrayLike<number>, columns: number, cssWidth: number, x: number, minWidth = 3): number {
  if (!columns || x < 0 || x >= cssWidth) return -1;
  const cw = cssWidth / columns, half = Math.max(cw, minWidth) / 2;
  const k0 = Math.floor(x / cw), reach = Math.ceil(half / cw) + 1;
  let best = -1, bestDistance = Infinity;
  for (let k = Math.max(0, k0 - reach); k <= Math.min(columns - 1, k0 + reach); k++) {
    if (!counts[k]) continue;
    const distance = Math.abs((k + 0.5) * cw - x);
    if (distance <= half && distance < bestDistance) { best = k; bestDistance = distance; }
  }
  return best;
}

/** Sizes a strip canvas to cssWidth x cssHeight CSS px at the device's resolution (its pixels
 * w x h, set only when they changed); its 2D context, or null. */
function sizeStrip(canvas: HTMLCanvasElement, cssWidth: number, cssHeight: number): { ctx: CanvasRenderingContext2D; dpr: number; w: number; h: number } | null {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(cssWidth * dpr)), h = Math.max(1, Math.round(cssHeight * dpr));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== h) canvas.height = h;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  const ctx = canvas.getContext("2d");
  return ctx ? { ctx, dpr, w, h } : null;
}

/** Draws the skipped-step marks (`markSpans`) on `canvas`, a strip cssWidth x cssHeight CSS
 * px at the device's resolution, over a faint baseline. */
export function drawMarks(canvas: HTMLCanvasElement, spans: [number, number][], cssWidth: number, cssHeight: number, color: string, baseline: string): void {
  const sized = sizeStrip(canvas, cssWidth, cssHeight);
  if (!sized) return;
  const { ctx, dpr, w, h } = sized;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = baseline;
  ctx.fillRect(0, h - Math.max(1, Math.round(dpr)), w, Math.max(1, Math.round(dpr)));
  ctx.fillStyle = color;
  for (const [x0, x1] of spans) {
    const a = Math.floor(x0 * dpr), b = Math.ceil(x1 * dpr);
    ctx.fillRect(a, 0, Math.max(1, b - a), h);
  }
}

/** The line-search strip: step sizes on a log scale (top), backtracks as bars (bottom row). */
export const LINE_SEARCH_STEP_H = 34, LINE_SEARCH_GAP = 3, LINE_SEARCH_BACKTRACKS_H = 8;
export const LINE_SEARCH_H = LINE_SEARCH_STEP_H + LINE_SEARCH_GAP + LINE_SEARCH_BACKTRACKS_H;

/** The log domain of the strip's step sizes: their extent widened to whole decades
 * (d3-scale's nice()), a decade around a single value; null when none is positive. */
export function lineSearchDomain(lo: number, hi: number): [number, number] | null {
  if (!(lo > 0) || !(hi > 0) || !Number.isFinite(lo) || !Number.isFinite(hi)) return null;
  const s = scaleLog().domain(lo === hi ? [lo / Math.SQRT2, hi * Math.SQRT2] : [lo, hi]).nice();
  const [a, b] = s.domain();
  return [a, b];
}

/** Draws the line-search strip of `view` over `columns` heatmap columns `cssWidth` CSS px
 * wide, at the device's resolution: each column's step size at the column's centre (the
 * heatmap's columns, so a step sits over its own column) on a log scale (d3-scale scaleLog),
 * joined by a line; a step size of 0 as a tick at the bottom; below, each column's
 * backtracks (the mean per step for a bin) as a bar, its height √(backtracks / the largest). */
export function drawLineSearch(canvas: HTMLCanvasElement, view: LineSearchView, columns: number, cssWidth: number, c: ChartColors): [number, number] | null {
  const cssHeight = LINE_SEARCH_H, sized = sizeStrip(canvas, cssWidth, cssHeight);
  if (!sized) return null;
  const { ctx, dpr, w, h } = sized;
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const cw = columns ? cssWidth / columns : cssWidth, xOf = (k: number) => (k + 0.5) * cw;
  // frame of the step-size part and the baseline of the backtracks
  ctx.fillStyle = c.grid;
  ctx.fillRect(0, 0, cssWidth, 1 / dpr);
  ctx.fillRect(0, LINE_SEARCH_STEP_H - 1 / dpr, cssWidth, 1 / dpr);
  ctx.fillStyle = c.border;
  ctx.fillRect(0, cssHeight - 1 / dpr, cssWidth, 1 / dpr);
  const domain = lineSearchDomain(view.lo, view.hi);
  if (domain) {
    const y = scaleLog().domain(domain).range([LINE_SEARCH_STEP_H - 3, 3]);
    ctx.strokeStyle = c.line;
    ctx.lineWidth = 1.25;
    ctx.beginPath();
    let pen = false;
    for (const col of view.columns) {
      if (!(col.stepSize > 0)) { pen = false; continue; }
      const px = xOf(col.k), py = y(col.stepSize);
      if (pen) ctx.lineTo(px, py); else ctx.moveTo(px, py);
      pen = true;
    }
    ctx.stroke();
    if (view.columns.length * 4 <= cssWidth) {
      ctx.fillStyle = c.line;
      for (const col of view.columns) if (col.stepSize > 0) ctx.fillRect(xOf(col.k) - 1.5, y(col.stepSize) - 1.5, 3, 3);
    }
  }
  ctx.fillStyle = c.error;
  for (const col of view.columns) if (col.stepSize === 0) ctx.fillRect(xOf(col.k) - 1, LINE_SEARCH_STEP_H - 6, 2, 5);
  if (view.maxBacktracks > 0) {
    ctx.fillStyle = c.muted;
    const bw = Math.max(1, Math.min(cw - 1, 6)), top = LINE_SEARCH_STEP_H + LINE_SEARCH_GAP;
    for (const col of view.columns) {
      const b = meanBacktracks(col);
      if (!(b > 0)) continue;
      const bh = Math.max(1, Math.sqrt(b / view.maxBacktracks) * LINE_SEARCH_BACKTRACKS_H); // √: a few stay visible beside many
      ctx.fillRect(xOf(col.k) - bw / 2, top + LINE_SEARCH_BACKTRACKS_H - bh, bw, bh);
    }
  }
  return domain;
}

/** x (CSS px, 0..width) of a step through the heatmap's columns (they may be irregular). */
export function stepX(h: Heatmap, width: number, step: number): number {
  let lo = 0, hi = h.columns - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (h.columnStart[mid] <= step) lo = mid; else hi = mid - 1;
  }
  const [a, b] = columnRange(h, lo);
  const frac = Math.min(1, Math.max(0, (step - a + 0.5) / (b - a + 1)));
  return ((lo + frac) / h.columns) * width;
}

/** The step axis under a heatmap `width` CSS px wide: about one tick per 90 px, none closer
 * than 50 px to the previous one. */
export function axisTicks(h: Heatmap, width: number): { x: number; label: string }[] {
  const out: { x: number; label: string }[] = [];
  let lastX = -Infinity;
  for (const t of stepTicks(h.start, h.end, Math.max(2, Math.floor(width / 90)))) {
    const x = stepX(h, width, t);
    if (x - lastX < 50) continue;
    lastX = x;
    out.push({ x, label: formatStepShort(t) });
  }
  return out;
}

export interface HeatmapImage {
  title: string;
  labels: string[];
  /** the cells, drawn by drawHeatmap at cssWidth x rows*rowHeight */
  cells: HTMLCanvasElement;
  cssWidth: number;
  rowHeight: number;
  labelWidth: number;
  marks: [number, number][] | null;
  ticks: { x: number; label: string }[];
  colors: ChartColors;
}

/** The PNG export of one heatmap: title, row labels (cut at the start when too long), cells,
 * skipped-step marks and step axis, at 2x. */
export function drawHeatmapImage(out: HTMLCanvasElement, img: HeatmapImage): void {
  const dpr = 2, L = img.labelWidth, rowH = img.rowHeight, n = img.labels.length;
  const W = L + img.cssWidth + 16, H = 28 + n * rowH + 24;
  out.width = W * dpr; out.height = H * dpr;
  const ctx = out.getContext("2d")!;
  ctx.scale(dpr, dpr);
  ctx.fillStyle = img.colors.bg; ctx.fillRect(0, 0, W, H);
  ctx.fillStyle = img.colors.text;
  ctx.font = "500 13px Roboto, Arial, sans-serif";
  ctx.textBaseline = "middle";
  ctx.fillText(img.title, 8, 14);
  ctx.font = `${Math.min(12, rowH - 3)}px Roboto, Arial, sans-serif`;
  ctx.textAlign = "right";
  img.labels.forEach((label, r) => {
    let text = label;
    while (text.length > 4 && ctx.measureText(text).width > L - 10) text = "…" + text.slice(2);
    ctx.fillText(text, L - 6, 28 + r * rowH + rowH / 2);
  });
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(img.cells, L, 28, img.cssWidth, n * rowH);
  if (img.marks) {
    ctx.fillStyle = img.colors.skip;
    for (const [x0, x1] of img.marks) ctx.fillRect(L + x0, 21, x1 - x0, 5);
  }
  ctx.textAlign = "center";
  ctx.fillStyle = img.colors.muted;
  ctx.font = "11px Roboto, Arial, sans-serif";
  for (const t of img.ticks) ctx.fillText(t.label, L + t.x, 28 + n * rowH + 12);
}
