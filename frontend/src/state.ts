// The tab's state, its setters and the one-frame commit (uPlot's discipline): a setter changes
// the state and marks what it made stale; one requestAnimationFrame later, ONE commit redraws
// what is marked. No setter draws. Pure: no DOM here (the scheduler takes its frame function).
import { Comparison, DEFAULT_METRIC, FlagInfo, LineSearch, Reason, ReservedTags, RunInfo } from "./api";
import type { Heatmap } from "./codec";
import { Band, DEFAULT_BAND } from "./color";

/** What a commit can redraw. */
export type Part =
  | "runs"      // the run list (names, colors, checkboxes)
  | "heatmaps"  // every shown run's block: rows, canvas, marks, axis, labels
  | "selection" // which row label is selected / highlighted (no canvas redraw)
  | "legend"    // the color scale and the special cells
  | "zoom"      // the zoom label and the reset button
  | "flags"     // the flags list and its note
  | "lineSearch" // the line-search strips above the heatmaps (no canvas redraw of the cells)
  | "compare"   // the run comparison (pickers, its heatmap, legend, ranking)
  | "detail";   // the open layer's charts

export const DEFAULT_PATIENCE = 5;

export interface Zoom { start: number; end: number }
export interface RowRef { run: string; tag: string }
export type FlagRow = FlagInfo & { run: string };

/** Collects dirty marks and runs `commit` once per frame with all of them. A mark made during a
 * commit schedules the next frame. */
export class Scheduler {
  private dirty = new Set<Part>();
  private pending = false;

  constructor(
    private readonly commit: (dirty: ReadonlySet<Part>) => void,
    private readonly frame: (callback: () => void) => unknown = (cb) => requestAnimationFrame(cb),
  ) {}

  mark(...parts: Part[]): void {
    for (const p of parts) this.dirty.add(p);
    if (this.pending || !this.dirty.size) return;
    this.pending = true;
    this.frame(() => this.flush());
  }

  isMarked(part: Part): boolean {
    return this.dirty.has(part);
  }

  /** Runs the commit now with what is marked (the frame callback; also for tests). */
  flush(): void {
    this.pending = false;
    if (!this.dirty.size) return;
    const dirty = this.dirty;
    this.dirty = new Set();
    this.commit(dirty);
  }
}

/** The metrics the tab offers a switch between: /runs' top-level `metrics` (absent: the
 * default metric only); null when that is only the default metric (no switch shown). */
export function metricChoices(metrics: readonly string[] | undefined): string[] | null {
  const list = metrics?.length ? [...metrics] : [DEFAULT_METRIC];
  return list.some((m) => m !== DEFAULT_METRIC) ? list : null;
}

/** Whether a /runs entry has ratios of `metric` (an entry without `metrics`: the default
 * metric only). */
export function runHasMetric(info: RunInfo, metric: string): boolean {
  return (info.metrics ?? [DEFAULT_METRIC]).includes(metric);
}

export interface ViewState {
  runs: RunInfo[];
  reservedTags: ReservedTags | null;
  deselected: Set<string>;
  /** the run filter: runs whose name it does not match are hidden (heatmaps, flags,
   * comparison choices), whatever their checkbox says */
  runFilter: RegExp | null;
  layerFilter: RegExp | null;
  grouped: boolean;
  collapsed: Set<string>;
  reduction: string;
  /** the metric of the ratios shown (heatmaps, flags, comparison, detail, export links) */
  metric: string;
  /** the metrics to switch between (metricChoices of /runs), null: no switch */
  metrics: string[] | null;
  zoom: Zoom | null;
  /** the band of the colors and the legend (the default until the user sets one) */
  band: Band;
  /** the band the flags judge by: set by the user, else null (the default judgement: /flags
   * without low/high) */
  flagBand: Band | null;
  /** judged steps in a row out of the band before a layer is flagged (/flags' patience) */
  patience: number;
  /** the runs compared (A, B), null until both are picked */
  comparePair: [string, string] | null;
  comparison: Comparison | null;
  compareError: string | null;
  compareLoading: boolean;
  selected: RowRef | null;
  highlight: RowRef | null;
  heatmap: Heatmap | null;
  flags: FlagRow[];
  /** the judgement's reasons (/reasons, fetched once; [] until they come in) */
  reasons: Reason[];
  /** /line_search per run (runs whose /runs entry says has_line_search) */
  lineSearch: Map<string, LineSearch>;
  dark: boolean;
}

/** The state and its setters: each changes one thing and marks what shows it. Loading (what
 * a change must fetch) is the app's business. */
export class Store {
  readonly s: ViewState = {
    runs: [], reservedTags: null, deselected: new Set(), runFilter: null, layerFilter: null, grouped: false,
    collapsed: new Set(), reduction: "mean_log10", metric: DEFAULT_METRIC, metrics: null, zoom: null, band: { ...DEFAULT_BAND }, flagBand: null, patience: DEFAULT_PATIENCE,
    comparePair: null, comparison: null, compareError: null, compareLoading: false,
    selected: null, highlight: null, heatmap: null, flags: [], reasons: [], lineSearch: new Map(), dark: false,
  };

  constructor(readonly scheduler: Scheduler) {}

  private mark(...parts: Part[]): void {
    this.scheduler.mark(...parts);
  }

  /** `metrics`: /runs' top-level list; a metric no run has any more falls back to the
   * default one. */
  setRuns(runs: RunInfo[], reservedTags: ReservedTags | null, metrics?: readonly string[]): void {
    this.s.runs = runs;
    this.s.reservedTags = reservedTags;
    this.s.metrics = metricChoices(metrics);
    if (!(this.s.metrics ?? [DEFAULT_METRIC]).includes(this.s.metric)) this.s.metric = DEFAULT_METRIC;
    const withLineSearch = new Set(runs.filter((r) => r.has_line_search === true).map((r) => r.run));
    for (const run of [...this.s.lineSearch.keys()]) if (!withLineSearch.has(run)) this.s.lineSearch.delete(run);
    this.mark("runs", "heatmaps", "flags", "detail", "compare");
  }

  /** A run's line search (null: it has none); the same data again marks nothing. */
  setLineSearch(run: string, data: LineSearch | null): void {
    if ((this.s.lineSearch.get(run) ?? null) === data) return;
    if (data) this.s.lineSearch.set(run, data); else this.s.lineSearch.delete(run);
    this.mark("lineSearch", "detail");
  }

  setRunShown(run: string, shown: boolean): void {
    if (shown) this.s.deselected.delete(run); else this.s.deselected.add(run);
    this.mark("runs", "heatmaps", "legend", "zoom", "flags", "detail", "compare");
  }

  /** The run filter: the runs shown change like a run toggle's. */
  setRunFilter(filter: RegExp | null): void {
    this.s.runFilter = filter;
    this.mark("runs", "heatmaps", "legend", "zoom", "flags", "detail", "compare");
  }

  setLayerFilter(filter: RegExp | null): void {
    this.s.layerFilter = filter;
    this.mark("heatmaps");
  }

  setGrouped(grouped: boolean): void {
    this.s.grouped = grouped;
    this.mark("heatmaps");
  }

  toggleCollapsed(group: string, collapsed = !this.s.collapsed.has(group)): void {
    if (collapsed) this.s.collapsed.add(group); else this.s.collapsed.delete(group);
    this.mark("heatmaps");
  }

  /** Another metric: everything that shows ratios is stale (its data must be fetched again:
   * the app's business); the same metric again marks nothing. */
  setMetric(metric: string): void {
    if (metric === this.s.metric) return;
    this.s.metric = metric;
    this.s.comparison = null;
    this.s.compareError = null;
    this.mark("heatmaps", "legend", "zoom", "flags", "detail", "compare");
  }

  setReduction(reduction: string): void {
    this.s.reduction = reduction;
  }

  setZoom(zoom: Zoom | null): void {
    this.s.zoom = zoom;
    this.mark("zoom", "detail");
  }

  /** The band recolors (the color domain covers it), redraws the legend, the detail's band;
   * `explicit` (the user set it): the flags judge by it too, else by the default judgement. */
  setBand(band: Band, explicit = true): void {
    this.s.band = band;
    this.s.flagBand = explicit ? band : null;
    this.mark("heatmaps", "legend", "detail");
  }

  /** The patience changes only the flags (judged on the server): nothing is redrawn until
   * they come in (setFlags). */
  setPatience(patience: number): void {
    this.s.patience = patience;
  }

  /** The runs to compare (null: not both picked); the comparison shown is dropped. */
  setComparePair(pair: [string, string] | null): void {
    this.s.comparePair = pair;
    this.s.comparison = null;
    this.s.compareError = null;
    this.mark("compare");
  }

  setComparison(comparison: Comparison | null, error: string | null = null): void {
    this.s.comparison = comparison;
    this.s.compareError = error;
    this.s.compareLoading = false;
    this.mark("compare");
  }

  setCompareLoading(loading: boolean): void {
    this.s.compareLoading = loading;
    this.mark("compare");
  }

  setSelected(ref: RowRef | null): void {
    this.s.selected = ref;
    this.mark("selection", "detail");
  }

  setHighlight(ref: RowRef | null): void {
    this.s.highlight = ref;
    this.mark("selection");
  }

  setHeatmap(heatmap: Heatmap | null): void {
    this.s.heatmap = heatmap;
    this.mark("heatmaps", "legend", "zoom");
  }

  setFlags(flags: FlagRow[]): void {
    this.s.flags = flags;
    this.mark("flags");
  }

  /** The reasons name what the flags' note says the judgement flags. */
  setReasons(reasons: Reason[]): void {
    this.s.reasons = reasons;
    this.mark("flags");
  }

  setDark(dark: boolean): void {
    this.s.dark = dark;
    this.mark("heatmaps", "legend", "detail", "compare");
  }

  /** Whether `run` matches the run filter (no filter: every run). */
  matchesFilter(run: string): boolean {
    const f = this.s.runFilter;
    if (!f) return true;
    f.lastIndex = 0;
    return f.test(run);
  }

  /** The runs the run filter lets through, in the order of /runs. */
  filteredRuns(): string[] {
    return this.s.runs.map((r) => r.run).filter((r) => this.matchesFilter(r));
  }

  /** The runs shown: through the run filter and checked, in the order of /runs. */
  selectedRuns(): string[] {
    return this.filteredRuns().filter((r) => !this.s.deselected.has(r));
  }

  /** Whether `run` is shown (through the filter and checked). */
  isShown(run: string): boolean {
    return this.matchesFilter(run) && !this.s.deselected.has(run);
  }

  /** Shown runs that hold ratios of the metric shown (a run may hold only histograms or a
   * learning rate, or no spectral ratios). */
  heatmapRuns(): string[] {
    const metric = this.s.metric;
    const withRatios = new Set(this.s.runs.filter((r) => r.first_step !== null && r.layers.length && runHasMetric(r, metric)).map((r) => r.run));
    return this.selectedRuns().filter((r) => withRatios.has(r));
  }

  /** Shown runs with ratios whose /runs entry says they hold line-search data (a missing
   * has_line_search is false). */
  lineSearchRuns(): string[] {
    return this.heatmapRuns().filter((r) => this.runInfo(r)?.has_line_search === true);
  }

  runInfo(run: string): RunInfo | undefined {
    return this.s.runs.find((r) => r.run === run);
  }
}
