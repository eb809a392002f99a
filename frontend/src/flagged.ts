// The flags as the heatmaps and the layer detail show them: each flagged row marked in its
// run's heatmap as soon as /flags answers (its row label, and the header of a group holding
// it), and the open layer's flag in words. Pure: the views ask, this answers.
import type { FlagInfo, Reason } from "./api";
import type { RowSpec } from "./group";
import type { FlagRow } from "./state";

/** The flags of `run`, by tag, in the order of `flags` (the tab's ranking: NaN first). */
export function flagsOfRun(flags: readonly FlagRow[], run: string): Map<string, FlagRow> {
  const out = new Map<string, FlagRow>();
  for (const f of flags) if (f.run === run && !out.has(f.tag)) out.set(f.tag, f);
  return out;
}

/** The flag a row shows: a tag row its own; a group header the first, in the ranking, of its
 * members' (`tags`: the run's tags, which the members index); null: none flagged. */
export function rowFlag(spec: RowSpec, tags: readonly string[], byTag: ReadonlyMap<string, FlagRow>): FlagRow | null {
  if (spec.kind === "tag") return byTag.get(spec.name) ?? null;
  const members = new Set(spec.members.map((i) => tags[i]));
  for (const [tag, flag] of byTag) if (members.has(tag)) return flag;
  return null;
}

/** The words of a reason (/reasons' label; an unknown reason: its name). */
export function reasonLabel(reasons: readonly Reason[], name: string): string {
  return reasons.find((r) => r.name === name)?.label ?? name;
}

/** What a row's flag mark says on hover: the reason's label and the flag's text (a group's:
 * which member). */
export function flagMarkTitle(flag: FlagRow, reasons: readonly Reason[], group: boolean): string {
  return `Flagged${group ? ` (${flag.tag})` : ""}: ${reasonLabel(reasons, flag.reason)}. ${flag.text}`;
}

/** Whether a flag is of a NaN (marked as an error, not a warning). */
export function isNanFlag(flag: FlagInfo): boolean {
  return flag.reason === "nan" || (flag.nan_since !== null && flag.nan_since !== undefined);
}
