// The WUR tab: wires the state (state.ts), the loads (api.ts) and the views (toolbar, sidebar,
// legend, heatmap blocks with their line-search strips, layer detail). Setters mark what is stale; commit() redraws it, once
// per frame. The layer detail opens right below the heatmap of its run, the clicked row kept in
// view (layout.ts).
import { api, HttpError, LineSearch, Suggestions } from "./api";
import { KeyedCache, RunCache } from "./cache";
import { ColorTables } from "./color";
import { CompareView, RANKING_WIDTH } from "./compare";
import { DetailCache, DetailView, fetchDetailData } from "./detail";
import { el, runColorOf, Tooltip } from "./dom";
import { flagsOfRun, reasonLabel } from "./flagged";
import { exportPng, exportView } from "./export";
import { groupName } from "./group";
import { HeatmapBlock } from "./heatmap_block";
import { Legend } from "./legend";
import { scrollToShow } from "./layout";
import { HostChannel } from "./protocol";
import { rankFlags, Sidebar } from "./sidebar";
import { Part, RowRef, Scheduler, Store, Zoom } from "./state";
import { CSS } from "./styles";
import { themeColors, ThemeWatcher } from "./theme";
import { suggestionText } from "./suggest";
import { Toolbar } from "./toolbar";
import type { Band } from "./color";

const LABEL_WIDTH = 220;

export class App {
  private readonly scheduler = new Scheduler((dirty) => this.commit(dirty));
  private readonly store = new Store(this.scheduler);
  private readonly root = el("div", { class: "wur-root" });
  private readonly errorBox = el("div", { class: "wur-error", "data-testid": "wur-error", hidden: true });
  private readonly content = el("main", { class: "wur-content" });
  private readonly heatmaps = el("div", { class: "wur-heatmaps" });
  private readonly tooltip = new Tooltip();
  private readonly toolbar = new Toolbar(this);
  private readonly sidebar = new Sidebar(this);
  private readonly legend = new Legend();
  private readonly detail = new DetailView({ showLines: (l, x, y) => this.showLines(l, x, y), hideTooltip: () => this.hideTooltip(), close: () => this.closeDetail() });
  private readonly cache = new DetailCache((run, tag, metric) => fetchDetailData(run, tag, metric, this.store.runInfo(run), this.store.s.reservedTags));
  private readonly lineSearchCache = new RunCache<LineSearch>((run) => api.lineSearch(run));
  private readonly suggestionsCache = new KeyedCache<[run: string, metric: string], Suggestions>((run, metric) => api.suggestions(run, metric));
  private readonly compare = new CompareView({
    pickCompare: (a, b) => this.pickCompare(a, b), showLines: (l, x, y) => this.showLines(l, x, y), hideTooltip: () => this.hideTooltip(),
  });
  private compareController: AbortController | null = null;
  private readonly colors = new ColorTables();
  private readonly blocks = new Map<string, HeatmapBlock>();
  private emptyLogdir = false;
  private ready = false;
  private loads = 0;
  private heatmapController: AbortController | null = null;
  private flagsController: AbortController | null = null;
  private reasonsLoaded = false;
  private detailGeneration = 0;
  private reloadGeneration = 0;
  private lastWidth = 0;
  private resizeTimer = 0;
  private scrollToHighlight = false;
  /** the detail just opened by a click or a key: scroll it into view once drawn */
  private scrollToDetail = false;

  mount(body: HTMLElement): void {
    body.append(el("style", { text: CSS }));
    this.content.append(this.legend.element, this.heatmaps, this.compare.element);
    this.root.append(this.toolbar.element, this.errorBox, el("div", { class: "wur-main" }, this.sidebar.element, this.content));
    body.append(this.root, this.tooltip.element);
    this.root.style.setProperty("--label-width", `${LABEL_WIDTH}px`);
    document.addEventListener("keydown", (e) => {
      if (e.key !== "Escape") return;
      if (this.tooltip.hidden && this.store.s.selected) this.closeDetail();
      this.hideTooltip();
    });
    this.store.s.dark = new ThemeWatcher((dark) => this.store.setDark(dark)).isDark;
    new ResizeObserver(() => this.onResize()).observe(this.content);
    // the sidebar scrolls on its own, below the (sticky, wrapping) toolbar
    new ResizeObserver(() => this.root.style.setProperty("--toolbar-height", `${this.toolbar.element.offsetHeight}px`)).observe(this.toolbar.element);
    const host = HostChannel.connect(window);
    host?.listen("experimental.DataReloaded", () => { void this.reload(); });
    host?.listen("experimental.RunsChanged", () => { void this.reload(); });
    void this.reload();
  }

  // --- loading ---------------------------------------------------------------------------

  /** data-state: "loading" while a request is out, "idle" once what came in is drawn (the
   * frame after the last answer: its commit was asked for first). */
  private busy(delta: number): void {
    this.loads += delta;
    this.toolbar.setBusy(this.loads > 0);
    if (this.loads > 0) this.root.setAttribute("data-state", "loading");
    else requestAnimationFrame(() => { if (this.loads === 0) this.root.setAttribute("data-state", "idle"); });
  }

  private showError(error: unknown): void {
    if (error instanceof DOMException && error.name === "AbortError") return;
    this.errorBox.textContent = `Could not load the data: ${error instanceof Error ? error.message : String(error)}`;
    this.errorBox.hidden = false;
  }

  /** Refetches everything, keeping run selection, zoom, filter, band and the open layer; the
   * cached layer details and line searches are dropped (the only place they are). */
  async reload(): Promise<void> {
    this.busy(1);
    const reasons = this.loadReasons();
    try {
      const answer = await api.runs();
      this.cache.clear();
      this.lineSearchCache.clear();
      this.suggestionsCache.clear();
      this.reloadGeneration++;
      this.errorBox.hidden = true;
      this.emptyLogdir = !answer.runs.length;
      this.store.setRuns(answer.runs, answer.reserved_tags ?? null, answer.metrics);
      this.toolbar.showMetrics(this.store.s.metrics, this.store.s.metric);
      if (this.emptyLogdir) {
        this.store.setHeatmap(null);
        this.store.setFlags([]);
        this.store.setComparison(null);
        return;
      }
      await Promise.all([this.loadHeatmap(), this.loadFlags(), this.loadDetail(false), this.loadLineSearch(), this.loadCompare()]);
    } catch (e) {
      this.showError(e);
    } finally {
      await reasons;
      this.busy(-1);
      if (!this.ready) {
        this.scheduler.flush(); // drawn before the tab says it is ready
        this.ready = true;
        this.root.setAttribute("data-testid", "wur-ready");
      }
    }
  }

  private plotWidth(): number {
    return Math.max(120, Math.floor(this.content.clientWidth - 32 - LABEL_WIDTH - 4));
  }

  private async loadHeatmap(): Promise<void> {
    const runs = this.store.heatmapRuns();
    this.heatmapController?.abort();
    if (!runs.length) {
      this.store.setHeatmap(null);
      return;
    }
    const controller = (this.heatmapController = new AbortController());
    const { zoom, reduction, metric } = this.store.s;
    this.busy(1);
    try {
      const width = this.plotWidth();
      const h = await api.heatmap({ runs, columns: width, start: zoom?.start, end: zoom?.end, reduction, metric }, controller.signal);
      if (controller.signal.aborted) return;
      performance.mark("wur-data");
      if (width !== this.lastWidth) this.scheduler.mark("compare"); // drawn as wide as the heatmaps
      this.lastWidth = width;
      this.errorBox.hidden = true;
      this.store.setHeatmap(h);
    } catch (e) {
      if (!controller.signal.aborted) this.showError(e);
    } finally {
      this.busy(-1);
    }
  }

  /** The judgement's reasons (/reasons): once, at the first reload that gets them. */
  private async loadReasons(): Promise<void> {
    if (this.reasonsLoaded) return;
    this.busy(1);
    try {
      this.store.setReasons((await api.reasons()).reasons);
      this.reasonsLoaded = true;
    } catch (e) {
      this.showError(e);
    } finally {
      this.busy(-1);
    }
  }

  /** The flags of the shown runs: the server judges them for the band (one request a run). */
  private async loadFlags(): Promise<void> {
    this.flagsController?.abort();
    const controller = (this.flagsController = new AbortController());
    const runs = this.store.heatmapRuns(), { flagBand, patience, metric } = this.store.s;
    if (!runs.length) {
      this.store.setFlags([]);
      return;
    }
    this.busy(1);
    try {
      // no band set by the user: no low/high, the server's default judgement
      const all = await Promise.all(runs.map((run) => api.flags(run, flagBand, patience, metric, controller.signal)));
      if (controller.signal.aborted) return;
      this.store.setFlags(rankFlags(all.flatMap((f) => f.layers.map((l) => ({ ...l, run: f.run })))));
    } catch (e) {
      if (!controller.signal.aborted) this.showError(e);
    } finally {
      this.busy(-1);
    }
  }

  /** The comparison of the picked runs over the zoomed range: one /compare (on picking the
   * runs, on zoom, on reload, on a resize that refetches the heatmaps; nothing else fetches
   * it). */
  private async loadCompare(): Promise<void> {
    this.compareController?.abort();
    const pair = this.store.s.comparePair;
    if (!pair) return;
    const controller = (this.compareController = new AbortController());
    const { zoom, metric } = this.store.s;
    this.busy(1);
    this.store.setCompareLoading(true);
    try {
      const c = await api.compare({ runA: pair[0], runB: pair[1], columns: Math.max(60, this.plotWidth() - RANKING_WIDTH), start: zoom?.start, end: zoom?.end, metric }, controller.signal);
      if (controller.signal.aborted) return;
      this.store.setComparison(c);
    } catch (e) {
      if (controller.signal.aborted) return;
      if (e instanceof HttpError && e.status === 404) this.store.setComparison(null, "These runs share no layer logged at a common step (in the steps shown).");
      else this.store.setComparison(null, `Could not compare the runs: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      this.busy(-1);
    }
  }

  /** The suggested learning rate of the open layer: /suggestions once per run per reload
   * (cached), none for a run that logs no learning rate. */
  private async loadSuggestion(ref: RowRef, generation: number): Promise<void> {
    if (!this.store.runInfo(ref.run)?.has_learning_rate) {
      this.detail.setSuggestion(suggestionText(null, ref.tag));
      return;
    }
    const metric = this.store.s.metric;
    const cached = this.suggestionsCache.has(ref.run, metric);
    if (!cached) this.busy(1);
    try {
      const answer = await this.suggestionsCache.get(ref.run, metric);
      if (generation === this.detailGeneration) this.detail.setSuggestion(suggestionText(answer, ref.tag), answer.caveat ?? "");
    } catch (e) {
      if (generation === this.detailGeneration) this.detail.setSuggestion(`Suggested learning rate: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      if (!cached) this.busy(-1);
    }
  }

  /** The line search of each shown run whose /runs entry says it has one: from the cache,
   * else fetched into it (one /line_search a run per reload; none for the other runs). */
  private async loadLineSearch(): Promise<void> {
    const generation = this.reloadGeneration;
    await Promise.all(this.store.lineSearchRuns().map(async (run) => {
      const cached = this.lineSearchCache.has(run);
      if (!cached) this.busy(1);
      try {
        const data = await this.lineSearchCache.get(run);
        if (generation === this.reloadGeneration) this.store.setLineSearch(run, data);
      } catch (e) {
        if (generation !== this.reloadGeneration) return;
        this.store.setLineSearch(run, null);
        if (!(e instanceof HttpError && e.status === 404)) this.showError(e); // 404: none (any more)
      } finally {
        if (!cached) this.busy(-1);
      }
    }));
  }

  /** Shows the selected layer's detail: from the cache, else fetched into it. */
  private async loadDetail(scroll: boolean): Promise<void> {
    const ref = this.store.s.selected;
    if (!ref) return;
    const generation = ++this.detailGeneration;
    const layer = this.store.runInfo(ref.run)?.layers.find((l) => l.tag === ref.tag);
    this.detail.show(ref, this.color(ref.run), layer);
    if (scroll) this.scrollToDetail = true;
    void this.loadSuggestion(ref, generation);
    const metric = this.store.s.metric;
    const cached = this.cache.has(ref.run, ref.tag, metric);
    if (!cached) this.busy(1);
    try {
      const data = await this.cache.get(ref.run, ref.tag, metric);
      if (generation !== this.detailGeneration) return;
      this.detail.setData(data);
      this.scheduler.mark("detail");
    } catch (e) {
      if (generation === this.detailGeneration) {
        this.detail.setError(e);
        this.scheduler.mark("detail");
      }
    } finally {
      if (!cached) this.busy(-1);
    }
  }

  // --- what the views ask for (setters, then what must be fetched) -----------------------

  refresh(): void { void this.reload(); }
  setLayerFilter(filter: RegExp | null): void { this.store.setLayerFilter(filter); }
  setGrouped(grouped: boolean): void { this.store.setGrouped(grouped); }
  toggleGroup(name: string): void { this.store.toggleCollapsed(name); }
  isZoomed(): boolean { return !!this.store.s.zoom; }
  resetZoom(): void { this.setZoom(null); }
  showLines(lines: string[], x: number, y: number): void { this.tooltip.show(lines, x, y); }
  hideTooltip(): void { this.tooltip.hide(); }
  exportView(block: HeatmapBlock, format: "csv" | "json"): void { exportView(block, format); }
  exportPng(block: HeatmapBlock): void { exportPng(block, LABEL_WIDTH, themeColors(this.root)); }

  setReduction(reduction: string): void {
    this.store.setReduction(reduction);
    void this.loadHeatmap();
  }

  /** Another metric: its heatmap, flags, comparison and open layer's detail (from the
   * cache when shown before); the export links follow at the commit. */
  setMetric(metric: string): void {
    if (metric === this.store.s.metric) return;
    this.store.setMetric(metric);
    void this.loadHeatmap();
    void this.loadFlags();
    void this.loadCompare();
    void this.loadDetail(false);
  }

  /** The server bins the columns of the new range: one /heatmap; the detail redraws from its cache. */
  setZoom(zoom: Zoom | null): void {
    this.store.setZoom(zoom);
    void this.loadHeatmap();
    void this.loadCompare();
  }

  /** Only the flags change: one /flags a shown run. */
  setPatience(patience: number): void {
    this.store.setPatience(patience);
    void this.loadFlags();
  }

  /** Both runs picked: one /compare; else the comparison goes. */
  pickCompare(runA: string, runB: string): void {
    this.compareController?.abort();
    this.store.setComparePair(runA && runB ? [runA, runB] : null);
    void this.loadCompare();
  }

  /** Recolors and redraws here; the flags are judged by the server: one /flags a shown run.
   * `explicit`: the user set the band fields (the flags judge by the band); else the default
   * judgement (no band sent). */
  setBand(band: Band, explicit = true): void {
    this.store.setBand(band, explicit);
    void this.loadFlags();
  }

  setRunShown(run: string, shown: boolean): void {
    this.setRunsShown([run], shown);
  }

  /** The run filter hides the runs it does not match: their heatmaps, flags and comparison
   * choices (a comparison of a hidden run goes). Fetches as a run toggle does, when the runs
   * shown changed. */
  setRunFilter(filter: RegExp | null): void {
    const before = this.store.heatmapRuns().join("\n");
    this.store.setRunFilter(filter);
    const pair = this.store.s.comparePair;
    if (pair && !pair.every((r) => this.store.matchesFilter(r))) this.pickCompare("", "");
    if (this.store.heatmapRuns().join("\n") === before) return;
    void this.loadHeatmap();
    void this.loadFlags();
    void this.loadLineSearch();
  }

  setRunsShown(runs: string[], shown: boolean): void {
    for (const run of runs) this.store.setRunShown(run, shown);
    void this.loadHeatmap();
    void this.loadFlags();
    void this.loadLineSearch();
  }

  openDetail(ref: RowRef, scroll: boolean): void {
    this.store.setSelected(ref);
    void this.loadDetail(scroll);
  }

  private closeDetail(): void {
    this.detailGeneration++;
    this.store.setSelected(null);
    this.detail.close();
  }

  revealRow(ref: RowRef): void {
    const s = this.store.s;
    this.store.setHighlight(ref);
    this.scrollToHighlight = true;
    if (s.deselected.has(ref.run)) {
      this.setRunShown(ref.run, true);
      return;
    }
    if (s.collapsed.has(groupName(ref.tag))) this.store.toggleCollapsed(groupName(ref.tag), false);
    if (s.layerFilter && !s.layerFilter.test(ref.tag)) this.toolbar.clearLayerFilter();
  }

  private onResize(): void {
    this.scheduler.mark("detail");
    if (!this.store.s.heatmap) return;
    const width = this.plotWidth();
    if (Math.abs(width - this.lastWidth) < 8) return;
    this.lastWidth = width;
    this.scheduler.mark("compare");
    clearTimeout(this.resizeTimer);
    this.resizeTimer = window.setTimeout(() => {
      void this.loadHeatmap();
      void this.loadCompare();
    }, 200);
  }

  // --- the commit: redraw what is marked -------------------------------------------------

  private color(run: string): string {
    return runColorOf(run, this.store.s.runs.map((r) => r.run));
  }

  private commit(dirty: ReadonlySet<Part>): void {
    const s = this.store.s;
    if (dirty.has("runs")) this.sidebar.renderRuns(s.runs, s.deselected, (r) => this.color(r));
    if (dirty.has("heatmaps")) this.commitHeatmaps();
    else if (dirty.has("lineSearch")) this.commitLineSearch();
    if (dirty.has("heatmaps") || dirty.has("selection")) this.commitSelection();
    if (dirty.has("heatmaps") || dirty.has("flags") || dirty.has("selection")) this.commitFlagMarks();
    if (dirty.has("legend")) this.commitLegend();
    if (dirty.has("zoom")) this.toolbar.showZoom(s.heatmap, !!s.zoom);
    if (dirty.has("flags")) this.sidebar.renderFlags(s.flags.filter((f) => this.store.isShown(f.run)), s.flagBand, s.patience, this.store.heatmapRuns().length, s.reasons);
    if (dirty.has("compare")) this.commitCompare();
    if (dirty.has("detail")) this.commitDetail();
  }

  private commitHeatmaps(): void {
    const s = this.store.s, h = s.heatmap;
    this.hideTooltip();
    if (!h) {
      for (const b of this.blocks.values()) b.destroy();
      this.blocks.clear();
      this.heatmaps.replaceChildren(...this.message());
      return;
    }
    const t0 = performance.now();
    const table = this.colors.table(h, s.band, s.dark), colors = themeColors(this.root);
    const width = this.lastWidth || this.plotWidth();
    const shownRuns = h.runs.map((run, runIndex) => ({ run, runIndex })).filter(({ run }) => this.store.isShown(run.run));
    const names = new Set(shownRuns.map(({ run }) => run.run));
    for (const [run, b] of this.blocks) if (!names.has(run)) { b.destroy(); this.blocks.delete(run); }
    const sections = shownRuns.map(({ run, runIndex }) => {
      let b = this.blocks.get(run.run);
      if (!b) this.blocks.set(run.run, (b = new HeatmapBlock(run.run, this)));
      b.update({
        h, runIndex, info: this.store.runInfo(run.run), filter: s.layerFilter, grouped: s.grouped, collapsed: s.collapsed,
        targetLog10: Math.log10(s.band.target), table, width, color: this.color(run.run), colors,
        heldTable: run.heldCells ? this.colors.heldTable(h, s.band, s.dark) : null,
        lineSearch: s.lineSearch.get(run.run) ?? null, metric: s.metric,
      });
      return b.section;
    });
    this.placeSections(sections);
    performance.measure("wur-draw", { start: t0 }); // read by benchmarks/frontend_bench.mjs
  }

  /** The heatmap area's children: the blocks `sections`, the open layer's detail right after
   * the block of its run (the row clicked stays where it was). */
  private placeSections(sections: HTMLElement[]): void {
    const selected = this.store.s.selected;
    const block = selected ? this.blocks.get(selected.run)?.section : undefined;
    const want = block && sections.includes(block) ? sections.flatMap((x) => (x === block ? [x, this.detail.element] : [x])) : sections;
    const children = this.heatmaps.children;
    if (children.length !== want.length || want.some((x, i) => children[i] !== x)) this.heatmaps.replaceChildren(...want);
  }

  /** Each block's flagged rows marked, and the open layer's flag in its detail. */
  private commitFlagMarks(): void {
    const s = this.store.s;
    for (const [run, b] of this.blocks) b.updateFlags(flagsOfRun(s.flags, run), s.reasons);
    const ref = s.selected;
    const flag = ref ? flagsOfRun(s.flags, ref.run).get(ref.tag) ?? null : null;
    this.detail.setFlag(flag, flag ? reasonLabel(s.reasons, flag.reason) : "");
  }

  /** Only the line-search strips changed (a /line_search came in): the blocks' cells stay. */
  private commitLineSearch(): void {
    const colors = themeColors(this.root);
    for (const [run, b] of this.blocks) b.updateLineSearch(this.store.s.lineSearch.get(run) ?? null, colors);
  }

  /** What the heatmap area says without a heatmap. */
  private message(): HTMLElement[] {
    if (this.emptyLogdir) {
      return [el("div", { class: "wur-empty", "data-testid": "wur-empty" },
        el("h2", { text: "No weight-update ratios in this logdir yet" }),
        el("p", { text: "Log them from your training, with the Keras callback or wur_summary.watch around apply_gradients, then press Refresh (or wait for TensorBoard's next reload):" }),
        el("pre", { class: "wur-code", text: 'from tb_wur_plugin.keras import WeightUpdateRatioCallback\nmodel.fit(x, y, callbacks=[WeightUpdateRatioCallback("logs/run1")])' }),
        el("p", { text: "and start TensorBoard with --logdir logs." }))];
    }
    if (!this.store.s.runs.length || this.store.heatmapRuns().length) return []; // loading
    const text = !this.store.filteredRuns().length ? "No run matches the run filter."
      : this.store.selectedRuns().length ? "The selected runs hold no ratios yet." : "No run selected: pick one in the list of runs.";
    return [el("p", { class: "wur-meta", "data-testid": "wur-message", text })];
  }

  private commitSelection(): void {
    const { selected, highlight } = this.store.s;
    this.placeSections(Array.from(this.heatmaps.children).filter((x): x is HTMLElement => x !== this.detail.element && x instanceof HTMLElement));
    for (const b of this.blocks.values()) {
      const box = b.updateSelection(selected, highlight);
      if (box && this.scrollToHighlight) {
        box.scrollIntoView({ block: "center", behavior: "auto" });
        this.scrollToHighlight = false;
      }
    }
  }

  private commitLegend(): void {
    const s = this.store.s;
    if (!s.heatmap) return this.legend.clear();
    const skipped = [...this.blocks.values()].some((b) => b.hasMarks);
    const held = s.heatmap.runs.some((r) => r.heldCells > 0);
    this.legend.update({ domain: this.colors.domain(s.heatmap, s.band), band: s.band, dark: s.dark, colors: themeColors(this.root), skipped, held });
  }

  /** The comparison: hidden with no run shown (the tab shows only that message). */
  private commitCompare(): void {
    const s = this.store.s;
    this.compare.element.hidden = !this.store.heatmapRuns().length;
    if (this.compare.element.hidden) return;
    this.compare.update({
      runs: s.runs.filter((r) => this.store.matchesFilter(r.run)), comparison: s.comparison, error: s.compareError, loading: s.compareLoading,
      width: this.lastWidth || this.plotWidth(), dark: s.dark, colors: themeColors(this.root),
    });
  }

  private commitDetail(): void {
    const s = this.store.s, ref = s.selected;
    if (!ref) return;
    const shown = this.store.isShown(ref.run);
    this.detail.setVisible(shown);
    if (!shown) return;
    this.detail.draw({
      zoom: s.zoom, band: s.band, colors: themeColors(this.root), width: Math.max(240, this.content.clientWidth - 32 - 26),
      skippedAt: new Set(this.store.runInfo(ref.run)?.skipped_at ?? []),
      lineSearch: s.lineSearch.get(ref.run) ?? null,
    });
    if (this.scrollToDetail && !this.detail.loading) {
      this.scrollToDetail = false;
      this.revealDetail(ref);
    }
  }

  /** Scrolls down to show the opened detail, as far as the clicked row stays in view (below
   * the sticky toolbar). */
  private revealDetail(ref: RowRef): void {
    const label = this.blocks.get(ref.run)?.rowLabel(ref.tag);
    const page = document.scrollingElement;
    if (!label || !page || !this.detail.element.isConnected) return;
    const row = label.getBoundingClientRect(), detail = this.detail.element.getBoundingClientRect();
    const top = this.toolbar.element.getBoundingClientRect().bottom;
    page.scrollTop += scrollToShow(row, detail, { top, bottom: window.innerHeight });
  }
}
