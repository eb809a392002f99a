// Exports of what a heatmap block shows: CSV and JSON of the view (format.ts writes them), the
// heatmap as a PNG (draw.ts draws it). The run's full data comes from the backend's /export
// (links in the block's head).
import { el, safeFileName } from "./dom";
import { axisTicks, drawHeatmapImage, markSpans } from "./draw";
import { formatStep, viewCsv, viewJson } from "./format";
import type { HeatmapBlock } from "./heatmap_block";
import { MARK_MIN_WIDTH } from "./heatmap_block";
import type { ChartColors } from "./theme";

export function download(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

export function exportView(block: HeatmapBlock, format: "csv" | "json"): void {
  const h = block.h;
  if (!h) return;
  const text = format === "csv" ? viewCsv(h, block.runIndex, block.shown) : viewJson(h, block.runIndex, block.shown);
  const type = format === "csv" ? "text/csv" : "application/json";
  download(new Blob([text], { type }), `${safeFileName(block.run)}-wur-view.${format}`);
}

export function exportPng(block: HeatmapBlock, labelWidth: number, colors: ChartColors): void {
  const h = block.h, table = block.table;
  if (!h || !table) return;
  const run = h.runs[block.runIndex];
  const rowHeight = Math.max(block.rowHeight, 12);
  const cells = document.createElement("canvas");
  block.drawCells(cells, table, block.specs.length * rowHeight);
  const out = document.createElement("canvas");
  drawHeatmapImage(out, {
    title: `${run.run} — weight-update ratios, steps ${formatStep(h.start)}–${formatStep(h.end)}`,
    labels: block.specs.map((s) => (s.kind === "group" ? `${s.name} (worst of ${s.members.length})` : s.name)),
    cells, cssWidth: block.width, rowHeight, labelWidth,
    marks: block.hasMarks ? markSpans(run.skipped, h.columns, block.width, MARK_MIN_WIDTH) : null,
    ticks: axisTicks(h, block.width), colors,
  });
  out.toBlob((blob) => { if (blob) download(blob, `${safeFileName(run.run)}-wur.png`); }, "image/png");
}
