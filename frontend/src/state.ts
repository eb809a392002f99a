// The tab's state, its setters and the one-frame commit (uPlot's discipline): a setter changes
// the state and marks what it made stale; one requestAnimationFrame later, ONE commit redraws
// what is marked. No setter draws. Pure: no DOM here (the scheduler takes its frame function).
import type { FlagInfo, ReservedTags, RunInfo } from "./api";
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
  | "detail";   // the open layer's charts

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

export interface ViewState {
  runs: RunInfo[];
  reservedTags: ReservedTags | null;
  deselected: Set<string>;
  layerFilter: RegExp | null;
  grouped: boolean;
  collapsed: Set<string>;
  reduction: string;
  zoom: Zoom | null;
  band: Band;
  selected: RowRef | null;
  highlight: RowRef | null;
  heatmap: Heatmap | null;
  flags: FlagRow[];
  dark: boolean;
}

/** The state and its setters: each changes one thing and marks what shows it. Loading (what
 * a change must fetch) is the app's business. */
export class Store {
  readonly s: ViewState = {
    runs: [], reservedTags: null, deselected: new Set(), layerFilter: null, grouped: false,
    collapsed: new Set(), reduction: "mean_log10", zoom: null, band: { ...DEFAULT_BAND },
    selected: null, highlight: null, heatmap: null, flags: [], dark: false,
  };

  constructor(readonly scheduler: Scheduler) {}

  private mark(...parts: Part[]): void {
    this.scheduler.mark(...parts);
  }

  setRuns(runs: RunInfo[], reservedTags: ReservedTags | null): void {
    this.s.runs = runs;
    this.s.reservedTags = reservedTags;
    this.mark("runs", "heatmaps", "flags", "detail");
  }

  setRunShown(run: string, shown: boolean): void {
    if (shown) this.s.deselected.delete(run); else this.s.deselected.add(run);
    this.mark("runs", "heatmaps", "legend", "zoom", "flags", "detail");
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

  setReduction(reduction: string): void {
    this.s.reduction = reduction;
  }

  setZoom(zoom: Zoom | null): void {
    this.s.zoom = zoom;
    this.mark("zoom", "detail");
  }

  /** The band recolors (the color domain covers it), redraws the legend, the detail's band. */
  setBand(band: Band): void {
    this.s.band = band;
    this.mark("heatmaps", "legend", "detail");
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

  setDark(dark: boolean): void {
    this.s.dark = dark;
    this.mark("heatmaps", "legend", "detail");
  }

  /** The runs shown, in the order of /runs. */
  selectedRuns(): string[] {
    return this.s.runs.map((r) => r.run).filter((r) => !this.s.deselected.has(r));
  }

  /** Shown runs that hold ratios (a run may hold only histograms or a learning rate). */
  heatmapRuns(): string[] {
    const withRatios = new Set(this.s.runs.filter((r) => r.first_step !== null && r.layers.length).map((r) => r.run));
    return this.selectedRuns().filter((r) => withRatios.has(r));
  }

  runInfo(run: string): RunInfo | undefined {
    return this.s.runs.find((r) => r.run === run);
  }
}
