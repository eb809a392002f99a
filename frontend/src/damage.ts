// The notice of a run's damaged event files on its heatmap block, from /runs' `damaged`
// (http_api.md): which files, how many bytes could not be read, from where, after which step.
// Text only: file names go in through textContent.
import type { RunInfo } from "./api";
import { el } from "./dom";

/** One unreadable stretch of an event file (`offset` and `cut_short` absent: a backend that
 * sends the contract's three fields only). */
export interface DamagedStretch {
  file: string;
  unread_bytes: number;
  /** the step of the last readable record before it; null: none (the start of the file) */
  after_step: number | null;
  offset?: number;
  /** the file ends inside this record: the last record, cut short by a crash or being written */
  cut_short?: boolean;
}

/** The run's unreadable stretches ([]: whole, not checked, or an older backend). */
export function damagedOf(info: RunInfo | undefined): DamagedStretch[] {
  const damaged = (info as { damaged?: unknown } | undefined)?.damaged;
  return Array.isArray(damaged) ? (damaged as DamagedStretch[]) : [];
}

/** Each stretch in the words of `tb-wur report`: "FILE: N bytes unreadable from offset O
 * (after step S)", and what a cut-short last record means. */
export function damageLines(stretches: DamagedStretch[]): string[] {
  return stretches.map((s) => {
    const where = s.after_step === null ? "before any step" : `after step ${s.after_step}`;
    const from = s.offset === undefined ? "" : ` from offset ${s.offset}`;
    const text = `${s.file}: ${s.unread_bytes} bytes unreadable${from} (${where})`;
    return s.cut_short ? `${text}: the file ends inside its last record, one record cut short (normal after a crash; or the record is still being written)` : text;
  });
}

/** The headline: how many files, and whether anything but a last record cut short is lost. */
export function damageTitle(stretches: DamagedStretch[]): string {
  const files = new Set(stretches.map((s) => s.file)).size;
  const named = `${files} event file${files === 1 ? "" : "s"}`;
  if (stretches.every((s) => s.cut_short)) return `The last record of ${named} is cut short (normal after a crash): its steps are not shown.`;
  return `Damaged data in ${named}: the steps in the unreadable bytes are lost; the readable records after them are shown.`;
}

/** The notice of one heatmap block: hidden while the run's files are whole. */
export class DamageNotice {
  readonly element = el("div", { class: "wur-damage", "data-testid": "wur-damaged", role: "status", hidden: true });
  private key = "";

  update(run: string, info: RunInfo | undefined): void {
    const stretches = damagedOf(info);
    const key = JSON.stringify(stretches);
    if (key === this.key) return;
    this.key = key;
    this.element.hidden = stretches.length === 0;
    this.element.setAttribute("data-run", run);
    this.element.setAttribute("data-count", String(stretches.length));
    this.element.replaceChildren(
      el("div", { class: "wur-damage-title", text: `⚠ ${damageTitle(stretches)}` }),
      ...damageLines(stretches).map((line) => el("div", { class: "wur-damage-line", text: line })),
    );
  }
}
