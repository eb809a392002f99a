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
  private readonly flagsBody = el("tbody");
  private readonly flagsTable = el("table", { class: "wur-flags-table", hidden: true },
    el("thead", {}, el("tr", {}, ...["layer", "run", "what", "since"].map((h) => el("th", { scope: "col", text: h })))), this.flagsBody);
  private readonly flagsMore = el("div", { class: "wur-flag-meta" });
  private readonly flagsList = el("div", { class: "wur-flags", "data-testid": "wur-flags", "aria-label": "Flagged layers" }, this.flagsTable, this.flagsMore);
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
      el("h2", { text: "Flags" }), this.flagsNote, this.flagsList,
    );
    const reveal = (e: Event) => {
      const row = (e.target as Element).closest?.("tr[data-run]");
      if (row) host.revealRow({ run: row.getAttribute("data-run")!, tag: row.getAttribute("data-tag")! });
    };
    this.flagsBody.addEventListener("click", reveal);
    this.flagsBody.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); reveal(e); } });
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

  /** The flags of the shown runs, one table row each (layer, run, what, since); a click or
   * Enter on a row reveals the layer. `shownRuns` 0: nothing (no note either). */
  renderFlags(flags: FlagRow[], band: Band, patience: number, shownRuns: number): void {
    this.flagsNote.textContent = !shownRuns ? ""
      : flags.length ? `${flags.length} layer${flags.length === 1 ? "" : "s"} flagged: NaN, +inf after the first update, or out of [${formatShortRatio(band.low)}, ${formatShortRatio(band.high)}] for ${patience} judged step${patience === 1 ? "" : "s"} in a row`
        : "Every layer stayed in the band.";
    const shown = shownRuns ? flags.slice(0, MAX_FLAGS_SHOWN) : [];
    this.flagsTable.hidden = !shown.length;
    this.flagsBody.replaceChildren(...shown.map((f) => {
      const row = el("tr", { "data-testid": "wur-flag", "data-run": f.run, "data-tag": f.tag, "data-reason": f.reason, tabindex: 0, title: `Show ${f.tag} in ${f.run}` },
        el("td", { class: "wur-flag-tag", text: f.tag }),
        el("td", { class: "wur-flag-run", text: f.run }),
        el("td", { class: `wur-flag-what${f.nan_since !== null && f.nan_since !== undefined ? " wur-flag-nan" : ""}`, text: flagText(f) }),
        el("td", { class: "wur-flag-since", text: formatStep(f.since) }));
      return row;
    }));
    this.flagsMore.textContent = flags.length > shown.length && shown.length ? `… and ${flags.length - shown.length} more` : "";
  }
}

/** The reason of a flag in words. */
export function reasonText(f: Pick<FlagInfo, "reason" | "streak_length">): string {
  const steps = `${f.streak_length} step${f.streak_length === 1 ? "" : "s"}`;
  switch (f.reason) {
    case "nan": return "NaN";
    case "inf": return "+inf after first update";
    case "above": return `above band for ${steps}`;
    case "below": return `below band for ${steps}`;
    case "outside": return `outside band for ${steps}`;
    default: return String(f.reason);
  }
}

/** What a flag says: its reason, the other findings, the skipped steps left out. */
export function flagText(f: FlagInfo): string {
  const parts = [reasonText(f)];
  if (f.reason !== "nan" && f.nan_since !== null && f.nan_since !== undefined) parts.push(`NaN at step ${formatStep(f.nan_since)}`);
  if (f.reason !== "inf" && f.inf_since !== null && f.inf_since !== undefined) parts.push(`+inf at step ${formatStep(f.inf_since)}`);
  const streak = f.reason === "above" || f.reason === "below" || f.reason === "outside";
  if (!streak && f.streak_since !== null && f.streak_since !== undefined) parts.push(`out of band for ${f.streak_length} steps from step ${formatStep(f.streak_since)}`);
  const skipped = f.skipped_steps ?? 0;
  if (skipped) parts.push(`${skipped} skipped step${skipped === 1 ? "" : "s"} not judged`);
  return parts.join("; ");
}

/** As /flags orders them, over several runs: layers with a NaN first, then by since, then by
 * tag, then by run. */
export function rankFlags(flags: FlagRow[]): FlagRow[] {
  const nan = (f: FlagInfo) => (f.nan_since !== null && f.nan_since !== undefined ? 1 : 0);
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return [...flags].sort((a, b) => nan(b) - nan(a) || a.since - b.since || cmp(a.tag, b.tag) || cmp(a.run, b.run));
}
