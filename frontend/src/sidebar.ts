// The sidebar: the run list (filter, All/None, a checkbox per run) and the flags (layers that
// left the band, worst first as the backend ranks them; a click reveals the row).
import type { FlagInfo, RunInfo } from "./api";
import { compileFilter, el } from "./dom";
import { formatShortRatio, formatStep } from "./format";
import type { Band } from "./color";
import type { FlagRow, RowRef } from "./state";

const MAX_FLAGS_SHOWN = 200;

export interface SidebarHost {
  setRunShown(run: string, shown: boolean): void;
  setRunsShown(runs: string[], shown: boolean): void;
  revealRow(ref: RowRef): void;
}

export class Sidebar {
  readonly element = el("aside", { class: "wur-sidebar" });
  private readonly runFilter = el("input", { type: "text", placeholder: "Filter runs (regex)", "aria-label": "Filter runs" });
  private readonly runList = el("ul", { class: "wur-runs", "aria-label": "Runs" });
  private readonly flagsNote = el("div", { class: "wur-flag-meta", "data-testid": "wur-flags-note" });
  private readonly flagsList = el("ul", { class: "wur-flags", "data-testid": "wur-flags", "aria-label": "Flagged layers" });
  private runs: RunInfo[] = [];
  private deselected: ReadonlySet<string> = new Set();
  private colorOf: (run: string) => string = () => "";

  constructor(private readonly host: SidebarHost) {
    const all = el("button", { type: "button", text: "All", "data-testid": "wur-runs-all" });
    const none = el("button", { type: "button", text: "None", "data-testid": "wur-runs-none" });
    all.addEventListener("click", () => host.setRunsShown(this.filteredRuns(), true));
    none.addEventListener("click", () => host.setRunsShown(this.filteredRuns(), false));
    this.element.append(
      el("h2", { text: "Runs" }), this.runFilter, el("div", {}, all, " ", none), this.runList,
      el("h2", { text: "Flags: out of band" }), this.flagsNote, this.flagsList,
    );
    this.runFilter.addEventListener("input", () => this.renderRuns(this.runs, this.deselected, this.colorOf));
    this.runList.addEventListener("change", (e) => {
      const box = e.target as HTMLInputElement;
      const run = box.getAttribute("data-run");
      if (run !== null) host.setRunShown(run, box.checked);
    });
  }

  private filteredRuns(): string[] {
    const filter = compileFilter(this.runFilter.value);
    return this.runs.map((r) => r.run).filter((r) => !(filter instanceof RegExp) || filter.test(r));
  }

  renderRuns(runs: RunInfo[], deselected: ReadonlySet<string>, colorOf: (run: string) => string): void {
    this.runs = runs;
    this.deselected = deselected;
    this.colorOf = colorOf;
    const filter = compileFilter(this.runFilter.value);
    this.runFilter.classList.toggle("wur-invalid", filter instanceof Error);
    const items = this.filteredRuns().map((run) => {
      const box = el("input", { type: "checkbox", "data-testid": "wur-run-toggle", "data-run": run });
      box.checked = !deselected.has(run);
      const swatch = el("span", { class: "wur-swatch" });
      swatch.style.background = colorOf(run);
      return el("li", {}, el("label", { title: run }, box, swatch, el("span", { text: run })));
    });
    this.runList.replaceChildren(...items);
    if (!items.length && runs.length) this.runList.append(el("li", { class: "wur-meta", text: "No run matches the filter." }));
  }

  /** The flags of the shown runs; `shownRuns` 0: nothing (no note either). */
  renderFlags(flags: FlagRow[], band: Band, shownRuns: number): void {
    this.flagsNote.textContent = !shownRuns ? ""
      : flags.length ? `${flags.length} layer${flags.length === 1 ? "" : "s"} left [${formatShortRatio(band.low)}, ${formatShortRatio(band.high)}]`
        : "Every layer stayed in the band.";
    const shown = shownRuns ? flags.slice(0, MAX_FLAGS_SHOWN) : [];
    this.flagsList.replaceChildren(...shown.map((f) => {
      const b = el("button", { type: "button", "data-testid": "wur-flag", "data-run": f.run, "data-tag": f.tag, title: `Show ${f.tag} in ${f.run}` },
        el("div", { class: "wur-flag-tag", text: f.tag }),
        el("div", { class: "wur-flag-meta", text: shownRuns > 1 ? `run ${f.run}` : "" }),
        el("div", { class: `wur-flag-meta${f.nan_steps ? " wur-flag-nan" : ""}`, text: flagText(f) }));
      b.addEventListener("click", () => this.host.revealRow({ run: f.run, tag: f.tag }));
      return el("li", {}, b);
    }));
    if (flags.length > shown.length && shown.length) this.flagsList.append(el("li", { class: "wur-flag-meta", text: `… and ${flags.length - shown.length} more` }));
  }
}

/** What a flag says: NaN, +inf, the fraction out of band, the skipped steps left out. */
export function flagText(f: FlagRow): string {
  const parts: string[] = [];
  if (f.nan_steps) parts.push(`NaN at ${f.nan_steps} step${f.nan_steps === 1 ? "" : "s"} since step ${formatStep(f.first_nan_step ?? NaN)}`);
  if (f.inf_steps) parts.push(`+inf at ${f.inf_steps} since step ${formatStep(f.first_inf_step ?? NaN)}`);
  const skipped = f.skipped_steps ?? 0;
  if (f.first_out_of_band_step !== null) {
    parts.push(`${Math.round(f.out_of_band_fraction * 100)}% of ${f.logged_steps - skipped} steps out (${f.above_steps} above, ${f.below_steps} below), since step ${formatStep(f.first_out_of_band_step)}`);
  }
  if (skipped) parts.push(`${skipped} skipped step${skipped === 1 ? "" : "s"} not judged`);
  return parts.join("; ");
}

/** NaN layers first, then by the fraction of steps out of band, then by run. */
export function rankFlags(flags: FlagRow[]): FlagRow[] {
  const nan = (f: FlagInfo) => (f.nan_steps > 0 ? 1 : 0);
  return [...flags].sort((a, b) => nan(b) - nan(a) || b.out_of_band_fraction - a.out_of_band_fraction || a.run.localeCompare(b.run));
}
