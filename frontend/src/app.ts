// The WUR tab: state, layout and interaction. Rendering of numbers is in format.ts, colors in
// color.ts, the wire format in codec.ts, the canvas in draw.ts and charts.ts.
import { api, FlagInfo, HttpError, RunInfo } from "./api";
import { bucketOf, drawDensity, drawLogLine, ChartColors, log10AtY, nearestIndex, stepAtX } from "./charts";
import { Heatmap, columnRange } from "./codec";
import {
  Band, codeColorTable, codeExtent, colorDomain, DEFAULT_BAND, Domain, domainPosition,
  RAMP_SIZE, SPECIAL_MEANING, Special, specialColors, Theme, unpackRGBA, viridisRamp,
} from "./color";
import { cellAt, drawHeatmap, drawMarks, markAt, markSpans } from "./draw";
import { compileFilter, el, runColorOf, safeFileName } from "./dom";
import { decadeTicks, formatPow10, formatRatio, formatShortRatio, formatStep, formatStepShort, markedSteps, skippedLines, stepTicks, tooltipLines, viewCsv, viewJson } from "./format";
import { displayMatrix, groupName, layoutRows, RowSpec } from "./group";
import { HostChannel } from "./protocol";
import { CSS } from "./styles";

const REDUCTIONS: [string, string][] = [
  ["mean_log10", "geometric mean"], ["max", "max"], ["min", "min"], ["last", "last"],
];
const LABEL_WIDTH = 220;
const MAX_FLAGS_SHOWN = 200;
const MARKS_HEIGHT = 7; // the strip of skipped-step marks above a heatmap, CSS px
const MARK_MIN_WIDTH = 3;
const SKIPPED_MEANING = "skipped step (mark above the heatmap): the optimizer applied no update, its ratios are 0";

interface Zoom { start: number; end: number }
interface RowRef { run: string; tag: string }

interface Block {
  run: string;
  runIndex: number;
  shown: number[]; // indices into the run's tags, after the layer filter
  specs: RowSpec[]; // the rows drawn: tags, and group headers when grouped
  display: { codes: Uint16Array; source: Int32Array } | null; // when grouped
  canvas: HTMLCanvasElement;
  plot: HTMLElement;
  labels: HTMLElement;
  selection: HTMLElement;
  cursor: HTMLElement;
  rowHeight: number;
  width: number;
  marks: HTMLCanvasElement | null; // the skipped-step marks, when the run has skipped steps
}

export class App {
  private readonly root = el("div", { class: "wur-root" });
  private readonly status = el("span", { class: "wur-status", role: "status", "aria-live": "polite" });
  private readonly errorBox = el("div", { class: "wur-error", "data-testid": "wur-error", hidden: true });
  private readonly runFilterInput = el("input", { type: "text", placeholder: "Filter runs (regex)", "aria-label": "Filter runs" });
  private readonly runList = el("ul", { class: "wur-runs", "aria-label": "Runs" });
  private readonly layerFilterInput = el("input", { type: "text", placeholder: "Filter layers (regex)", "aria-label": "Filter layers by regular expression", "data-testid": "wur-layer-filter", size: 18 });
  private readonly layerFilterHint = el("span", { class: "wur-hint", role: "alert", "data-testid": "wur-filter-error" });
  private readonly groupBox = el("input", { type: "checkbox", "data-testid": "wur-group" });
  private readonly reductionSelect = el("select", { "aria-label": "Reduction of a binned column", "data-testid": "wur-reduction" });
  private readonly zoomLabel = el("span", { class: "wur-meta", "data-testid": "wur-zoom-label" });
  private readonly resetZoomButton = el("button", { type: "button", "data-testid": "wur-reset-zoom", text: "Reset zoom", disabled: true, title: "Show every step (double-click a heatmap does the same)" });
  private readonly refreshButton = el("button", { type: "button", "data-testid": "wur-refresh", text: "Refresh", title: "Reload the data" });
  private readonly lowInput = el("input", { type: "text", class: "wur-band", value: "1e-4", "aria-label": "Lower bound of the healthy band", "data-testid": "wur-band-low" });
  private readonly highInput = el("input", { type: "text", class: "wur-band", value: "1e-2", "aria-label": "Upper bound of the healthy band", "data-testid": "wur-band-high" });
  private readonly bandHint = el("span", { class: "wur-hint", role: "alert" });
  private readonly flagsList = el("ul", { class: "wur-flags", "data-testid": "wur-flags", "aria-label": "Flagged layers" });
  private readonly flagsNote = el("div", { class: "wur-flag-meta" });
  private readonly sidebar = el("aside", { class: "wur-sidebar" });
  private readonly content = el("main", { class: "wur-content" });
  private readonly legend = el("div", { class: "wur-legend", "data-testid": "wur-legend" });
  private readonly detail = el("section", { class: "wur-detail", "data-testid": "wur-detail", hidden: true, "aria-label": "Layer detail" });
  private readonly heatmaps = el("div", { class: "wur-heatmaps" });
  private readonly tooltip = el("div", { class: "wur-tooltip", "data-testid": "wur-tooltip", role: "tooltip", hidden: true });

  private runs: RunInfo[] = [];
  private deselected = new Set<string>();
  private layerFilter: RegExp | null = null;
  private reduction = "mean_log10";
  private zoom: Zoom | null = null;
  private band: Band = { ...DEFAULT_BAND };
  private selected: RowRef | null = null;
  private highlight: RowRef | null = null;
  private heatmap: Heatmap | null = null;
  private blocks: Block[] = [];
  private domain: Domain = colorDomain(NaN, NaN);
  private table: Uint32Array | null = null;
  private tableKey = "";
  private flags: (FlagInfo & { run: string })[] = [];
  private ready = false;
  private loads = 0;
  private heatmapController: AbortController | null = null;
  private flagsController: AbortController | null = null;
  private detailController: AbortController | null = null;
  private drag: { block: Block; col: number; moved: boolean } | null = null;
  private collapsed = new Set<string>();
  private keyCursor = new Map<string, { row: number; col: number }>();
  private lastWidth = 0;
  private readonly darkQuery = window.matchMedia?.("(prefers-color-scheme: dark)");

  mount(body: HTMLElement): void {
    body.append(el("style", { text: CSS }));
    for (const [value, label] of REDUCTIONS) this.reductionSelect.append(el("option", { value, text: label }));
    const toolbar = el("header", { class: "wur-toolbar" },
      el("h1", { text: "Weight-update ratios ‖Δw‖/‖w‖" }),
      this.refreshButton,
      el("label", { class: "wur-field" }, "Layers", this.layerFilterInput), this.layerFilterHint,
      el("label", { class: "wur-field", title: "Put the variables of one layer (kernel, bias) under a collapsible header row showing the worst of them" }, this.groupBox, "Group by layer"),
      el("label", { class: "wur-field", title: "How the ratios of a column that holds several logged steps are combined" }, "Bins", this.reductionSelect),
      this.resetZoomButton, this.zoomLabel,
      el("span", { class: "wur-field" }, el("label", { text: "Band" }), this.lowInput, "–", this.highInput), this.bandHint,
      this.status,
    );
    this.sidebar.append(
      el("h2", { text: "Runs" }), this.runFilterInput,
      el("div", {}, this.button("All", () => this.setAllRuns(true)), " ", this.button("None", () => this.setAllRuns(false))),
      this.runList,
      el("h2", { text: "Flags: out of band" }), this.flagsNote, this.flagsList,
    );
    this.content.append(this.legend, this.detail, this.heatmaps);
    this.root.append(toolbar, this.errorBox, el("div", { class: "wur-main" }, this.sidebar, this.content));
    body.append(this.root, this.tooltip);
    this.root.style.setProperty("--label-width", `${LABEL_WIDTH}px`);

    this.runFilterInput.addEventListener("input", () => this.renderRunList());
    this.layerFilterInput.addEventListener("input", () => this.onLayerFilter());
    this.reductionSelect.addEventListener("change", () => { this.reduction = this.reductionSelect.value; void this.loadHeatmap(); });
    this.resetZoomButton.addEventListener("click", () => this.setZoom(null));
    this.groupBox.addEventListener("change", () => this.renderHeatmaps());
    this.refreshButton.addEventListener("click", () => void this.reload());
    for (const input of [this.lowInput, this.highInput]) input.addEventListener("change", () => this.onBand());
    window.addEventListener("mouseup", (e) => this.onMouseUp(e));
    document.addEventListener("keydown", (e) => {
      if (e.key !== "Escape") return;
      if (this.tooltip.hidden && !this.detail.hidden) this.closeDetail();
      this.hideTooltip();
    });
    this.applyTheme();
    this.darkQuery?.addEventListener?.("change", () => { this.dark = !!this.darkQuery?.matches; this.applyTheme(); });
    const hostPage = this.hostBody();
    if (hostPage) {
      let hostDark = hostPage.classList.contains("dark-mode");
      new MutationObserver(() => {
        if (hostPage.classList.contains("dark-mode") === hostDark) return; // another class changed
        hostDark = !hostDark;
        this.dark = hostDark;
        this.applyTheme();
      }).observe(hostPage, { attributes: true, attributeFilter: ["class"] });
    }
    new ResizeObserver(() => this.onResize()).observe(this.content);

    const host = HostChannel.connect(window);
    if (host) {
      host.listen("experimental.DataReloaded", () => { void this.reload(); });
      host.listen("experimental.RunsChanged", () => { void this.reload(); });
    }
    void this.reload();
  }

  private color(run: string): string {
    return runColorOf(run, this.runs.map((r) => r.run));
  }

  private button(text: string, onClick: () => void, attrs: Record<string, string> = {}): HTMLButtonElement {
    const b = el("button", { type: "button", text, ...attrs });
    b.addEventListener("click", onClick);
    return b;
  }

  // --- loading ---------------------------------------------------------------------------

  private busy(delta: number): void {
    this.loads += delta;
    this.status.textContent = this.loads > 0 ? "Loading…" : "";
    this.status.classList.toggle("wur-busy", this.loads > 0);
    this.root.setAttribute("data-state", this.loads > 0 ? "loading" : "idle");
  }

  private showError(error: unknown): void {
    if (error instanceof DOMException && error.name === "AbortError") return;
    const message = error instanceof HttpError || error instanceof Error ? error.message : String(error);
    this.errorBox.textContent = `Could not load the data: ${message}`;
    this.errorBox.hidden = false;
  }

  private markReady(): void {
    if (this.ready) return;
    this.ready = true;
    this.root.setAttribute("data-testid", "wur-ready");
  }

  /** Refetches everything, keeping run selection, zoom, filter, band and the open detail. */
  async reload(): Promise<void> {
    this.busy(1);
    try {
      this.runs = await api.runs();
      this.errorBox.hidden = true;
      this.renderRunList();
      if (!this.runs.length) {
        this.renderEmpty();
        return;
      }
      await Promise.all([this.loadHeatmap(), this.loadFlags(), this.selected ? this.openDetail(this.selected, false) : null]);
    } catch (e) {
      this.showError(e);
    } finally {
      this.busy(-1);
      this.markReady();
    }
  }

  private selectedRuns(): string[] {
    return this.runs.map((r) => r.run).filter((r) => !this.deselected.has(r));
  }

  /** Selected runs that hold ratios (a run may hold only histograms or a learning rate). */
  private heatmapRuns(): string[] {
    const withRatios = new Set(this.runs.filter((r) => r.first_step !== null && r.layers.length).map((r) => r.run));
    return this.selectedRuns().filter((r) => withRatios.has(r));
  }

  private plotWidth(): number {
    const w = this.content.clientWidth - 32 - LABEL_WIDTH - 4;
    return Math.max(120, Math.floor(w));
  }

  async loadHeatmap(): Promise<void> {
    const runs = this.heatmapRuns();
    this.heatmapController?.abort();
    if (!runs.length) {
      this.heatmap = null;
      this.heatmaps.replaceChildren(el("p", { class: "wur-meta", text: this.selectedRuns().length ? "The selected runs hold no ratios yet." : "No run selected: pick one in the list of runs." }));
      this.blocks = [];
      return;
    }
    const controller = (this.heatmapController = new AbortController());
    this.busy(1);
    try {
      const width = this.plotWidth();
      const h = await api.heatmap(
        { runs, columns: width, start: this.zoom?.start, end: this.zoom?.end, reduction: this.reduction },
        controller.signal,
      );
      if (controller.signal.aborted) return;
      performance.mark("wur-data");
      this.lastWidth = width;
      this.heatmap = h;
      this.errorBox.hidden = true;
      const [lo, hi] = codeExtent(h.runs.map((r) => r.codes), h.codes);
      this.domain = colorDomain(lo, hi, this.band);
      this.renderHeatmaps();
      this.renderLegend();
    } catch (e) {
      if (!controller.signal.aborted) this.showError(e);
    } finally {
      this.busy(-1);
    }
  }

  async loadFlags(): Promise<void> {
    this.flagsController?.abort();
    const controller = (this.flagsController = new AbortController());
    const runs = this.selectedRuns();
    try {
      const all = await Promise.all(runs.filter((r) => this.heatmapRuns().includes(r)).map((run) => api.flags(run, this.band.low, this.band.high, controller.signal)));
      if (controller.signal.aborted) return;
      this.flags = all.flatMap((f) => f.layers.map((l) => ({ ...l, run: f.run })));
      this.flags.sort((a, b) => (b.nan_steps > 0 ? 1 : 0) - (a.nan_steps > 0 ? 1 : 0) || b.out_of_band_fraction - a.out_of_band_fraction || a.run.localeCompare(b.run));
      this.renderFlags();
    } catch (e) {
      if (!controller.signal.aborted) this.showError(e);
    }
  }

  // --- sidebar ---------------------------------------------------------------------------

  private renderRunList(): void {
    const filter = compileFilter(this.runFilterInput.value);
    this.runFilterInput.classList.toggle("wur-invalid", filter instanceof Error);
    const items = this.runs.filter((r) => !(filter instanceof RegExp) || filter.test(r.run)).map((r) => {
      const box = el("input", { type: "checkbox", "data-testid": "wur-run-toggle", "data-run": r.run });
      box.checked = !this.deselected.has(r.run);
      box.addEventListener("change", () => {
        if (box.checked) this.deselected.delete(r.run); else this.deselected.add(r.run);
        void this.loadHeatmap();
        void this.loadFlags();
      });
      const swatch = el("span", { class: "wur-swatch" });
      swatch.style.background = this.color(r.run);
      return el("li", {}, el("label", { title: r.run }, box, swatch, el("span", { text: r.run })));
    });
    this.runList.replaceChildren(...items);
    if (!items.length && this.runs.length) this.runList.append(el("li", { class: "wur-meta", text: "No run matches the filter." }));
  }

  private setAllRuns(on: boolean): void {
    const filter = compileFilter(this.runFilterInput.value);
    for (const r of this.runs) {
      if (filter instanceof RegExp && !filter.test(r.run)) continue;
      if (on) this.deselected.delete(r.run); else this.deselected.add(r.run);
    }
    this.renderRunList();
    void this.loadHeatmap();
    void this.loadFlags();
  }

  private renderFlags(): void {
    const shown = this.flags.slice(0, MAX_FLAGS_SHOWN);
    this.flagsNote.textContent = this.flags.length
      ? `${this.flags.length} layer${this.flags.length === 1 ? "" : "s"} left [${formatShortRatio(this.band.low)}, ${formatShortRatio(this.band.high)}]`
      : this.runs.length ? "Every layer stayed in the band." : "";
    this.flagsList.replaceChildren(...shown.map((f) => {
      const parts: string[] = [];
      if (f.nan_steps) parts.push(`NaN at ${f.nan_steps} step${f.nan_steps === 1 ? "" : "s"} since step ${formatStep(f.first_nan_step ?? NaN)}`);
      if (f.inf_steps) parts.push(`+inf at ${f.inf_steps} since step ${formatStep(f.first_inf_step ?? NaN)}`);
      const skipped = f.skipped_steps ?? 0;
      if (f.first_out_of_band_step !== null) {
        parts.push(`${Math.round(f.out_of_band_fraction * 100)}% of ${f.logged_steps - skipped} steps out (${f.above_steps} above, ${f.below_steps} below), since step ${formatStep(f.first_out_of_band_step)}`);
      }
      if (skipped) parts.push(`${skipped} skipped step${skipped === 1 ? "" : "s"} not judged`);
      const b = el("button", { type: "button", "data-testid": "wur-flag", "data-run": f.run, "data-tag": f.tag, title: `Show ${f.tag} in ${f.run}` },
        el("div", { class: "wur-flag-tag", text: f.tag }),
        el("div", { class: "wur-flag-meta", text: this.selectedRuns().length > 1 ? `run ${f.run}` : "" }),
        el("div", { class: `wur-flag-meta${f.nan_steps ? " wur-flag-nan" : ""}`, text: parts.join("; ") }));
      b.addEventListener("click", () => this.revealRow({ run: f.run, tag: f.tag }));
      return el("li", {}, b);
    }));
    if (this.flags.length > shown.length) this.flagsList.append(el("li", { class: "wur-flag-meta", text: `… and ${this.flags.length - shown.length} more` }));
  }

  private onBand(): void {
    const low = Number(this.lowInput.value), high = Number(this.highInput.value);
    const ok = low > 0 && high > 0 && Number.isFinite(low) && Number.isFinite(high) && low < high;
    this.lowInput.classList.toggle("wur-invalid", !ok);
    this.highInput.classList.toggle("wur-invalid", !ok);
    this.bandHint.textContent = ok ? "" : "The band needs 0 < low < high (e.g. 1e-4 and 1e-2).";
    if (!ok) return;
    this.band = { low, high, target: Math.sqrt(low * high) };
    if (this.heatmap) {
      const [lo, hi] = codeExtent(this.heatmap.runs.map((r) => r.codes), this.heatmap.codes);
      this.domain = colorDomain(lo, hi, this.band);
    }
    this.redraw();
    void this.loadFlags();
    if (this.selected) void this.openDetail(this.selected, false);
  }

  private revealRow(ref: RowRef): void {
    this.highlight = ref;
    if (this.deselected.has(ref.run)) {
      this.deselected.delete(ref.run);
      this.renderRunList();
      void this.loadHeatmap().then(() => this.scrollToHighlight());
      return;
    }
    this.collapsed.delete(groupName(ref.tag));
    if (this.layerFilter && !this.layerFilter.test(ref.tag)) {
      this.layerFilterInput.value = "";
      this.onLayerFilter();
    }
    this.renderHeatmaps();
    this.scrollToHighlight();
  }

  private scrollToHighlight(): void {
    const target = this.root.querySelector<HTMLElement>(".wur-row-highlight");
    target?.scrollIntoView({ block: "center", behavior: "auto" });
  }

  private onLayerFilter(): void {
    const filter = compileFilter(this.layerFilterInput.value);
    if (filter instanceof Error) {
      this.layerFilterInput.classList.add("wur-invalid");
      this.layerFilterHint.textContent = `Invalid regular expression: ${filter.message}`;
      return; // keep the last valid filter
    }
    this.layerFilterInput.classList.remove("wur-invalid");
    this.layerFilterHint.textContent = "";
    this.layerFilter = filter;
    this.renderHeatmaps();
  }

  private setZoom(zoom: Zoom | null): void {
    this.zoom = zoom;
    this.resetZoomButton.disabled = !zoom;
    void this.loadHeatmap();
    if (this.selected) void this.openDetail(this.selected, false);
  }

  // --- heatmaps --------------------------------------------------------------------------

  /** Light or dark: at first TensorBoard's theme when the host page is reachable (same origin;
   * it sets body.dark-mode from the system's preference at load or from the user's pick in its
   * menu), else the system's; then whichever changed last, the host's theme or the system's
   * prefers-color-scheme. */
  private dark: boolean | null = null;
  private theme(): Theme {
    if (this.dark === null) {
      const host = this.hostBody();
      this.dark = host ? host.classList.contains("dark-mode") : !!this.darkQuery?.matches;
    }
    return { dark: this.dark };
  }

  private hostBody(): HTMLElement | null {
    try {
      return window.parent !== window ? window.parent.document.body : null;
    } catch {
      return null; // another origin
    }
  }

  private applyTheme(): void {
    const dark = this.theme().dark;
    if (document.documentElement.getAttribute("data-theme") === (dark ? "dark" : "light")) return;
    document.documentElement.setAttribute("data-theme", dark ? "dark" : "light");
    if (this.heatmap || this.selected) this.redraw();
  }

  private colorTable(): Uint32Array {
    const theme = this.theme();
    const key = `${this.domain.lo},${this.domain.hi},${theme.dark}`;
    if (!this.table || key !== this.tableKey) {
      this.table = codeColorTable(this.domain, theme, this.heatmap?.codes);
      this.tableKey = key;
    }
    return this.table;
  }

  private redraw(): void {
    if (!this.heatmap) return;
    this.renderHeatmaps();
    this.renderLegend();
    if (this.selected) void this.openDetail(this.selected, false);
  }

  private onResize(): void {
    if (!this.heatmap) return;
    const width = this.plotWidth();
    if (Math.abs(width - this.lastWidth) < 8) return;
    this.lastWidth = width;
    clearTimeout(this.resizeTimer);
    this.resizeTimer = window.setTimeout(() => void this.loadHeatmap(), 200);
  }
  private resizeTimer = 0;

  private renderEmpty(): void {
    this.heatmap = null;
    this.blocks = [];
    this.legend.replaceChildren();
    this.flagsList.replaceChildren();
    this.flagsNote.textContent = "";
    this.heatmaps.replaceChildren(el("div", { class: "wur-empty", "data-testid": "wur-empty" },
      el("h2", { text: "No weight-update ratios in this logdir yet" }),
      el("p", { text: "Log them from your training, with the Keras callback or wur_summary.watch around apply_gradients, then press Refresh (or wait for TensorBoard's next reload):" }),
      el("pre", { class: "wur-code", text: 'from tb_wur_plugin.keras import WeightUpdateRatioCallback\nmodel.fit(x, y, callbacks=[WeightUpdateRatioCallback("logs/run1")])' }),
      el("p", { text: "and start TensorBoard with --logdir logs." }),
    ));
  }

  renderHeatmaps(): void {
    const h = this.heatmap;
    this.hideTooltip();
    if (!h) return;
    const t0 = performance.now();
    const width = this.lastWidth || this.plotWidth();
    const table = this.colorTable();
    this.blocks = [];
    const sections: HTMLElement[] = [];
    const binned = h.columnCount.some((c) => c > 1);
    this.zoomLabel.textContent = `steps ${formatStep(h.start)}–${formatStep(h.end)}` + (binned ? ` in ${h.columns} bins` : "") + (this.zoom ? " (zoomed)" : "");
    h.runs.forEach((run, runIndex) => {
      const shown: number[] = [];
      run.tags.forEach((tag, i) => { if (!this.layerFilter || this.layerFilter.test(tag)) shown.push(i); });
      const specs = layoutRows(run.tags, shown, this.groupBox.checked, this.collapsed);
      const display = specs.some((r) => r.kind === "group") ? displayMatrix(run.codes, h.columns, specs, Math.log10(this.band.target), h.codes) : null;
      const n = specs.length;
      const rowHeight = n > 120 ? 8 : n > 60 ? 12 : 18;
      const skippedColumns: number[] = [];
      run.skipped.forEach((count, k) => { if (count) skippedColumns.push(k); });
      const info = this.runs.find((r) => r.run === run.run);
      const canvas = el("canvas", {
        "data-testid": "wur-heatmap", "data-run": run.run, "data-rows": n, "data-cols": h.columns,
        "data-start": h.start, "data-end": h.end, "data-reduction": h.reduction,
        "data-skipped-columns": skippedColumns.join(","),
        tabindex: 0, role: "img", "aria-label": `Heatmap of ${run.run}: ${n} rows by ${h.columns} step columns. Arrow keys move, Enter opens the layer.`,
      });
      const selection = el("div", { class: "wur-overlay wur-selection", hidden: true });
      const cursor = el("div", { class: "wur-overlay", hidden: true });
      cursor.style.outline = "2px solid var(--focus)";
      const plot = el("div", { class: "wur-plot" }, canvas, selection, cursor);
      const labels = el("div", { class: "wur-labels" });
      labels.style.setProperty("--row-height", `${rowHeight}px`);
      labels.style.setProperty("--row-font", `${Math.max(7, Math.min(12, rowHeight - 4))}px`);
      for (const spec of specs) {
        let label: HTMLButtonElement;
        if (spec.kind === "group") {
          label = el("button", {
            type: "button", class: "wur-label wur-group-label", title: `${spec.name}: ${spec.members.length} variables (the row shows the worst of them); click to ${spec.collapsed ? "expand" : "collapse"}`,
            text: `${spec.collapsed ? "▸" : "▾"} ${spec.name} (${spec.members.length})`, "data-testid": "wur-group-label", "data-group": spec.name, "aria-expanded": String(!spec.collapsed),
          });
          label.addEventListener("click", () => {
            if (this.collapsed.has(spec.name)) this.collapsed.delete(spec.name); else this.collapsed.add(spec.name);
            this.renderHeatmaps();
          });
        } else {
          const tag = spec.name;
          // truncated at the start when too long (the end of a variable path says the most)
          label = el("button", { type: "button", class: spec.group ? "wur-label wur-member" : "wur-label", title: tag, "data-testid": "wur-row-label", "data-tag": tag, tabindex: -1 },
            el("span", { text: spec.group ? tag.slice(spec.group.length + 1) : tag }));
          if (this.selected?.run === run.run && this.selected.tag === tag) label.classList.add("wur-selected");
          label.addEventListener("click", () => void this.openDetail({ run: run.run, tag }, true));
        }
        labels.append(label);
      }
      // a strip of marks over the columns holding a skipped step; shown for every run that has
      // one (also when the zoomed range holds none, so the heatmap does not jump)
      const marks = (info?.skipped_steps ?? 0) > 0 || skippedColumns.length
        ? el("canvas", {
          class: "wur-marks", "data-testid": "wur-skipped-marks", "data-run": run.run, role: "img",
          "aria-label": `Skipped steps of ${run.run}: ${skippedColumns.length} of the ${h.columns} columns hold a step the optimizer skipped`,
        })
        : null;
      const block: Block = { run: run.run, runIndex, shown, specs, display, canvas, plot, labels, selection, cursor, rowHeight, width, marks };
      if (this.highlight?.run === run.run) {
        const r = specs.findIndex((x) => x.kind === "tag" && x.name === this.highlight!.tag);
        if (r >= 0) {
          const box = el("div", { class: "wur-overlay wur-row-highlight", "data-testid": "wur-row-highlight" });
          box.style.top = `${r * rowHeight - 2}px`;
          box.style.height = `${rowHeight + 4}px`;
          plot.append(box);
          labels.children[r]?.classList.add("wur-highlighted");
        }
      }
      this.drawBlock(canvas, block, table, width, n * rowHeight);
      this.wireCanvas(block);
      if (marks) this.drawMarksOf(block);
      const axis = this.stepAxis(h, width);
      const swatch = el("span", { class: "wur-swatch" });
      swatch.style.background = this.color(run.run);
      const skippedSteps = info?.skipped_steps ?? 0;
      const head = el("div", { class: "wur-block-head" },
        swatch, el("h3", { text: run.run }),
        el("span", { class: "wur-meta", text: `${shown.length} of ${run.tags.length} variables` + (info?.last_step != null ? ` · steps ${formatStep(info.first_step ?? 0)}–${formatStep(info.last_step)}` : "") + (skippedSteps ? ` · ${skippedSteps} skipped step${skippedSteps === 1 ? "" : "s"}` : "") }),
        el("span", { class: "wur-spacer" }),
        el("a", { class: "wur-button", href: api.exportUrl(run.run, "csv"), download: `${safeFileName(run.run)}-wur.csv`, "data-testid": "wur-export-csv", text: "CSV", title: "Every logged ratio of this run, as CSV" }),
        el("a", { class: "wur-button", href: api.exportUrl(run.run, "json"), download: `${safeFileName(run.run)}-wur.json`, "data-testid": "wur-export-json", text: "JSON", title: "Every logged ratio of this run, as JSON" }),
        this.button("CSV of view", () => this.exportView(block, "csv"), { "data-testid": "wur-export-view", title: "The cells shown (filtered layers, zoomed range, binned columns), as CSV" }),
        this.button("JSON of view", () => this.exportView(block, "json"), { "data-testid": "wur-export-view-json", title: "The cells shown (filtered layers, zoomed range, binned columns), as JSON" }),
        this.button("PNG", () => this.exportPng(block), { "data-testid": "wur-export-png", title: "This heatmap as a PNG image" }),
      );
      const marksRow = marks ? [el("div", { class: "wur-marks-title", text: "skipped", title: SKIPPED_MEANING }), marks] : [];
      const body = n
        ? el("div", { class: "wur-grid" }, ...marksRow, labels, plot, el("div", { class: "wur-axis-title", text: "step" }), axis)
        : el("p", { class: "wur-meta", text: "No layer matches the filter." });
      if (!n) body.append(canvas); // keep the heatmap element (0 rows) for tests and tools
      if (!n) canvas.hidden = true;
      sections.push(el("section", { class: "wur-block", "aria-label": `Run ${run.run}` }, head, body));
      this.blocks.push(block);
    });
    this.heatmaps.replaceChildren(...sections);
    performance.measure("wur-draw", { start: t0 }); // read by benchmarks/frontend_bench.mjs
  }

  private drawBlock(canvas: HTMLCanvasElement, block: Block, table: Uint32Array, width: number, height: number): void {
    const h = this.heatmap!;
    if (block.display) {
      drawHeatmap(canvas, block.display.codes, h.columns, block.specs.map((_, i) => i), table, width, height);
    } else {
      drawHeatmap(canvas, h.runs[block.runIndex].codes, h.columns, block.specs.map((x) => x.tag), table, width, height);
    }
  }

  /** Draws the block's skipped-step marks and wires their tooltip. */
  private drawMarksOf(block: Block): void {
    const h = this.heatmap!, marks = block.marks!;
    const counts = h.runs[block.runIndex].skipped;
    const style = getComputedStyle(this.root);
    drawMarks(marks, markSpans(counts, h.columns, block.width, MARK_MIN_WIDTH), block.width, MARKS_HEIGHT,
      style.getPropertyValue("--skip").trim() || "#e65100", style.getPropertyValue("--border").trim() || "#e0e0e0");
    marks.addEventListener("mousemove", (e) => {
      const rect = marks.getBoundingClientRect();
      const k = markAt(counts, h.columns, rect.width, e.clientX - rect.left, MARK_MIN_WIDTH);
      if (k >= 0) this.showLines(skippedLines(h, block.runIndex, k), e.clientX, e.clientY);
      else this.hideTooltip();
    });
    marks.addEventListener("mouseleave", () => this.hideTooltip());
  }

  /** The tag index shown at display row r, column k (a group header shows its worst member). */
  private tagAt(block: Block, r: number, k: number): number {
    const spec = block.specs[r];
    return spec.kind === "tag" ? spec.tag : block.display!.source[r * this.heatmap!.columns + k];
  }

  /** Maps a step to x (CSS px) through the columns (they may be irregular). */
  private stepX(h: Heatmap, width: number, step: number): number {
    let lo = 0, hi = h.columns - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (h.columnStart[mid] <= step) lo = mid; else hi = mid - 1;
    }
    const [a, b] = columnRange(h, lo);
    const frac = Math.min(1, Math.max(0, (step - a + 0.5) / (b - a + 1)));
    return ((lo + frac) / h.columns) * width;
  }

  private stepAxis(h: Heatmap, width: number): HTMLElement {
    const axis = el("div", { class: "wur-axis", "aria-hidden": "true" });
    axis.style.width = `${width}px`;
    let lastX = -Infinity;
    for (const t of stepTicks(h.start, h.end, Math.max(2, Math.floor(width / 90)))) {
      const x = this.stepX(h, width, t);
      if (x - lastX < 50) continue;
      lastX = x;
      const tick = el("span", { class: "wur-tick", text: formatStepShort(t) });
      tick.style.left = `${x}px`;
      axis.append(tick);
    }
    return axis;
  }

  private wireCanvas(block: Block): void {
    const { canvas } = block;
    const locate = (e: MouseEvent) => {
      const rect = canvas.getBoundingClientRect();
      return cellAt(e.clientX - rect.left, e.clientY - rect.top, rect.width, block.rowHeight, block.specs.length, this.heatmap!.columns);
    };
    canvas.addEventListener("mousemove", (e) => {
      const cell = locate(e);
      if (this.drag && this.drag.block === block && cell) {
        if (cell.col !== this.drag.col) this.drag.moved = true;
        this.showSelection(block, this.drag.col, cell.col);
      }
      if (cell) this.showTooltip(block, cell.row, cell.col, e.clientX, e.clientY);
      else this.hideTooltip();
    });
    canvas.addEventListener("mouseleave", () => this.hideTooltip());
    canvas.addEventListener("mousedown", (e) => {
      if (e.button !== 0) return;
      const cell = locate(e);
      if (!cell) return;
      e.preventDefault();
      canvas.focus({ preventScroll: true });
      this.drag = { block, col: cell.col, moved: false };
    });
    canvas.addEventListener("dblclick", (e) => {
      e.preventDefault();
      clearTimeout(this.clickTimer);
      if (this.zoom) this.setZoom(null);
    });
    canvas.addEventListener("keydown", (e) => this.onCanvasKey(block, e));
    canvas.addEventListener("focus", () => {
      const c = this.keyCursor.get(block.run) ?? { row: 0, col: 0 };
      this.moveCursor(block, c.row, c.col);
    });
    canvas.addEventListener("blur", () => { block.cursor.hidden = true; this.hideTooltip(); });
  }

  private onMouseUp(e: MouseEvent): void {
    const drag = this.drag;
    this.drag = null;
    if (!drag || !this.heatmap) return;
    const { block } = drag;
    block.selection.hidden = true;
    const rect = block.canvas.getBoundingClientRect();
    const x = Math.min(rect.width - 0.01, Math.max(0, e.clientX - rect.left));
    const col = Math.floor((x / rect.width) * this.heatmap.columns);
    if (drag.moved && col !== drag.col) {
      const a = Math.min(col, drag.col), b = Math.max(col, drag.col);
      const start = columnRange(this.heatmap, a)[0], end = columnRange(this.heatmap, b)[1];
      this.setZoom({ start, end });
      return;
    }
    const cell = cellAt(e.clientX - rect.left, e.clientY - rect.top, rect.width, block.rowHeight, block.specs.length, this.heatmap.columns);
    if (cell) {
      // wait a moment: the click may be the first half of a double-click (reset zoom)
      const run = this.heatmap.runs[block.runIndex];
      const ref = { run: run.run, tag: run.tags[this.tagAt(block, cell.row, cell.col)] };
      clearTimeout(this.clickTimer);
      this.clickTimer = window.setTimeout(() => void this.openDetail(ref, true), 260);
    }
  }
  private clickTimer = 0;

  private showSelection(block: Block, a: number, b: number): void {
    const cols = this.heatmap!.columns;
    const lo = Math.min(a, b), hi = Math.max(a, b);
    block.selection.hidden = false;
    block.selection.style.left = `${(lo / cols) * block.width}px`;
    block.selection.style.width = `${((hi - lo + 1) / cols) * block.width}px`;
  }

  private onCanvasKey(block: Block, e: KeyboardEvent): void {
    const c = this.keyCursor.get(block.run) ?? { row: 0, col: 0 };
    const cols = this.heatmap?.columns ?? 0;
    const big = e.shiftKey ? 10 : 1;
    let { row, col } = c;
    switch (e.key) {
      case "ArrowLeft": col -= big; break;
      case "ArrowRight": col += big; break;
      case "ArrowUp": row -= big; break;
      case "ArrowDown": row += big; break;
      case "Home": col = 0; break;
      case "End": col = cols - 1; break;
      case "Enter": case " ": {
        const run = this.heatmap!.runs[block.runIndex];
        if (block.specs.length) void this.openDetail({ run: run.run, tag: run.tags[this.tagAt(block, row, col)] }, true);
        e.preventDefault();
        return;
      }
      default: return;
    }
    e.preventDefault();
    this.moveCursor(block, row, col);
  }

  private moveCursor(block: Block, row: number, col: number): void {
    const cols = this.heatmap?.columns ?? 0;
    if (!block.specs.length || !cols) return;
    row = Math.max(0, Math.min(block.specs.length - 1, row));
    col = Math.max(0, Math.min(cols - 1, col));
    this.keyCursor.set(block.run, { row, col });
    const cw = block.width / cols;
    block.cursor.hidden = false;
    block.cursor.style.left = `${col * cw}px`;
    block.cursor.style.top = `${row * block.rowHeight}px`;
    block.cursor.style.width = `${Math.max(2, cw)}px`;
    block.cursor.style.height = `${block.rowHeight}px`;
    const rect = block.canvas.getBoundingClientRect();
    this.showTooltip(block, row, col, rect.left + (col + 1) * cw, rect.top + (row + 1) * block.rowHeight);
  }

  private showTooltip(block: Block, row: number, col: number, x: number, y: number): void {
    const h = this.heatmap!;
    const lines = tooltipLines(h, block.runIndex, this.tagAt(block, row, col), col, h.reduction);
    const spec = block.specs[row];
    if (spec.kind === "group") lines.push(`worst of the ${spec.members.length} variables of ${spec.name}`);
    this.showLines(lines, x, y);
  }

  private showLines(lines: string[], x: number, y: number): void {
    this.tooltip.replaceChildren(...lines.map((line, i) => el("div", { class: i === 0 ? "wur-tt-tag" : "", text: line })));
    this.tooltip.hidden = false;
    const w = this.tooltip.offsetWidth, ht = this.tooltip.offsetHeight;
    const left = x + 14 + w > window.innerWidth ? Math.max(0, x - 14 - w) : x + 14;
    const top = y + 14 + ht > window.innerHeight ? Math.max(0, y - 14 - ht) : y + 14;
    this.tooltip.style.left = `${left}px`;
    this.tooltip.style.top = `${top}px`;
  }

  private hideTooltip(): void {
    this.tooltip.hidden = true;
  }

  // --- legend ----------------------------------------------------------------------------

  private renderLegend(): void {
    const d = this.domain;
    const W = 360, H = 52, x0 = 10, barW = W - 20, barY = 20, barH = 12;
    const canvas = el("canvas", { role: "img", "aria-label": `Color scale: log10 of the ratio from ${formatPow10(d.lo)} to ${formatPow10(d.hi)}; healthy band ${formatRatio(this.band.low)} to ${formatRatio(this.band.high)}, target ${formatRatio(this.band.target)}` });
    const dpr = window.devicePixelRatio || 1;
    canvas.width = W * dpr; canvas.height = H * dpr;
    canvas.style.width = `${W}px`; canvas.style.height = `${H}px`;
    const ctx = canvas.getContext("2d")!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const ramp = viridisRamp();
    for (let i = 0; i < barW; i++) {
      const [r, g, b] = unpackRGBA(ramp[Math.round((i / (barW - 1)) * (RAMP_SIZE - 1))]);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(x0 + i, barY, 1.5, barH);
    }
    const colors = this.chartColors();
    const xOf = (lg: number) => x0 + domainPosition(lg, d) * barW;
    const bx0 = xOf(Math.log10(this.band.low)), bx1 = xOf(Math.log10(this.band.high)), bt = xOf(Math.log10(this.band.target));
    ctx.strokeStyle = colors.bandLine;
    ctx.lineWidth = 2;
    ctx.strokeRect(bx0, barY - 1, bx1 - bx0, barH + 2);
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.fillStyle = colors.bandLine;
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    ctx.fillText(`healthy band ${formatShortRatio(this.band.low)} – ${formatShortRatio(this.band.high)}`, (bx0 + bx1) / 2, barY - 5);
    ctx.beginPath();
    ctx.moveTo(bt - 4, barY - 4); ctx.lineTo(bt + 4, barY - 4); ctx.lineTo(bt, barY + 2); ctx.closePath();
    ctx.fill();
    ctx.fillStyle = colors.muted;
    ctx.textBaseline = "top";
    for (const k of decadeTicks(d.lo, d.hi, 10)) {
      ctx.fillRect(Math.round(xOf(k)), barY + barH, 1, 3);
      ctx.fillText(formatPow10(k), xOf(k), barY + barH + 4);
    }
    const specials = specialColors(this.theme());
    const items = (Object.keys(SPECIAL_MEANING) as Special[]).map((s) => {
      const sw = el("span", { class: "wur-swatch" });
      sw.style.background = specials[s];
      return el("span", { class: "wur-legend-special" }, sw, el("span", { text: SPECIAL_MEANING[s] }));
    });
    if (this.blocks.some((b) => b.marks)) {
      const sw = el("span", { class: "wur-swatch wur-skip-swatch" });
      items.push(el("span", { class: "wur-legend-special", "data-testid": "wur-legend-skipped" }, sw, el("span", { text: SKIPPED_MEANING })));
    }
    this.legend.replaceChildren(
      el("div", {}, el("div", { class: "wur-chart-title", text: `Color: ratio on a log scale (▼ target ${formatShortRatio(this.band.target)}); same scale for every run` }), canvas),
      el("div", { class: "wur-legend-specials", "aria-label": "Special cells" }, ...items),
    );
  }

  // --- layer detail ----------------------------------------------------------------------

  private chartColors(): ChartColors {
    const s = getComputedStyle(this.root);
    const v = (name: string, fallback: string) => s.getPropertyValue(name).trim() || fallback;
    return {
      text: v("--text", "#212121"), muted: v("--muted", "#616161"), grid: v("--grid", "#eee"), band: v("--band", "rgba(76,175,80,.16)"),
      bandLine: v("--band-line", "#2e7d32"), line: v("--focus", "#1a73e8"), error: v("--error", "#c62828"), bg: v("--bg", "#fff"),
    };
  }

  async openDetail(ref: RowRef, scroll: boolean): Promise<void> {
    this.selected = ref;
    this.detailController?.abort();
    const controller = (this.detailController = new AbortController());
    for (const label of this.root.querySelectorAll(".wur-label.wur-selected")) label.classList.remove("wur-selected");
    for (const b of this.blocks) {
      if (b.run !== ref.run) continue;
      const r = b.specs.findIndex((x) => x.kind === "tag" && x.name === ref.tag);
      if (r >= 0) b.labels.children[r]?.classList.add("wur-selected");
    }
    const info = this.runs.find((r) => r.run === ref.run);
    const layer = info?.layers.find((l) => l.tag === ref.tag);
    const close = this.button("Close", () => this.closeDetail(), { "data-testid": "wur-detail-close" });
    const swatch = el("span", { class: "wur-swatch" });
    swatch.style.background = this.color(ref.run);
    const head = el("div", { class: "wur-detail-head" }, swatch, el("h3", { text: ref.tag }), el("span", { class: "wur-meta", text: `run ${ref.run}` }), el("span", { class: "wur-spacer" }), close);
    if (this.detail.hidden || this.detail.getAttribute("data-tag") !== ref.tag || this.detail.getAttribute("data-run") !== ref.run) {
      this.detail.style.minHeight = this.detail.hidden ? "" : `${this.detail.offsetHeight}px`; // no layout jump while loading
      this.detail.replaceChildren(head, el("div", { class: "wur-meta", text: "Loading…" }));
    }
    this.detail.hidden = false;
    this.detail.setAttribute("data-run", ref.run);
    this.detail.setAttribute("data-tag", ref.tag);
    if (scroll) this.detail.scrollIntoView({ block: "nearest" });
    try {
      const [series, histograms, lr, marker] = await Promise.all([
        api.series(ref.run, ref.tag, controller.signal),
        layer?.has_histograms ? api.histograms(ref.run, ref.tag, controller.signal) : null,
        info?.has_learning_rate ? api.series(ref.run, "_wur/learning_rate", controller.signal) : null,
        info?.skipped_steps ? api.series(ref.run, "_wur/skipped_step", controller.signal) : null,
      ]);
      const skippedSteps = marker ? markedSteps(marker.steps, marker.values) : new Set<number>();
      if (controller.signal.aborted) return;
      const values = series.values.map(Number);
      let x0 = this.zoom?.start ?? (series.steps.length ? series.steps[0] : 0);
      let x1 = this.zoom?.end ?? (series.steps.length ? series.steps[series.steps.length - 1] : 1);
      if (x1 <= x0) x1 = x0 + 1;
      const inRange = (s: number) => s >= x0 && s <= x1;
      const keep = series.steps.map((s, i) => (inRange(s) ? i : -1)).filter((i) => i >= 0);
      const width = Math.max(240, this.content.clientWidth - 32 - 26);
      const colors = this.chartColors();
      const parts: HTMLElement[] = [head, el("div", { class: "wur-meta", text: series.description || layer?.description || "" })];
      const ratioCanvas = el("canvas", { "data-testid": "wur-detail-ratio", role: "img", "aria-label": `Ratio of ${ref.tag} over steps, log scale` });
      drawLogLine(ratioCanvas, { steps: keep.map((i) => series.steps[i]), values: keep.map((i) => values[i]) }, x0, x1, width, 180, colors, this.band);
      parts.push(el("div", { class: "wur-chart-title", text: `Ratio over steps (log scale; shaded: band, dashed: target; ${keep.length} points)` }), ratioCanvas);
      const keptSteps = keep.map((i) => series.steps[i]);
      const lrAt = (step: number) => {
        if (!lr || !lr.steps.length) return null;
        const j = nearestIndex(lr.steps, step);
        return lr.steps[j] === step ? Number(lr.values[j]) : null;
      };
      ratioCanvas.addEventListener("mousemove", (e) => {
        const rect = ratioCanvas.getBoundingClientRect();
        const j = nearestIndex(keptSteps, stepAtX(e.clientX - rect.left, x0, x1, width));
        if (j < 0) return;
        const step = keptSteps[j], value = values[keep[j]], rate = lrAt(step);
        const lines = [ref.tag, `step ${formatStep(step)}`, `ratio ${formatRatio(value)}`];
        if (value > 0 && Number.isFinite(value)) lines.push(`log10 ${Math.log10(value).toFixed(2)}`);
        if (rate !== null) lines.push(`learning rate ${formatRatio(rate)}`);
        if (skippedSteps.has(step)) lines.push("skipped step: the optimizer applied no update (ratios 0)");
        this.showLines(lines, e.clientX, e.clientY);
      });
      ratioCanvas.addEventListener("mouseleave", () => this.hideTooltip());
      if (lr && lr.steps.length) {
        const lrCanvas = el("canvas", { "data-testid": "wur-detail-lr", role: "img", "aria-label": "Learning rate over steps" });
        const k = lr.steps.map((s, i) => (inRange(s) ? i : -1)).filter((i) => i >= 0);
        drawLogLine(lrCanvas, { steps: k.map((i) => lr.steps[i]), values: k.map((i) => Number(lr.values[i])) }, x0, x1, width, 110, colors);
        parts.push(el("div", { class: "wur-chart-title", text: "Learning rate (log scale)" }), lrCanvas);
      }
      if (histograms && histograms.steps.length) {
        const k = histograms.steps.map((s, i) => (inRange(s) ? i : -1)).filter((i) => i >= 0);
        const hCanvas = el("canvas", { "data-testid": "wur-detail-histogram", role: "img", "aria-label": "Distribution of the elementwise ratios over steps" });
        const hSteps = k.map((i) => histograms.steps[i]);
        const axis = drawDensity(hCanvas, { steps: hSteps, edges: histograms.edges, firstBin: histograms.buckets.first_bin, counts: k.map((i) => histograms.counts[i]) }, x0, x1, width, 160, colors);
        hCanvas.addEventListener("mousemove", (e) => {
          const rect = hCanvas.getBoundingClientRect();
          const j = nearestIndex(hSteps, stepAtX(e.clientX - rect.left, x0, x1, width));
          if (j < 0 || !axis) return;
          const counts = histograms.counts[k[j]];
          const b = histograms.buckets;
          const total = counts.reduce((a, n) => a + n, 0);
          const lines = [ref.tag, `step ${formatStep(hSteps[j])}: ${total} elements`];
          const bucket = bucketOf(histograms.edges, log10AtY(e.clientY - rect.top, axis.lo, axis.hi, 160));
          if (bucket >= 0) {
            lines.push(`${formatShortRatio(histograms.edges[bucket])} ≤ |Δw_i|/|w_i| < ${formatShortRatio(histograms.edges[bucket + 1])}: ${counts[b.first_bin + bucket] ?? 0}`);
          }
          const special = ([["zero", b.zero], ["below the first edge", b.underflow], ["above the last edge", b.overflow], ["+inf", b.inf], ["NaN", b.nan]] as [string, number][])
            .filter(([, i]) => (counts[i] ?? 0) > 0).map(([name, i]) => `${name}: ${counts[i]}`);
          if (special.length) lines.push(special.join(", "));
          this.showLines(lines, e.clientX, e.clientY);
        });
        hCanvas.addEventListener("mouseleave", () => this.hideTooltip());
        parts.push(el("div", { class: "wur-chart-title", text: "Distribution of the elementwise ratios |Δw_i|/|w_i| (each step's column scaled to its largest bucket)" }), hCanvas);
      } else if (layer && !layer.has_histograms) {
        parts.push(el("div", { class: "wur-meta", text: "No histograms were logged for this layer (histograms=True in the callback or watch logs them)." }));
      }
      this.detail.replaceChildren(...parts);
      this.detail.style.minHeight = "";
    } catch (e) {
      if (controller.signal.aborted || (e instanceof DOMException && e.name === "AbortError")) return;
      if (e instanceof HttpError && e.status === 404) {
        this.detail.replaceChildren(head, el("div", { class: "wur-meta", text: "This layer is not in the data any more." }));
        return;
      }
      this.detail.replaceChildren(head, el("div", { class: "wur-error", text: e instanceof Error ? e.message : String(e) }));
    }
  }

  private closeDetail(): void {
    this.selected = null;
    this.detailController?.abort();
    this.detail.hidden = true;
    this.detail.replaceChildren();
    for (const label of this.root.querySelectorAll(".wur-label.wur-selected")) label.classList.remove("wur-selected");
  }

  // --- export ----------------------------------------------------------------------------

  private download(blob: Blob, name: string): void {
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  private exportView(block: Block, format: "csv" | "json"): void {
    const h = this.heatmap;
    if (!h) return;
    const text = format === "csv" ? viewCsv(h, block.runIndex, block.shown) : viewJson(h, block.runIndex, block.shown);
    const type = format === "csv" ? "text/csv" : "application/json";
    this.download(new Blob([text], { type }), `${safeFileName(block.run)}-wur-view.${format}`);
  }

  private exportPng(block: Block): void {
    const h = this.heatmap;
    if (!h) return;
    const run = h.runs[block.runIndex];
    const dpr = 2;
    const rowH = Math.max(block.rowHeight, 12);
    const n = block.specs.length;
    const W = LABEL_WIDTH + block.width + 16, Hh = 28 + n * rowH + 24;
    const out = document.createElement("canvas");
    out.width = W * dpr; out.height = Hh * dpr;
    const ctx = out.getContext("2d")!;
    ctx.scale(dpr, dpr);
    const colors = this.chartColors();
    ctx.fillStyle = colors.bg; ctx.fillRect(0, 0, W, Hh);
    ctx.fillStyle = colors.text;
    ctx.font = "500 13px Roboto, Arial, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillText(`${run.run} — weight-update ratios, steps ${formatStep(h.start)}–${formatStep(h.end)}`, 8, 14);
    ctx.font = `${Math.min(12, rowH - 3)}px Roboto, Arial, sans-serif`;
    ctx.textAlign = "right";
    block.specs.forEach((spec, r) => {
      let text = spec.kind === "group" ? `${spec.name} (worst of ${spec.members.length})` : spec.name;
      while (text.length > 4 && ctx.measureText(text).width > LABEL_WIDTH - 10) text = "…" + text.slice(2);
      ctx.fillText(text, LABEL_WIDTH - 6, 28 + r * rowH + rowH / 2);
    });
    const cells = document.createElement("canvas");
    this.drawBlock(cells, block, this.colorTable(), block.width, n * rowH);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(cells, LABEL_WIDTH, 28, block.width, n * rowH);
    if (block.marks) {
      ctx.fillStyle = getComputedStyle(this.root).getPropertyValue("--skip").trim() || "#e65100";
      for (const [x0, x1] of markSpans(run.skipped, h.columns, block.width, MARK_MIN_WIDTH)) ctx.fillRect(LABEL_WIDTH + x0, 21, x1 - x0, 5);
    }
    ctx.textAlign = "center";
    ctx.fillStyle = colors.muted;
    ctx.font = "11px Roboto, Arial, sans-serif";
    for (const t of stepTicks(h.start, h.end, Math.max(2, Math.floor(block.width / 90)))) {
      ctx.fillText(formatStepShort(t), LABEL_WIDTH + this.stepX(h, block.width, t), 28 + n * rowH + 12);
    }
    out.toBlob((blob) => { if (blob) this.download(blob, `${safeFileName(run.run)}-wur.png`); }, "image/png");
  }
}
