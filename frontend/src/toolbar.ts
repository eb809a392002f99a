// The toolbar: refresh, layer filter, grouping, reduction, metric (when there is a choice), zoom
// (label, reset), band, status.
import { Band, DEFAULT_BAND } from "./color";
import { compileFilter, el } from "./dom";
import { formatShortRatio, formatStep } from "./format";
import type { Heatmap } from "./codec";

const REDUCTIONS: [string, string][] = [
  ["mean_log10", "geometric mean"], ["max", "max"], ["min", "min"], ["last", "last"],
];

/** The switch's label of a metric of /runs (an unknown one: its name). */
export function metricLabel(metric: string): string {
  return metric === "frobenius" ? "Frobenius ‖Δw‖/‖w‖" : metric === "spectral" ? "spectral ‖ΔW‖₂/‖W‖₂" : metric;
}

export interface ToolbarHost {
  refresh(): void;
  setLayerFilter(filter: RegExp | null): void;
  setGrouped(grouped: boolean): void;
  setReduction(reduction: string): void;
  setMetric(metric: string): void;
  resetZoom(): void;
  /** `explicit` false: the band fields were cleared (the default judgement, the default band's colors) */
  setBand(band: Band, explicit?: boolean): void;
  setPatience(patience: number): void;
}

/** The band from the two inputs' text, or what is wrong with it; an empty field takes the
 * default band's bound. */
export function parseBand(lowText: string, highText: string): Band | string {
  const low = lowText.trim() ? Number(lowText) : DEFAULT_BAND.low, high = highText.trim() ? Number(highText) : DEFAULT_BAND.high;
  const ok = low > 0 && high > 0 && Number.isFinite(low) && Number.isFinite(high) && low < high;
  return ok ? { low, high, target: Math.sqrt(low * high) } : "The band needs 0 < low < high (e.g. 1e-4 and 1e-2).";
}

/** The patience (judged steps in a row out of the band before a layer is flagged) from the
 * input's text, or what is wrong with it. */
export function parsePatience(text: string): number | string {
  const t = text.trim();
  const n = /^\d+$/.test(t) ? Number(t) : NaN;
  return Number.isSafeInteger(n) && n >= 1 ? n : "The patience needs a whole number of steps ≥ 1 (e.g. 5).";
}

export class Toolbar {
  readonly element: HTMLElement;
  readonly status = el("span", { class: "wur-status", role: "status", "aria-live": "polite" });
  readonly layerFilter = el("input", { type: "text", placeholder: "Filter layers (regex)", "aria-label": "Filter layers by regular expression", "data-testid": "wur-layer-filter", size: 18 });
  private readonly layerFilterHint = el("span", { class: "wur-hint", role: "alert", "data-testid": "wur-filter-error" });
  private readonly groupBox = el("input", { type: "checkbox", "data-testid": "wur-group" });
  private readonly reduction = el("select", { "aria-label": "Reduction of a binned column", "data-testid": "wur-reduction" });
  private readonly metric = el("select", { "aria-label": "Metric of the ratios", "data-testid": "wur-metric" });
  private readonly metricField = el("label", { class: "wur-field", hidden: true, title: "Which ratios the heatmaps, flags, comparison, layer detail and export show: Frobenius ‖Δw‖/‖w‖ of every parameter, or the spectral ratio ‖ΔW‖₂/‖W‖₂ of the matrices" }, "Metric", this.metric);
  private readonly zoomLabel = el("span", { class: "wur-meta", "data-testid": "wur-zoom-label" });
  private readonly resetZoom = el("button", { type: "button", "data-testid": "wur-reset-zoom", text: "Reset zoom", disabled: true, title: "Show every step (double-click a heatmap does the same)" });
  private readonly refresh = el("button", { type: "button", "data-testid": "wur-refresh", text: "Refresh", title: "Reload the data" });
  // empty until the user sets a band: the flags use the default judgement (no band sent)
  private readonly low = el("input", { type: "text", class: "wur-band", placeholder: "1e-4", "aria-label": "Lower bound of the band (optional: set, layers out of it are flagged too)", "data-testid": "wur-band-low" });
  private readonly high = el("input", { type: "text", class: "wur-band", placeholder: "1e-2", "aria-label": "Upper bound of the band (optional: set, layers out of it are flagged too)", "data-testid": "wur-band-high" });
  private readonly bandHint = el("span", { class: "wur-hint", role: "alert" });
  private readonly patience = el("input", { type: "text", class: "wur-patience", value: "5", inputmode: "numeric", "aria-label": "Patience: judged steps in a row out of the band before a layer is flagged", "data-testid": "wur-patience" });
  private readonly patienceHint = el("span", { class: "wur-hint", role: "alert", "data-testid": "wur-patience-error" });

  constructor(host: ToolbarHost) {
    for (const [value, label] of REDUCTIONS) this.reduction.append(el("option", { value, text: label }));
    this.element = el("header", { class: "wur-toolbar" },
      el("h1", { text: "Weight-update ratios ‖Δw‖/‖w‖" }),
      this.refresh,
      el("label", { class: "wur-field" }, "Layers", this.layerFilter), this.layerFilterHint,
      el("label", { class: "wur-field", title: "Put the variables of one layer (kernel, bias) under a collapsible header row showing the worst of them" }, this.groupBox, "Group by layer"),
      el("label", { class: "wur-field", title: "How the ratios of a column that holds several logged steps are combined" }, "Bins", this.reduction),
      this.metricField,
      this.resetZoom, this.zoomLabel,
      el("span", { class: "wur-field", title: "Optional. Empty: the flags use the default judgement (defects whatever the optimizer) and the colors the band 1e-4–1e-2. Set: layers out of the band for `patience` judged steps are flagged too" }, el("label", { text: "Band" }), this.low, "–", this.high), this.bandHint,
      el("label", { class: "wur-field", title: "Judged steps in a row a finding must last before a layer is flagged (not moving, far from its peers, out of the band)" }, "Patience", this.patience), this.patienceHint,
      this.status,
    );
    this.refresh.addEventListener("click", () => host.refresh());
    this.layerFilter.addEventListener("input", () => {
      const filter = compileFilter(this.layerFilter.value);
      this.layerFilter.classList.toggle("wur-invalid", filter instanceof Error);
      this.layerFilterHint.textContent = filter instanceof Error ? `Invalid regular expression: ${filter.message}` : "";
      if (!(filter instanceof Error)) host.setLayerFilter(filter); // else keep the last valid one
    });
    this.groupBox.addEventListener("change", () => host.setGrouped(this.groupBox.checked));
    this.reduction.addEventListener("change", () => host.setReduction(this.reduction.value));
    this.metric.addEventListener("change", () => host.setMetric(this.metric.value));
    this.resetZoom.addEventListener("click", () => host.resetZoom());
    for (const input of [this.low, this.high]) {
      input.addEventListener("change", () => {
        const cleared = !this.low.value.trim() && !this.high.value.trim();
        const band = parseBand(this.low.value, this.high.value);
        const ok = typeof band !== "string";
        this.low.classList.toggle("wur-invalid", !ok);
        this.high.classList.toggle("wur-invalid", !ok);
        this.bandHint.textContent = ok ? "" : band;
        if (!ok) return;
        if (cleared) return host.setBand(band, false); // back to the default judgement
        // one field set: the other shows the bound in force
        if (!this.low.value.trim()) this.low.value = formatShortRatio(band.low);
        if (!this.high.value.trim()) this.high.value = formatShortRatio(band.high);
        host.setBand(band, true);
      });
    }
    this.patience.addEventListener("change", () => {
      const patience = parsePatience(this.patience.value);
      const ok = typeof patience !== "string";
      this.patience.classList.toggle("wur-invalid", !ok);
      this.patienceHint.textContent = ok ? "" : patience;
      if (ok) host.setPatience(patience);
    });
  }

  /** The metric switch: hidden when `metrics` is null (only the default metric), else its
   * options with `current` chosen. */
  showMetrics(metrics: readonly string[] | null, current: string): void {
    this.metricField.hidden = !metrics;
    const options = metrics ?? [];
    if ([...this.metric.options].map((o) => o.value).join("\n") !== options.join("\n")) {
      this.metric.replaceChildren(...options.map((m) => el("option", { value: m, text: metricLabel(m) })));
    }
    this.metric.value = current;
  }

  clearLayerFilter(): void {
    this.layerFilter.value = "";
    this.layerFilter.dispatchEvent(new Event("input"));
  }

  /** The zoom label says the range shown; empty without a heatmap. */
  showZoom(h: Heatmap | null, zoomed: boolean): void {
    this.resetZoom.disabled = !zoomed;
    if (!h) {
      this.zoomLabel.textContent = "";
      return;
    }
    const binned = h.columnCount.some((c) => c > 1);
    this.zoomLabel.textContent = `steps ${formatStep(h.start)}–${formatStep(h.end)}` + (binned ? ` in ${h.columns} bins` : "") + (zoomed ? " (zoomed)" : "");
  }

  setBusy(busy: boolean): void {
    this.status.textContent = busy ? "Loading…" : "";
    this.status.classList.toggle("wur-busy", busy);
  }
}
