// The run comparison: two runs picked, ONE heatmap of log10(ratio_A / ratio_B) over their
// common layers and steps (/compare, binned on the server like /heatmap), on a diverging
// scale centred on A/B = 1 (color.ts), rows ranked by how far the runs diverge (the header's
// ranking) with the divergence beside each row, its own legend and tooltip. The DOM is built
// once; update() redraws the canvas only when the comparison, the theme or the width changed.
// Fetching is the app's business (on picking the runs, on zoom and on reload only).
import type { Comparison, CompareRank, RunInfo } from "./api";
import { cellKind, codeLog10, decodeCode } from "./codec";
import {
  COMPARE_SPECIAL_MEANING, CompareSpecial, compareColorTable, compareSpecialColors, codeExtent, Domain, divergingDomain,
  divergingRamp, domainPosition,
} from "./color";
import { el, sameKeys, setAttrs } from "./dom";
import { cellAt, drawHeatmap } from "./draw";
import { columnLabel, formatPow10, formatRatio, formatStep } from "./format";
import { drawScaleBar, SCALE_BAR_H, SCALE_BAR_W, SCALE_X0 } from "./legend";
import type { ChartColors } from "./theme";

export const COMPARE_ROW_H = 16;
/** CSS px right of the plot for each row's divergence. */
export const RANKING_WIDTH = 150;

export interface CompareHost {
  pickCompare(runA: string, runB: string): void;
  showLines(lines: string[], x: number, y: number): void;
  hideTooltip(): void;
}

/** Rows of the comparison: indices into `tags`, in the ranking's order (largest divergence
 * first); a tag the ranking lacks comes last, in `tags` order. */
export function rankedRows(tags: string[], ranking: CompareRank[]): number[] {
  const index = new Map(tags.map((t, i) => [t, i]));
  const seen = new Set<number>();
  for (const r of ranking) {
    const i = index.get(r.tag);
    if (i !== undefined) seen.add(i);
  }
  for (const i of tags.keys()) seen.add(i);
  return [...seen];
}

/** What the quotient of a cell says. */
export function quotientText(code: number, c: Comparison["codes"]): string {
  switch (cellKind(code, c)) {
    case "value": return `A/B ${formatRatio(decodeCode(code, c))}`;
    case "missing": return "A/B not compared (a run did not log this step, or skipped it)";
    case "nan": return "A/B NaN (a ratio is NaN)";
    case "inf": return "A/B +inf (only A moved)";
    case "zero": return "A/B 0 (only B moved)";
    case "tiny": return "A/B below 1e-40";
    case "huge": return "A/B 1e24 or more";
  }
}

/** The tooltip of cell (tag index, column k). */
export function compareTooltipLines(cmp: Comparison, tagIndex: number, k: number): string[] {
  const code = cmp.cells[tagIndex * cmp.columns + k];
  const lines = [cmp.tags[tagIndex], columnLabel(cmp, k), quotientText(code, cmp.codes)];
  if (cellKind(code, cmp.codes) === "value") {
    const lg = codeLog10(code, cmp.codes);
    lines.push(`log10(A/B) ${lg >= 0 ? "+" : ""}${lg.toFixed(2)}: ${lg > 0 ? "A's ratio is the larger" : lg < 0 ? "B's ratio is the larger" : "equal"}`);
  }
  if (cmp.columnCount[k] > 1) lines.push(`geometric mean of ${cmp.columnCount[k]} common steps`);
  lines.push(`A: ${cmp.runA}`, `B: ${cmp.runB}`);
  return lines;
}

/** The divergence of a ranked layer, in words. */
export function divergenceText(r: CompareRank): string {
  if (r.divergence === null || !Number.isFinite(r.divergence)) return "no common finite step";
  const typical = r.median_log10_ratio === null ? "" : `, A/B typically ${formatRatio(10 ** r.median_log10_ratio)}`;
  return `divergence ${formatRatio(r.divergence)}${typical}`;
}

/** The divergence of a ranked layer beside its row: the number and the typical A/B, short
 * enough for RANKING_WIDTH (divergenceText in full on hover). */
export function rankingText(r: CompareRank): string {
  if (r.divergence === null || !Number.isFinite(r.divergence)) return "no common finite step";
  const typical = r.median_log10_ratio === null ? "" : `  ·  A/B ${formatRatio(10 ** r.median_log10_ratio)}`;
  return `${formatRatio(r.divergence)}${typical}`;
}

/** The diverging domain of a comparison (symmetric in log10 around 0). */
export function compareDomain(cmp: Comparison): Domain {
  const [lo, hi] = codeExtent([cmp.cells], cmp.codes);
  return divergingDomain(lo, hi);
}

export interface CompareUpdate { runs: RunInfo[]; comparison: Comparison | null; error: string | null; loading: boolean; width: number; dark: boolean; colors: ChartColors }

export class CompareView {
  readonly element = el("section", { class: "wur-compare-section", "data-testid": "wur-compare-section", "aria-label": "Compare two runs" });
  private readonly a = el("select", { "data-testid": "wur-compare-a", "aria-label": "Run A of the comparison" });
  private readonly b = el("select", { "data-testid": "wur-compare-b", "aria-label": "Run B of the comparison" });
  private readonly status = el("div", { class: "wur-meta", "data-testid": "wur-compare-status" });
  private readonly legendCanvas = el("canvas", { role: "img" });
  private readonly legendTitle = el("div", { class: "wur-chart-title" });
  private readonly swatches = new Map<CompareSpecial, HTMLElement>();
  private readonly legend = el("div", { class: "wur-legend", "data-testid": "wur-compare-legend" });
  private readonly labels = el("div", { class: "wur-labels" });
  private readonly canvas = el("canvas", { "data-testid": "wur-compare", role: "img", tabindex: 0 });
  private readonly ranking = el("ol", { class: "wur-compare-ranking", "data-testid": "wur-compare-ranking", "aria-label": "Layers ranked by divergence" });
  private readonly body = el("div", { class: "wur-compare-grid" }, this.labels, el("div", { class: "wur-plot" }, this.canvas), this.ranking);
  private runKey: string[] = [];
  private drawnKey: unknown[] = [];
  private cmp: Comparison | null = null;
  private rows: number[] = [];
  private cssWidth = 0;

  constructor(private readonly host: CompareHost) {
    for (const s of Object.keys(COMPARE_SPECIAL_MEANING) as CompareSpecial[]) {
      const sw = el("span", { class: "wur-swatch" });
      this.swatches.set(s, sw);
    }
    const specials = el("div", { class: "wur-legend-specials" }, ...[...this.swatches].map(([s, sw]) => el("span", { class: "wur-legend-special" }, sw, el("span", { text: COMPARE_SPECIAL_MEANING[s] }))));
    this.legend.append(el("div", {}, this.legendTitle, this.legendCanvas), specials);
    this.element.append(
      el("h2", { text: "Compare two runs" }),
      el("div", { class: "wur-block-head" },
        el("label", { class: "wur-field" }, "A", this.a), el("span", { class: "wur-meta", text: "÷" }),
        el("label", { class: "wur-field" }, "B", this.b)),
      this.status, this.legend, this.body,
    );
    this.legend.hidden = this.body.hidden = true;
    const pick = () => host.pickCompare(this.a.value, this.b.value);
    this.a.addEventListener("change", pick);
    this.b.addEventListener("change", pick);
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.canvas.addEventListener("mouseleave", () => host.hideTooltip());
  }

  /** The runs picked ("" where none). */
  get picked(): [string, string] {
    return [this.a.value, this.b.value];
  }

  update(v: CompareUpdate): void {
    this.updateOptions(v.runs);
    const cmp = v.comparison;
    const [ra, rb] = this.picked;
    this.status.className = v.error ? "wur-error" : "wur-meta";
    this.status.textContent = v.error ?? (!ra || !rb ? "Pick two runs: each cell is ratio_A / ratio_B of a layer both runs have, at a step both logged."
      : v.loading && !cmp ? "Loading…"
        : cmp ? `${cmp.tags.length} common layer${cmp.tags.length === 1 ? "" : "s"}, steps ${formatStep(cmp.start)}–${formatStep(cmp.end)} in ${cmp.columns} column${cmp.columns === 1 ? "" : "s"}; rows ranked by divergence (the median |log10(A/B)|: 1 = ten times apart), given beside each row with its typical A/B` : "");
    const shown = !!cmp && !v.error;
    this.legend.hidden = this.body.hidden = !shown;
    if (!shown) {
      this.cmp = null;
      this.drawnKey = [];
      for (const a of ["data-run-a", "data-run-b", "data-rows", "data-cols"]) this.canvas.removeAttribute(a);
      return;
    }
    const key = [cmp, v.dark, v.width];
    if (sameKeys(key, this.drawnKey)) return;
    this.drawnKey = key;
    this.cmp = cmp;
    this.rows = rankedRows(cmp.tags, cmp.ranking);
    const d = compareDomain(cmp);
    this.cssWidth = Math.max(60, v.width - RANKING_WIDTH);
    drawHeatmap(this.canvas, cmp.cells, cmp.columns, this.rows, compareColorTable(d, { dark: v.dark }, cmp.codes), this.cssWidth, this.rows.length * COMPARE_ROW_H);
    setAttrs(this.canvas, { "data-run-a": cmp.runA, "data-run-b": cmp.runB, "data-rows": this.rows.length, "data-cols": cmp.columns, "data-start": cmp.start, "data-end": cmp.end, "aria-label": `ratio of ${cmp.runA} over ${cmp.runB}, ${this.rows.length} layers` });
    const byTag = new Map(cmp.ranking.map((r) => [r.tag, r]));
    this.labels.replaceChildren(...this.rows.map((i) => el("div", { class: "wur-label wur-compare-label", title: cmp.tags[i] }, el("span", { text: cmp.tags[i] }))));
    this.ranking.replaceChildren(...this.rows.map((i) => {
      const r = byTag.get(cmp.tags[i]) ?? { tag: cmp.tags[i], divergence: null, median_log10_ratio: null, steps: 0 };
      return el("li", { "data-tag": r.tag, "data-divergence": r.divergence === null ? "" : String(r.divergence), title: `${r.tag}: ${divergenceText(r)} over ${r.steps} steps`, text: rankingText(r) });
    }));
    this.body.style.setProperty("--row-height", `${COMPARE_ROW_H}px`);
    this.body.style.setProperty("--row-font", "12px");
    this.drawLegend(d, v);
  }

  private updateOptions(runs: RunInfo[]): void {
    const names = runs.filter((r) => r.first_step !== null && r.layers.length).map((r) => r.run);
    if (sameKeys(names, this.runKey)) return;
    this.runKey = names;
    for (const select of [this.a, this.b]) {
      const keep = select.value;
      select.replaceChildren(el("option", { value: "", text: "—" }), ...names.map((n) => el("option", { value: n, text: n })));
      select.value = names.includes(keep) ? keep : "";
    }
  }

  private drawLegend(d: Domain, v: CompareUpdate): void {
    const X0 = SCALE_X0, BAR_W = SCALE_BAR_W, BAR_Y = 6, BAR_H = SCALE_BAR_H, c = this.legendCanvas;
    const ctx = drawScaleBar(c, divergingRamp(), 40, BAR_Y);
    ctx.strokeStyle = v.colors.muted;
    ctx.strokeRect(X0, BAR_Y, BAR_W, BAR_H);
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.fillStyle = v.colors.muted;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const step = Math.max(1, Math.ceil((d.hi - d.lo) / 8));
    for (let k = 0; k <= d.hi; k += step) {
      for (const x of k === 0 ? [0] : [k, -k]) {
        const px = X0 + domainPosition(x, d) * BAR_W;
        ctx.fillRect(Math.round(px), BAR_Y + BAR_H, 1, 3);
        ctx.fillText(formatPow10(x), px, BAR_Y + BAR_H + 4);
      }
    }
    c.setAttribute("aria-label", `Color scale: ratio_A / ratio_B from ${formatPow10(d.lo)} to ${formatPow10(d.hi)}, 1 at the centre`);
    this.legendTitle.textContent = `Color: ratio_A / ratio_B on a log scale, 1 (white) at the centre; orange: A's ratio larger, purple: B's`;
    const colors = compareSpecialColors({ dark: v.dark });
    for (const [s, sw] of this.swatches) sw.style.background = colors[s];
  }

  private hover(e: MouseEvent): void {
    const cmp = this.cmp;
    if (!cmp) return;
    const rect = this.canvas.getBoundingClientRect();
    const at = cellAt(e.clientX - rect.left, e.clientY - rect.top, rect.width, COMPARE_ROW_H, this.rows.length, cmp.columns);
    if (!at) return this.host.hideTooltip();
    this.host.showLines(compareTooltipLines(cmp, this.rows[at.row], at.col), e.clientX, e.clientY);
  }
}
