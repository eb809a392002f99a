// The layer detail: why the layer is flagged (when it is), its suggested learning rate, its
// ratio over steps, the run's learning rate, the run's line-search step size (when it has one:
// the app's per-run /line_search cache, passed in at each draw) and the layer's histogram
// density, drawn by charts.ts. Its data (what /series and /histograms answered for the layer)
// is cached per (run, tag, metric), so a change of band, theme or zoom redraws it without
// fetching; only a reload clears the cache. The DOM (canvases, readouts) is built once.
import { api, HttpError, Histograms, LayerInfo, LineSearch, ReservedTags, RunInfo, Series } from "./api";
import { KeyedCache } from "./cache";
import { bucketOf, drawDensity, drawLogLine, log10AtY, nearestIndex, rangeIndices, stepAtX } from "./charts";
import type { Band } from "./color";
import { el, nameNodes, proseNodes } from "./dom";
import { isNanFlag } from "./flagged";
import { formatRatio, formatShortRatio, formatStep } from "./format";
import { lineSearchAt } from "./line_search";
import type { FlagRow, RowRef, Zoom } from "./state";
import type { ChartColors } from "./theme";

export interface DetailData {
  series: Series;
  /** series.values as numbers */
  values: number[];
  histograms: Histograms | null;
  /** the run's learning rate, when it logged one */
  lr: { steps: number[]; values: number[] } | null;
}

export type DetailFetch = (run: string, tag: string, metric: string) => Promise<DetailData>;

/** What a layer's detail shows: its ratio series of `metric`, its histograms (when logged)
 * and the run's learning rate (when logged; its tag is the one /runs names). */
export async function fetchDetailData(run: string, tag: string, metric: string, info: RunInfo | undefined, reserved: ReservedTags | null): Promise<DetailData> {
  const layer = info?.layers.find((l) => l.tag === tag);
  const lrTag = info?.has_learning_rate ? reserved?.learning_rate : undefined;
  const [series, histograms, lr] = await Promise.all([
    api.series(run, tag, metric),
    layer?.has_histograms ? api.histograms(run, tag) : null,
    lrTag ? api.series(run, lrTag) : null,
  ]);
  return { series, values: series.values.map(Number), histograms, lr: lr ? { steps: lr.steps, values: lr.values.map(Number) } : null };
}

/** Detail data per (run, tag, metric): one fetch per layer and metric until clear(); a failed
 * fetch is not kept. At most `capacity` entries, the least recently asked for go first. */
export class DetailCache extends KeyedCache<[run: string, tag: string, metric: string], DetailData> {
  constructor(fetch: DetailFetch, capacity = 32) {
    super(fetch, capacity);
  }
}

export interface DetailHost {
  showLines(lines: string[], x: number, y: number): void;
  hideTooltip(): void;
  close(): void;
}

export interface DetailDraw {
  zoom: Zoom | null; band: Band; colors: ChartColors; width: number; skippedAt: ReadonlySet<number>;
  /** the run's line search (from the app's cache: no fetch here), or null */
  lineSearch: LineSearch | null;
}

const RATIO_H = 180, LR_H = 110, HIST_H = 160;

interface Drawn {
  x0: number; x1: number; width: number; steps: number[]; values: number[]; hist: { from: number; steps: number[]; lo: number; hi: number } | null;
  skippedAt: ReadonlySet<number>; lineSearch: LineSearch | null; lineSearchSteps: number[];
}

export class DetailView {
  readonly element = el("section", { class: "wur-detail", "data-testid": "wur-detail", hidden: true, "aria-label": "Layer detail" });
  private readonly swatch = el("span", { class: "wur-swatch" });
  private readonly heading = el("h3");
  private readonly runMeta = el("span", { class: "wur-meta" });
  private readonly flagLabel = el("div", { class: "wur-detail-flag-label" });
  private readonly flagText = el("div");
  private readonly flag = el("div", { class: "wur-detail-flag", "data-testid": "wur-detail-flag", role: "note", hidden: true }, this.flagLabel, this.flagText);
  private readonly description = el("div", { class: "wur-meta" });
  private readonly status = el("div", { class: "wur-meta" });
  private readonly ratioTitle = el("div", { class: "wur-chart-title" });
  private readonly ratio = el("canvas", { "data-testid": "wur-detail-ratio", role: "img" });
  private readonly lrTitle = el("div", { class: "wur-chart-title", text: "Learning rate (log scale)" });
  private readonly lr = el("canvas", { "data-testid": "wur-detail-lr", role: "img", "aria-label": "Learning rate over steps" });
  private readonly stepSizeTitle = el("div", { class: "wur-chart-title", "data-testid": "wur-detail-step-size-title", text: "Step size (line search), log scale" });
  private readonly stepSize = el("canvas", { "data-testid": "wur-detail-step-size", role: "img", "aria-label": "Step size of the line search over steps" });
  private readonly histTitle = el("div", { class: "wur-chart-title", text: "Distribution of the elementwise ratios |Δw_i|/|w_i| (each step's column scaled to its largest bucket)" });
  private readonly hist = el("canvas", { "data-testid": "wur-detail-histogram", role: "img", "aria-label": "Distribution of the elementwise ratios over steps" });
  private readonly noHist = el("div", { class: "wur-meta", text: "No histograms were logged for this layer (histograms=True in the callback or watch logs them)." });
  private readonly suggestion = el("div", { class: "wur-suggestion", "data-testid": "wur-suggested-lr" });
  private readonly caveat = el("div", { class: "wur-meta", "data-testid": "wur-suggested-lr-caveat" });
  private readonly charts = el("div", { hidden: true }, this.ratioTitle, this.ratio, this.lrTitle, this.lr, this.stepSizeTitle, this.stepSize, this.histTitle, this.hist, this.noHist);
  private ref: RowRef | null = null;
  private layer: LayerInfo | undefined;
  private data: DetailData | null = null;
  private drawn: Drawn | null = null;
  private failed = false;

  constructor(private readonly host: DetailHost) {
    const close = el("button", { type: "button", text: "Close", "data-testid": "wur-detail-close" });
    close.addEventListener("click", () => host.close());
    this.element.append(
      el("div", { class: "wur-detail-head" }, this.swatch, this.heading, this.runMeta, el("span", { class: "wur-spacer" }), close),
      this.flag, this.description, this.suggestion, this.caveat, this.status, this.charts,
    );
    this.ratio.addEventListener("mousemove", (e) => this.ratioReadout(e));
    this.hist.addEventListener("mousemove", (e) => this.histReadout(e));
    this.stepSize.addEventListener("mousemove", (e) => this.stepSizeReadout(e));
    for (const c of [this.ratio, this.hist, this.stepSize]) c.addEventListener("mouseleave", () => host.hideTooltip());
  }

  get open(): RowRef | null {
    return this.ref;
  }

  /** Whether the open layer's data is still on its way (neither drawable nor failed). */
  get loading(): boolean {
    return this.ref !== null && this.data === null && !this.failed;
  }

  /** Shows layer `ref` (loading until setData); the same layer again keeps what is drawn. */
  show(ref: RowRef, color: string, layer: LayerInfo | undefined): void {
    const same = this.ref?.run === ref.run && this.ref.tag === ref.tag && !this.element.hidden;
    this.ref = ref;
    this.layer = layer;
    this.swatch.style.background = color;
    this.element.setAttribute("data-run", ref.run);
    this.element.setAttribute("data-tag", ref.tag);
    if (same) return;
    this.element.style.minHeight = this.element.hidden ? "" : `${this.element.offsetHeight}px`; // no layout jump while loading
    this.heading.replaceChildren(...nameNodes(ref.tag));
    this.heading.title = ref.tag;
    this.runMeta.replaceChildren("run ", ...nameNodes(ref.run));
    this.runMeta.title = `run ${ref.run}`;
    this.description.textContent = layer?.description ?? "";
    this.ratio.setAttribute("aria-label", `Ratio of ${ref.tag} over steps, log scale`);
    this.data = null;
    this.drawn = null;
    this.failed = false;
    this.setSuggestion("");
    this.setStatus("Loading…", false);
    this.element.hidden = false;
  }

  /** Why the open layer is flagged: `label` (the reason's, /reasons) and the flag's text
   * (/flags'); `flag` null: it is not. */
  setFlag(flag: FlagRow | null, label: string): void {
    this.flag.hidden = !flag;
    this.flag.classList.toggle("wur-detail-flag-nan", !!flag && isNanFlag(flag));
    if (!flag) {
      this.flag.removeAttribute("data-reason");
      return;
    }
    this.flag.setAttribute("data-reason", flag.reason);
    this.flagLabel.textContent = `Flagged: ${label}`;
    this.flagText.replaceChildren(...proseNodes(flag.text));
  }

  /** The suggested learning rate's text (suggest.ts), or "" while it loads; `caveat`: what
   * the server says a suggestion is worth (/suggestions' `caveat`; "": none shown). */
  setSuggestion(text: string, caveat = ""): void {
    this.suggestion.textContent = text;
    this.caveat.textContent = caveat;
    this.suggestion.hidden = !text;
    this.caveat.hidden = !text || !caveat;
  }

  setData(data: DetailData): void {
    this.data = data;
    if (data.series.description) this.description.textContent = data.series.description;
  }

  setError(e: unknown): void {
    this.data = null;
    this.failed = true;
    if (e instanceof HttpError && e.status === 404) this.setStatus("This layer is not in the data any more.", false);
    else this.setStatus(e instanceof Error ? e.message : String(e), true);
    this.element.style.minHeight = "";
  }

  setVisible(visible: boolean): void {
    this.element.hidden = !visible || !this.ref;
  }

  close(): void {
    this.ref = null;
    this.data = null;
    this.drawn = null;
    this.element.hidden = true;
  }

  private setStatus(text: string, error: boolean): void {
    this.status.textContent = text;
    this.status.className = error ? "wur-error" : "wur-meta";
    this.status.hidden = false;
    this.charts.hidden = true;
  }

  /** Draws the charts from the cached data over the zoomed range (no fetch). */
  draw(v: DetailDraw): void {
    const d = this.data;
    if (!d || !this.ref) return;
    const s = d.series;
    const x0 = v.zoom?.start ?? (s.steps.length ? s.steps[0] : 0);
    let x1 = v.zoom?.end ?? (s.steps.length ? s.steps[s.steps.length - 1] : 1);
    if (x1 <= x0) x1 = x0 + 1;
    const [a, b] = rangeIndices(s.steps, x0, x1);
    const steps = s.steps.slice(a, b), values = d.values.slice(a, b);
    drawLogLine(this.ratio, { steps, values }, x0, x1, v.width, RATIO_H, v.colors, v.band);
    this.ratioTitle.textContent = `Ratio over steps (log scale; shaded: band, dashed: target; ${steps.length} points)`;
    const lr = d.lr && d.lr.steps.length ? d.lr : null;
    this.lrTitle.hidden = this.lr.hidden = !lr;
    if (lr) {
      const [i, j] = rangeIndices(lr.steps, x0, x1);
      drawLogLine(this.lr, { steps: lr.steps.slice(i, j), values: lr.values.slice(i, j) }, x0, x1, v.width, LR_H, v.colors);
    }
    const ls = v.lineSearch && v.lineSearch.steps.length ? v.lineSearch : null;
    this.stepSizeTitle.hidden = this.stepSize.hidden = !ls;
    let lineSearchSteps: number[] = [];
    if (ls) {
      const [i, j] = rangeIndices(ls.steps, x0, x1);
      lineSearchSteps = ls.steps.slice(i, j);
      drawLogLine(this.stepSize, { steps: lineSearchSteps, values: ls.step_size.slice(i, j).map(Number) }, x0, x1, v.width, LR_H, v.colors);
      this.stepSizeTitle.textContent = `Step size (line search), log scale; ${lineSearchSteps.length} searched steps`;
    }
    const h = d.histograms && d.histograms.steps.length ? d.histograms : null;
    this.histTitle.hidden = this.hist.hidden = !h;
    this.noHist.hidden = !!h || !this.layer || this.layer.has_histograms;
    let hist: Drawn["hist"] = null;
    if (h) {
      const [i, j] = rangeIndices(h.steps, x0, x1);
      const hSteps = h.steps.slice(i, j);
      const axis = drawDensity(this.hist, { steps: hSteps, edges: h.edges, firstBin: h.buckets.first_bin, counts: h.counts.slice(i, j) }, x0, x1, v.width, HIST_H, v.colors);
      hist = axis ? { from: i, steps: hSteps, ...axis } : null;
    }
    this.drawn = { x0, x1, width: v.width, steps, values, hist, skippedAt: v.skippedAt, lineSearch: ls, lineSearchSteps };
    this.status.hidden = true;
    this.charts.hidden = false;
    this.element.style.minHeight = "";
  }

  private lrAt(step: number): number | null {
    const lr = this.data?.lr;
    if (!lr || !lr.steps.length) return null;
    const j = nearestIndex(lr.steps, step);
    return lr.steps[j] === step ? lr.values[j] : null;
  }

  private ratioReadout(e: MouseEvent): void {
    const d = this.drawn;
    if (!d || !this.ref) return;
    const rect = this.ratio.getBoundingClientRect();
    const j = nearestIndex(d.steps, stepAtX(e.clientX - rect.left, d.x0, d.x1, d.width));
    if (j < 0) return;
    const step = d.steps[j], value = d.values[j], rate = this.lrAt(step);
    const lines = [this.ref.tag, `step ${formatStep(step)}`, `ratio ${formatRatio(value)}`];
    if (value > 0 && Number.isFinite(value)) lines.push(`log10 ${Math.log10(value).toFixed(2)}`);
    if (rate !== null) lines.push(`learning rate ${formatRatio(rate)}`);
    const searched = lineSearchAt(d.lineSearch, step);
    if (searched) lines.push(`step size (line search) ${formatRatio(searched.stepSize)}, ${formatStep(searched.backtracks)} backtracks`);
    if (d.skippedAt.has(step)) lines.push("skipped step: the optimizer applied no update (ratios 0)");
    this.host.showLines(lines, e.clientX, e.clientY);
  }

  private stepSizeReadout(e: MouseEvent): void {
    const d = this.drawn;
    if (!d?.lineSearch || !this.ref) return;
    const rect = this.stepSize.getBoundingClientRect();
    const j = nearestIndex(d.lineSearchSteps, stepAtX(e.clientX - rect.left, d.x0, d.x1, d.width));
    if (j < 0) return;
    const step = d.lineSearchSteps[j], at = lineSearchAt(d.lineSearch, step)!;
    this.host.showLines([`line search  ·  run ${this.ref.run}`, `step ${formatStep(step)}`, `step size (line search) ${formatRatio(at.stepSize)}`, `backtracks ${formatStep(at.backtracks)}`], e.clientX, e.clientY);
  }

  private histReadout(e: MouseEvent): void {
    const d = this.drawn, h = this.data?.histograms;
    if (!d?.hist || !h || !this.ref) return;
    const rect = this.hist.getBoundingClientRect();
    const j = nearestIndex(d.hist.steps, stepAtX(e.clientX - rect.left, d.x0, d.x1, d.width));
    if (j < 0) return;
    const counts = h.counts[d.hist.from + j], b = h.buckets;
    const total = counts.reduce((a, n) => a + n, 0);
    const lines = [this.ref.tag, `step ${formatStep(d.hist.steps[j])}: ${total} elements`];
    const bucket = bucketOf(h.edges, log10AtY(e.clientY - rect.top, d.hist.lo, d.hist.hi, HIST_H));
    if (bucket >= 0) {
      lines.push(`${formatShortRatio(h.edges[bucket])} ≤ |Δw_i|/|w_i| < ${formatShortRatio(h.edges[bucket + 1])}: ${counts[b.first_bin + bucket] ?? 0}`);
    }
    const special = ([["zero", b.zero], ["below the first edge", b.underflow], ["above the last edge", b.overflow], ["+inf", b.inf], ["NaN", b.nan]] as [string, number][])
      .filter(([, i]) => (counts[i] ?? 0) > 0).map(([name, i]) => `${name}: ${counts[i]}`);
    if (special.length) lines.push(special.join(", "));
    this.host.showLines(lines, e.clientX, e.clientY);
  }
}
