// One run's heatmap block: head (name, counts, exports), the line-search strip (runs trained
// with tb_wur_plugin.armijo), the skipped-step marks, row labels,
// the canvas with its overlays (drag selection, keyboard cursor, flagged-row highlight) and the
// step axis; each flagged row's label marked (updateFlags). The DOM and its listeners are built
// once per run; update() changes it in place.
import { api, LineSearch, Reason, RunInfo } from "./api";
import { columnRange, Heatmap } from "./codec";
import { DamageNotice } from "./damage";
import { axisTicks, cellAt, drawHeatmap, drawLineSearch, drawMarks, LINE_SEARCH_H, markAt, markSpans } from "./draw";
import { el, nameNodes, safeFileName, sameKeys, setAttrs } from "./dom";
import { flagMarkTitle, isNanFlag, rowFlag } from "./flagged";
import { formatPow10, formatShortRatio, formatStep, skippedLines, tooltipLines } from "./format";
import { blockRows, RowSpec } from "./group";
import { SKIPPED_MEANING } from "./legend";
import { lineSearchColumns, lineSearchLines, LineSearchView } from "./line_search";
import type { FlagRow, RowRef, Zoom } from "./state";
import type { ChartColors } from "./theme";

const MARKS_HEIGHT = 7; // the strip of skipped-step marks above a heatmap, CSS px
export const MARK_MIN_WIDTH = 3;
const LINE_SEARCH_HOVER_WIDTH = 7; // the pointer finds a strip point this close, CSS px

export interface BlockHost {
  showLines(lines: string[], x: number, y: number): void;
  hideTooltip(): void;
  openDetail(ref: RowRef, scroll: boolean): void;
  setZoom(zoom: Zoom | null): void;
  isZoomed(): boolean;
  toggleGroup(name: string): void;
  exportView(block: HeatmapBlock, format: "csv" | "json"): void;
  exportPng(block: HeatmapBlock): void;
}

export interface BlockView {
  h: Heatmap;
  runIndex: number;
  info: RunInfo | undefined;
  filter: RegExp | null;
  grouped: boolean;
  collapsed: ReadonlySet<string>;
  targetLog10: number;
  table: Uint32Array;
  /** the held cells' colors (ColorTables.heldTable), when the run has any */
  heldTable: Uint32Array | null;
  width: number;
  color: string;
  colors: ChartColors;
  /** the run's /line_search, when it has one */
  lineSearch: LineSearch | null;
  /** the metric of the ratios shown: the export links ask for it */
  metric: string;
}

export class HeatmapBlock {
  readonly section: HTMLElement;
  readonly canvas: HTMLCanvasElement;
  h: Heatmap | null = null;
  runIndex = 0;
  shown: number[] = [];
  specs: RowSpec[] = [];
  display: { codes: Uint16Array; source: Int32Array; held: Int32Array | null } | null = null;
  rowHeight = 18;
  width = 0;
  table: Uint32Array | null = null;
  heldTable: Uint32Array | null = null;
  private readonly swatch = el("span", { class: "wur-swatch" });
  private readonly meta = el("span", { class: "wur-meta" });
  private readonly marksTitle = el("div", { class: "wur-marks-title", text: "skipped", title: SKIPPED_MEANING });
  private readonly marks: HTMLCanvasElement;
  private readonly lineSearchTitle = el("div", { class: "wur-ls-title", title: "The stochastic Armijo line search of this run (tb_wur_plugin.armijo): the step size of each searched step on a log scale, its backtracks (rejected trials) as bars below" });
  private readonly lineSearchHigh = el("span", { class: "wur-ls-high" });
  private readonly lineSearchLow = el("span", { class: "wur-ls-low" });
  private readonly lineSearchBacktracks = el("span", { class: "wur-ls-bt" });
  private readonly lineSearch: HTMLCanvasElement;
  private lineSearchView: LineSearchView | null = null;
  private lineSearchKey: unknown[] = [];
  private readonly labels = el("div", { class: "wur-labels" });
  private readonly selection = el("div", { class: "wur-overlay wur-selection", hidden: true });
  private readonly cursor = el("div", { class: "wur-overlay", hidden: true });
  private readonly highlightBox = el("div", { class: "wur-overlay wur-row-highlight", "data-testid": "wur-row-highlight" });
  private readonly plot: HTMLElement;
  private readonly axis = el("div", { class: "wur-axis", "aria-hidden": "true" });
  private readonly grid: HTMLElement;
  private readonly noRows = el("p", { class: "wur-meta", text: "No layer matches the filter.", hidden: true });
  private readonly damage = new DamageNotice();
  private rowsKey: unknown[] = [];
  private drawKey: unknown[] = [];
  private flags: ReadonlyMap<string, FlagRow> = new Map();
  private reasons: readonly Reason[] = [];
  private drag: { col: number; moved: boolean } | null = null;
  private keyCursor = { row: 0, col: 0 };
  private clickTimer = 0;
  private readonly onWindowMouseUp = (e: MouseEvent) => this.onMouseUp(e);

  private readonly exportCsv: HTMLAnchorElement;
  private readonly exportJson: HTMLAnchorElement;

  constructor(readonly run: string, private readonly host: BlockHost) {
    this.exportCsv = el("a", { class: "wur-button", download: `${safeFileName(run)}-wur.csv`, "data-testid": "wur-export-csv", text: "CSV", title: "Every logged ratio of this run (of the metric shown), as CSV" });
    this.exportJson = el("a", { class: "wur-button", download: `${safeFileName(run)}-wur.json`, "data-testid": "wur-export-json", text: "JSON", title: "Every logged ratio of this run (of the metric shown), as JSON" });
    this.canvas = el("canvas", { "data-testid": "wur-heatmap", "data-run": run, tabindex: 0, role: "img" });
    this.marks = el("canvas", { class: "wur-marks", "data-testid": "wur-skipped-marks", "data-run": run, role: "img" });
    this.lineSearch = el("canvas", { class: "wur-ls", "data-testid": "wur-line-search", "data-run": run, role: "img" });
    this.lineSearchTitle.append(this.lineSearchHigh, el("span", { class: "wur-ls-name", text: "step size" }), this.lineSearchLow, this.lineSearchBacktracks);
    this.cursor.style.outline = "2px solid var(--focus)";
    this.plot = el("div", { class: "wur-plot" }, this.canvas, this.selection, this.cursor);
    this.grid = el("div", { class: "wur-grid" }, this.labels, this.plot, el("div", { class: "wur-axis-title", text: "step" }), this.axis);
    const button = (text: string, testid: string, title: string, onClick: () => void) => {
      const b = el("button", { type: "button", text, "data-testid": testid, title });
      b.addEventListener("click", onClick);
      return b;
    };
    const head = el("div", { class: "wur-block-head" },
      this.swatch, el("h3", { title: run }, ...nameNodes(run)), this.meta, el("span", { class: "wur-spacer" }),
      this.exportCsv, this.exportJson,
      button("CSV of view", "wur-export-view", "The cells shown (filtered layers, zoomed range, binned columns), as CSV", () => host.exportView(this, "csv")),
      button("JSON of view", "wur-export-view-json", "The cells shown (filtered layers, zoomed range, binned columns), as JSON", () => host.exportView(this, "json")),
      button("PNG", "wur-export-png", "This heatmap as a PNG image", () => host.exportPng(this)),
    );
    this.section = el("section", { class: "wur-block", "aria-label": `Run ${run}` }, head, this.damage.element, this.grid, this.noRows);
    this.wire();
  }

  /** Removes the block's window listener (the block's run is no longer shown). */
  destroy(): void {
    window.removeEventListener("mouseup", this.onWindowMouseUp);
    clearTimeout(this.clickTimer);
    this.section.remove();
  }

  update(v: BlockView): void {
    const { h } = v;
    const run = h.runs[v.runIndex];
    const rowsKey = [h, v.filter, v.grouped, [...v.collapsed].join("\n"), v.targetLog10];
    const rowsChanged = !sameKeys(rowsKey, this.rowsKey);
    this.h = h;
    this.runIndex = v.runIndex;
    this.width = v.width;
    this.table = v.table;
    this.heldTable = v.heldTable;
    this.damage.update(this.run, v.info);
    this.exportCsv.href = api.exportUrl(this.run, "csv", v.metric);
    this.exportJson.href = api.exportUrl(this.run, "json", v.metric);
    if (rowsChanged) {
      Object.assign(this, blockRows(h, v.runIndex, v.filter, v.grouped, v.collapsed, v.targetLog10));
      this.rowsKey = rowsKey;
      const n = this.specs.length;
      this.rowHeight = n > 120 ? 8 : n > 60 ? 12 : 18;
      this.updateLabels();
    }
    const n = this.specs.length;
    const skippedColumns: number[] = [];
    run.skipped.forEach((count, k) => { if (count) skippedColumns.push(k); });
    this.updateHead(v, run.tags.length);
    setAttrs(this.canvas, {
      "data-rows": n, "data-cols": h.columns, "data-start": h.start, "data-end": h.end, "data-reduction": h.reduction,
      "data-skipped-columns": skippedColumns.join(","), "data-held-cells": run.heldCells,
      "aria-label": `Heatmap of ${run.run}: ${n} rows by ${h.columns} step columns. Arrow keys move, Enter opens the layer.`,
    });
    const drawKey = [h, this.specs, v.table, v.heldTable, v.width];
    if (!sameKeys(drawKey, this.drawKey)) {
      this.drawCells(this.canvas, v.table, n * this.rowHeight);
      this.drawKey = drawKey;
    }
    // marks for every run that has skipped steps (also when the zoomed range holds none, so
    // the heatmap does not jump)
    const withMarks = (v.info?.skipped_steps ?? 0) > 0 || skippedColumns.length > 0;
    if (withMarks) {
      this.marks.setAttribute("aria-label", `Skipped steps of ${run.run}: ${skippedColumns.length} of the ${h.columns} columns hold a step the optimizer skipped`);
      drawMarks(this.marks, markSpans(run.skipped, h.columns, v.width, MARK_MIN_WIDTH), v.width, MARKS_HEIGHT, v.colors.skip, v.colors.border);
    }
    this.updateLineSearch(v.lineSearch, v.colors, withMarks);
    this.updateAxis(h, v.width);
    this.grid.hidden = !n;
    this.noRows.hidden = !!n;
    this.canvas.hidden = !n; // kept (0 rows) for tests and tools
  }

  /** The line-search strip over the heatmap's columns: built once, redrawn when its data,
   * the heatmap (columns), the width or the theme changed; removed without data. */
  updateLineSearch(data: LineSearch | null, colors: ChartColors, withMarks = this.marks.isConnected): void {
    const h = this.h;
    const view = data && h ? this.lineSearchView : null;
    const key = data && h ? [data, h, this.width, colors.line, colors.muted, colors.grid, colors.border, colors.error] : [];
    if (!data || !h) {
      this.lineSearchView = null;
    } else if (!sameKeys(key, this.lineSearchKey) || !view) {
      const v = (this.lineSearchView = lineSearchColumns(h, data));
      const domain = drawLineSearch(this.lineSearch, v, h.columns, this.width, colors);
      setAttrs(this.lineSearch, {
        "data-points": v.points, "data-columns": v.columns.length,
        "aria-label": `Line search of ${this.run}: step size (log scale) and backtracks of ${v.points} searched steps in ${v.columns.length} of the ${h.columns} columns`,
      });
      this.lineSearchHigh.textContent = domain ? decadeLabel(domain[1]) : "";
      this.lineSearchLow.textContent = domain ? decadeLabel(domain[0]) : "";
      this.lineSearchBacktracks.textContent = `backtracks ≤ ${Number(v.maxBacktracks.toPrecision(3))}`;
    }
    this.lineSearchKey = key;
    // the optional rows above the heatmap, in order: line search, skipped-step marks
    const want: Element[] = [];
    if (this.lineSearchView) want.push(this.lineSearchTitle, this.lineSearch);
    if (withMarks) want.push(this.marksTitle, this.marks);
    const head = Array.from(this.grid.children).slice(0, Array.prototype.indexOf.call(this.grid.children, this.labels));
    if (!sameKeys(head, want)) {
      for (const x of [this.lineSearchTitle, this.lineSearch, this.marksTitle, this.marks]) if (!want.includes(x)) x.remove();
      this.grid.prepend(...want);
    }
  }

  get hasLineSearch(): boolean {
    return this.lineSearch.isConnected;
  }

  get hasMarks(): boolean {
    return this.marks.isConnected;
  }

  /** Draws the shown rows' cells on `canvas` (also the PNG export's). */
  drawCells(canvas: HTMLCanvasElement, table: Uint32Array, cssHeight: number): void {
    const h = this.h!, run = h.runs[this.runIndex];
    const heldPaint = (index: Int32Array | null) => (index && this.heldTable ? { index, table: this.heldTable } : null);
    if (this.display) drawHeatmap(canvas, this.display.codes, h.columns, this.specs.map((_, i) => i), table, this.width, cssHeight, heldPaint(this.display.held));
    else drawHeatmap(canvas, run.codes, h.columns, this.specs.map((x) => x.tag), table, this.width, cssHeight, heldPaint(run.heldIndex));
  }

  /** Selected and highlighted row labels, the highlight box; returns the box when shown. */
  updateSelection(selected: RowRef | null, highlight: RowRef | null): HTMLElement | null {
    const rowOf = (ref: RowRef | null) => (ref?.run === this.run ? this.specs.findIndex((x) => x.kind === "tag" && x.name === ref.tag) : -1);
    const sel = rowOf(selected), hi = rowOf(highlight);
    Array.from(this.labels.children).forEach((label, r) => {
      label.classList.toggle("wur-selected", r === sel);
      label.classList.toggle("wur-highlighted", r === hi);
    });
    if (hi < 0) {
      this.highlightBox.remove();
      return null;
    }
    this.highlightBox.style.top = `${hi * this.rowHeight - 2}px`;
    this.highlightBox.style.height = `${this.rowHeight + 4}px`;
    if (!this.highlightBox.isConnected) this.plot.append(this.highlightBox);
    return this.highlightBox;
  }

  /** Marks the label of each flagged row (`flags`: the run's, by tag; flagged.ts): a dot (its
   * title the flag in words) and `data-flagged` (the reason); a group header for its first
   * flagged member. */
  updateFlags(flags: ReadonlyMap<string, FlagRow>, reasons: readonly Reason[]): void {
    this.flags = flags;
    this.reasons = reasons;
    this.markFlaggedLabels();
  }

  /** The label of the row showing `tag`: its own, else its collapsed group's; null when it is
   * not shown (filtered out). */
  rowLabel(tag: string): HTMLElement | null {
    const tags = this.h?.runs[this.runIndex].tags ?? [];
    let row = this.specs.findIndex((x) => x.kind === "tag" && x.name === tag);
    if (row < 0) row = this.specs.findIndex((x) => x.kind === "group" && x.members.some((i) => tags[i] === tag));
    return row < 0 ? null : (this.labels.children[row] as HTMLElement | undefined) ?? null;
  }

  private markFlaggedLabels(): void {
    const tags = this.h?.runs[this.runIndex].tags ?? [];
    this.specs.forEach((spec, r) => {
      const label = this.labels.children[r] as HTMLElement | undefined;
      if (!label) return;
      const flag = tags.length ? rowFlag(spec, tags, this.flags) : null;
      let mark = label.querySelector<HTMLElement>(".wur-flag-mark");
      if (!flag) {
        label.removeAttribute("data-flagged");
        mark?.remove();
        return;
      }
      setAttrs(label, { "data-flagged": flag.reason });
      // first: at the right of a tag's name (its label runs right to left), before a group's
      if (!mark) label.prepend((mark = el("span", { class: "wur-flag-mark", "aria-hidden": "true" })));
      mark.classList.toggle("wur-flag-mark-nan", isNanFlag(flag));
      setAttrs(mark, { title: flagMarkTitle(flag, this.reasons, spec.kind === "group") });
    });
  }

  private updateHead(v: BlockView, tags: number): void {
    this.swatch.style.background = v.color;
    const info = v.info, skipped = info?.skipped_steps ?? 0;
    this.meta.textContent = `${this.shown.length} of ${tags} variables`
      + (info?.last_step != null ? ` · steps ${formatStep(info.first_step ?? 0)}–${formatStep(info.last_step)}` : "")
      + (skipped ? ` · ${skipped} skipped step${skipped === 1 ? "" : "s"}` : "");
  }

  /** The row labels, updated in place (buttons reused; one delegated click listener). */
  private updateLabels(): void {
    this.labels.style.setProperty("--row-height", `${this.rowHeight}px`);
    this.labels.style.setProperty("--row-font", `${Math.max(7, Math.min(12, this.rowHeight - 4))}px`);
    const buttons = this.labels.children;
    this.specs.forEach((spec, r) => {
      let label = buttons[r] as HTMLButtonElement | undefined;
      if (!label) label = this.labels.appendChild(el("button", { type: "button" }));
      setLabel(label, spec);
    });
    while (buttons.length > this.specs.length) buttons[buttons.length - 1].remove();
    this.markFlaggedLabels();
  }

  private updateAxis(h: Heatmap, width: number): void {
    this.axis.style.width = `${width}px`;
    this.axis.replaceChildren(...axisTicks(h, width).map(({ x, label }) => {
      const tick = el("span", { class: "wur-tick", text: label });
      tick.style.left = `${x}px`;
      return tick;
    }));
  }

  /** The tag index shown at display row r, column k (a group header shows its worst member). */
  private tagAt(r: number, k: number): number {
    const spec = this.specs[r];
    return spec.kind === "tag" ? spec.tag : this.display!.source[r * this.h!.columns + k];
  }

  private refAt(row: number, col: number): RowRef {
    const run = this.h!.runs[this.runIndex];
    return { run: run.run, tag: run.tags[this.tagAt(row, col)] };
  }

  private locate(e: MouseEvent) {
    const rect = this.canvas.getBoundingClientRect();
    return this.h ? cellAt(e.clientX - rect.left, e.clientY - rect.top, rect.width, this.rowHeight, this.specs.length, this.h.columns) : null;
  }

  private wire(): void {
    const c = this.canvas;
    this.labels.addEventListener("click", (e) => {
      const label = (e.target as Element).closest("button");
      const spec = label ? this.specs[Array.prototype.indexOf.call(this.labels.children, label)] : undefined;
      if (!spec) return;
      if (spec.kind === "group") this.host.toggleGroup(spec.name);
      else this.host.openDetail({ run: this.run, tag: spec.name }, true);
    });
    c.addEventListener("mousemove", (e) => {
      const cell = this.locate(e);
      if (this.drag && cell) {
        if (cell.col !== this.drag.col) this.drag.moved = true;
        this.showSelection(this.drag.col, cell.col);
      }
      if (cell) this.showTooltip(cell.row, cell.col, e.clientX, e.clientY);
      else this.host.hideTooltip();
    });
    c.addEventListener("mouseleave", () => this.host.hideTooltip());
    c.addEventListener("mousedown", (e) => {
      const cell = e.button === 0 ? this.locate(e) : null;
      if (!cell) return;
      e.preventDefault();
      c.focus({ preventScroll: true });
      this.drag = { col: cell.col, moved: false };
    });
    c.addEventListener("dblclick", (e) => {
      e.preventDefault();
      clearTimeout(this.clickTimer);
      if (this.host.isZoomed()) this.host.setZoom(null);
    });
    c.addEventListener("keydown", (e) => this.onKey(e));
    c.addEventListener("focus", () => this.moveCursor(this.keyCursor.row, this.keyCursor.col));
    c.addEventListener("blur", () => { this.cursor.hidden = true; this.host.hideTooltip(); });
    this.marks.addEventListener("mousemove", (e) => {
      if (!this.h) return;
      const rect = this.marks.getBoundingClientRect();
      const k = markAt(this.h.runs[this.runIndex].skipped, this.h.columns, rect.width, e.clientX - rect.left, MARK_MIN_WIDTH);
      if (k >= 0) this.host.showLines(skippedLines(this.h, this.runIndex, k), e.clientX, e.clientY);
      else this.host.hideTooltip();
    });
    this.marks.addEventListener("mouseleave", () => this.host.hideTooltip());
    this.lineSearch.addEventListener("mousemove", (e) => {
      const v = this.lineSearchView;
      if (!v || !this.h) return;
      const rect = this.lineSearch.getBoundingClientRect();
      const k = markAt(v.counts, this.h.columns, rect.width, e.clientX - rect.left, LINE_SEARCH_HOVER_WIDTH);
      if (k >= 0) this.host.showLines(lineSearchLines(this.run, v.columns[v.index[k]]), e.clientX, e.clientY);
      else this.host.hideTooltip();
    });
    this.lineSearch.addEventListener("mouseleave", () => this.host.hideTooltip());
    window.addEventListener("mouseup", this.onWindowMouseUp);
  }

  private onMouseUp(e: MouseEvent): void {
    const drag = this.drag, h = this.h;
    this.drag = null;
    if (!drag || !h) return;
    this.selection.hidden = true;
    const rect = this.canvas.getBoundingClientRect();
    const x = Math.min(rect.width - 0.01, Math.max(0, e.clientX - rect.left));
    const col = Math.floor((x / rect.width) * h.columns);
    if (drag.moved && col !== drag.col) {
      const a = Math.min(col, drag.col), b = Math.max(col, drag.col);
      this.host.setZoom({ start: columnRange(h, a)[0], end: columnRange(h, b)[1] });
      return;
    }
    const cell = cellAt(e.clientX - rect.left, e.clientY - rect.top, rect.width, this.rowHeight, this.specs.length, h.columns);
    if (!cell) return;
    // wait a moment: the click may be the first half of a double-click (reset zoom)
    const ref = this.refAt(cell.row, cell.col);
    clearTimeout(this.clickTimer);
    this.clickTimer = window.setTimeout(() => this.host.openDetail(ref, true), 260);
  }

  private showSelection(a: number, b: number): void {
    const cols = this.h!.columns;
    const lo = Math.min(a, b), hi = Math.max(a, b);
    this.selection.hidden = false;
    this.selection.style.left = `${(lo / cols) * this.width}px`;
    this.selection.style.width = `${((hi - lo + 1) / cols) * this.width}px`;
  }

  private onKey(e: KeyboardEvent): void {
    const cols = this.h?.columns ?? 0;
    const big = e.shiftKey ? 10 : 1;
    let { row, col } = this.keyCursor;
    switch (e.key) {
      case "ArrowLeft": col -= big; break;
      case "ArrowRight": col += big; break;
      case "ArrowUp": row -= big; break;
      case "ArrowDown": row += big; break;
      case "Home": col = 0; break;
      case "End": col = cols - 1; break;
      case "Enter": case " ":
        if (this.specs.length && this.h) this.host.openDetail(this.refAt(row, col), true);
        e.preventDefault();
        return;
      default: return;
    }
    e.preventDefault();
    this.moveCursor(row, col);
  }

  private moveCursor(row: number, col: number): void {
    const cols = this.h?.columns ?? 0;
    if (!this.specs.length || !cols) return;
    row = Math.max(0, Math.min(this.specs.length - 1, row));
    col = Math.max(0, Math.min(cols - 1, col));
    this.keyCursor = { row, col };
    const cw = this.width / cols;
    Object.assign(this.cursor.style, { left: `${col * cw}px`, top: `${row * this.rowHeight}px`, width: `${Math.max(2, cw)}px`, height: `${this.rowHeight}px` });
    this.cursor.hidden = false;
    const rect = this.canvas.getBoundingClientRect();
    this.showTooltip(row, col, rect.left + (col + 1) * cw, rect.top + (row + 1) * this.rowHeight);
  }

  private showTooltip(row: number, col: number, x: number, y: number): void {
    const h = this.h!;
    const lines = tooltipLines(h, this.runIndex, this.tagAt(row, col), col, h.reduction);
    const spec = this.specs[row];
    if (spec.kind === "group") lines.push(`worst of the ${spec.members.length} variables of ${spec.name}`);
    this.host.showLines(lines, x, y);
  }
}

/** A power of ten as the axes write it (1e-3, 1, 10), another value in short form. */
function decadeLabel(v: number): string {
  const k = Math.round(Math.log10(v));
  return Math.abs(10 ** k - v) <= 1e-9 * v ? formatPow10(k) : formatShortRatio(v);
}

/** A row label: a group header (click: collapse/expand) or a tag, cut at the start when too
 * long (the end of a variable path says the most). */
function setLabel(label: HTMLButtonElement, spec: RowSpec): void {
  for (const a of ["data-testid", "data-group", "data-tag", "aria-expanded", "tabindex"]) label.removeAttribute(a);
  if (spec.kind === "group") {
    label.className = "wur-label wur-group-label";
    setAttrs(label, {
      title: `${spec.name}: ${spec.members.length} variables (the row shows the worst of them); click to ${spec.collapsed ? "expand" : "collapse"}`,
      "data-testid": "wur-group-label", "data-group": spec.name, "aria-expanded": String(!spec.collapsed),
    });
    label.textContent = `${spec.collapsed ? "▸" : "▾"} ${spec.name} (${spec.members.length})`;
    return;
  }
  label.className = spec.group ? "wur-label wur-member" : "wur-label";
  setAttrs(label, { title: spec.name, "data-testid": "wur-row-label", "data-tag": spec.name, tabindex: -1 });
  label.replaceChildren(el("span", { text: spec.group ? spec.name.slice(spec.group.length + 1) : spec.name }));
}
