// The sidebar: the run list (filter, All/None, a checkbox per run; the filter hides the runs it
// does not match) and the flags (the layers /flags flags, as the backend ranks them, its text
// verbatim; a click reveals the row; the note names what the judgement flags, from /reasons).
// Its width follows the window's, and the user can drag it wider (styles.ts); names wrap only
// between levels (names.ts), a flag's text spans the table's width below its names.
import type { Reason, RunInfo } from "./api";
import { compileFilter, el, nameNodes, proseNodes } from "./dom";
import { isNanFlag } from "./flagged";
import { formatShortRatio, formatStep } from "./format";
import type { Band } from "./color";
import type { FlagRow, RowRef } from "./state";

const MAX_FLAGS_SHOWN = 200;

export interface SidebarHost {
  setRunFilter(filter: RegExp | null): void;
  setRunShown(run: string, shown: boolean): void;
  setRunsShown(runs: string[], shown: boolean): void;
  revealRow(ref: RowRef): void;
}

export class Sidebar {
  readonly element = el("aside", { class: "wur-sidebar" });
  private readonly runFilter = el("input", { type: "text", placeholder: "Filter runs (regex)", "aria-label": "Filter runs", "data-testid": "wur-run-filter" });
  private readonly runFilterHint = el("div", { class: "wur-hint", role: "alert", "data-testid": "wur-run-filter-error" });
  /** the last valid run filter (an invalid one changes nothing) */
  private filter: RegExp | null = null;
  private readonly runList = el("ul", { class: "wur-runs", "aria-label": "Runs" });
  private readonly flagsNote = el("div", { class: "wur-flag-meta", "data-testid": "wur-flags-note" });
  private readonly flagsBody = el("tbody", { role: "rowgroup" });
  // laid out as a grid (styles.ts): the roles keep it a table for assistive technology
  private readonly flagsTable = el("table", { class: "wur-flags-table", role: "table", hidden: true },
    el("thead", { role: "rowgroup" }, el("tr", { role: "row" }, ...FLAG_COLUMNS.map((h) => el("th", {
      scope: "col", role: "columnheader", text: h, class: h === "what" ? "wur-visually-hidden" : undefined,
      title: h === "since step" ? "The step the finding starts at (for a streak, its first step)" : "",
    })))), this.flagsBody);
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
      el("h2", { text: "Runs" }), this.runFilter, this.runFilterHint, el("div", {}, all, " ", none), this.runList,
      el("h2", { text: "Flags" }), this.flagsNote, this.flagsList,
    );
    const reveal = (e: Event) => {
      const row = (e.target as Element).closest?.("tr[data-run]");
      if (row) host.revealRow({ run: row.getAttribute("data-run")!, tag: row.getAttribute("data-tag")! });
    };
    this.flagsBody.addEventListener("click", reveal);
    this.flagsBody.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); reveal(e); } });
    this.runFilter.addEventListener("input", () => {
      const filter = compileFilter(this.runFilter.value);
      this.runFilter.classList.toggle("wur-invalid", filter instanceof Error);
      this.runFilterHint.textContent = filter instanceof Error ? `Invalid regular expression: ${filter.message}` : "";
      if (filter instanceof Error) return; // keep the last valid one
      this.filter = filter;
      this.renderRuns(this.runs, this.deselected, this.colorOf);
      host.setRunFilter(filter);
    });
    this.runList.addEventListener("change", (e) => {
      const box = e.target as HTMLInputElement;
      const run = box.getAttribute("data-run");
      if (run !== null) host.setRunShown(run, box.checked);
    });
  }

  private filteredRuns(): string[] {
    const filter = this.filter;
    return this.runs.map((r) => r.run).filter((r) => !filter || filter.test(r));
  }

  renderRuns(runs: RunInfo[], deselected: ReadonlySet<string>, colorOf: (run: string) => string): void {
    this.runs = runs;
    this.deselected = deselected;
    this.colorOf = colorOf;
    const items = this.filteredRuns().map((run) => {
      const box = el("input", { type: "checkbox", "data-testid": "wur-run-toggle", "data-run": run });
      box.checked = !deselected.has(run);
      const swatch = el("span", { class: "wur-swatch" });
      swatch.style.background = colorOf(run);
      return el("li", {}, el("label", { title: run }, box, swatch, el("span", {}, ...nameNodes(run))));
    });
    this.runList.replaceChildren(...items);
    if (!items.length && runs.length) this.runList.append(el("li", { class: "wur-meta", text: "No run matches the filter." }));
  }

  /** The flags of the shown runs, one table row each (layer, run, what, since step): what a
   * flag says is /flags' `text`, verbatim (the report prints the same). The note says which
   * judgement is in force: the default one (`band` null: no band set) or the band with the
   * patience, and what it flags (`reasons`: /reasons). A click or Enter on a row reveals the
   * layer. `shownRuns` 0: nothing (no note either). */
  renderFlags(flags: FlagRow[], band: Pick<Band, "low" | "high"> | null, patience: number, shownRuns: number, reasons: readonly Reason[]): void {
    this.flagsNote.textContent = shownRuns ? flagsNote(flags.length, band, patience, reasons) : "";
    this.flagsNote.setAttribute("data-judgement", band ? "band" : "default");
    const shown = shownRuns ? flags.slice(0, MAX_FLAGS_SHOWN) : [];
    this.flagsTable.hidden = !shown.length;
    this.flagsBody.replaceChildren(...shown.map((f) => {
      const row = el("tr", { role: "row", "data-testid": "wur-flag", "data-run": f.run, "data-tag": f.tag, "data-reason": String(f.reason), "data-since": f.since === null || f.since === undefined ? "" : String(f.since), tabindex: 0, title: `Show ${f.tag} in ${f.run}` },
        el("td", { role: "cell", class: "wur-flag-tag" }, ...nameNodes(f.tag)),
        el("td", { role: "cell", class: "wur-flag-run" }, ...nameNodes(f.run)),
        el("td", { role: "cell", class: `wur-flag-what${isNanFlag(f) ? " wur-flag-nan" : ""}` }, ...proseNodes(f.text)),
        el("td", { role: "cell", class: "wur-flag-since", text: f.since === null || f.since === undefined ? "–" : formatStep(f.since) }));
      return row;
    }));
    this.flagsMore.textContent = flags.length > shown.length && shown.length ? `… and ${flags.length - shown.length} more` : "";
  }
}

/** The flags table's column titles. */
export const FLAG_COLUMNS = ["layer", "run", "what", "since step"];

/** What the flags note says: the judgement in force, how many layers it flags, and what it
 * flags: the labels of `reasons` (/reasons; none known yet: the note leaves them out). */
export function flagsNote(count: number, band: Pick<Band, "low" | "high"> | null, patience: number, reasons: readonly Reason[]): string {
  const flagged = count ? `${count} layer${count === 1 ? "" : "s"} flagged` : "no layer flagged";
  const steps = `${patience} judged step${patience === 1 ? "" : "s"} in a row`;
  const of = (judgement: Reason["judgement"]) => reasons.filter((r) => r.judgement === judgement);
  const says = (list: readonly Reason[]) => {
    const once = list.filter((r) => !r.streak).map((r) => r.label), streaks = list.filter((r) => r.streak).map((r) => r.label);
    return [once.length ? `${once.join(" / ")} at any step` : "", streaks.length ? `for ${steps}: ${streaks.join(" / ")}` : ""].filter(Boolean).join(", and ");
  };
  const judged = says(of("default")), banded = says(of("band"));
  if (!band) {
    return `Default judgement (no band set), patience ${patience}: ${flagged}.` + (judged ? ` It flags ${judged}.` : "") + (banded ? ` Set the band to also flag ${banded}.` : "");
  }
  return `Band [${formatShortRatio(band.low)}, ${formatShortRatio(band.high)}] with patience ${patience}: ${flagged}.` + (banded ? ` The default judgement's findings, and ${banded}.` : "");
}

/** As /flags orders them, over several runs: layers with a NaN first, then by since, then by
 * tag, then by run. */
export function rankFlags(flags: FlagRow[]): FlagRow[] {
  const nan = (f: FlagRow) => (isNanFlag(f) ? 1 : 0);
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return [...flags].sort((a, b) => nan(b) - nan(a) || a.since - b.since || cmp(a.tag, b.tag) || cmp(a.run, b.run));
}
