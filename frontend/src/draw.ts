// Canvas drawing of a heatmap: one pixel per cell in an offscreen image, scaled up to the
// canvas' device pixels with nearest-neighbour sampling (crisp at any devicePixelRatio).
import { colorOfCode } from "./color";

/** Fills `out` (C x R packed RGBA) with the colors of rows `rows` of `codes` ([L][C]). */
export function paintCells(codes: Uint16Array, columns: number, rows: ArrayLike<number>, table: Uint32Array, out: Uint32Array): void {
  let o = 0;
  const n = table.length;
  const fallback = table[5];
  for (let r = 0; r < rows.length; r++) {
    const base = rows[r] * columns;
    for (let k = 0; k < columns; k++) {
      const code = codes[base + k];
      out[o++] = code < n ? table[code] : fallback;
    }
  }
}

/** Draws the heatmap of `rows` into `canvas`: one canvas pixel per cell, shown at
 * cssWidth x cssHeight CSS pixels with `image-rendering: pixelated`, so the compositor scales
 * it with nearest-neighbour sampling to the screen's device pixels (crisp at any
 * devicePixelRatio, and only columns x rows pixels to fill). */
export function drawHeatmap(
  canvas: HTMLCanvasElement, codes: Uint16Array, columns: number, rows: ArrayLike<number>,
  table: Uint32Array, cssWidth: number, cssHeight: number,
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
  paintCells(codes, columns, rows, table, new Uint32Array(image.data.buffer));
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
