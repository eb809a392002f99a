// Grouping rows by layer: the variables of one layer (e.g. kernel and bias) under a header row
// that shows, per column, the group's worst cell; a group can be collapsed to that row.
import { cellKind, codeLog10, Codes, Heatmap } from "./codec";

export interface RowSpec {
  kind: "tag" | "group";
  /** the tag index of a "tag" row; -1 for a group header */
  tag: number;
  /** the tag, or the group's name */
  name: string;
  /** tag indices of the group's (shown) members; [tag] for a tag row */
  members: number[];
  /** for a member row: the name of its group (when grouped) */
  group?: string;
  collapsed?: boolean;
}

/** The layer of a variable path: everything before the last "/" ("digits/conv/kernel" -> "digits/conv"). */
export function groupName(tag: string): string {
  const i = tag.lastIndexOf("/");
  return i > 0 ? tag.slice(0, i) : tag;
}

/** Display rows for the shown tag indices (in model order). Grouped: one header per layer with
 * two or more shown variables, followed by them unless collapsed; groups in order of first
 * appearance. */
export function layoutRows(tags: string[], shown: number[], grouped: boolean, collapsed: ReadonlySet<string>): RowSpec[] {
  if (!grouped) return shown.map((i) => ({ kind: "tag", tag: i, name: tags[i], members: [i] }));
  const order: string[] = [];
  const members = new Map<string, number[]>();
  for (const i of shown) {
    const g = groupName(tags[i]);
    if (!members.has(g)) { members.set(g, []); order.push(g); }
    members.get(g)!.push(i);
  }
  const out: RowSpec[] = [];
  for (const g of order) {
    const m = members.get(g)!;
    if (m.length === 1) { out.push({ kind: "tag", tag: m[0], name: tags[m[0]], members: m }); continue; }
    const isCollapsed = collapsed.has(g);
    out.push({ kind: "group", tag: -1, name: g, members: m, collapsed: isCollapsed });
    if (!isCollapsed) for (const i of m) out.push({ kind: "tag", tag: i, name: tags[i], members: [i], group: g });
  }
  return out;
}

/** How bad a cell is: NaN > +inf > huge > zero > tiny > a value by its distance (in decades)
 * from the target; missing is least. */
export function severity(code: number, targetLog10: number, c: Codes): number {
  switch (cellKind(code, c)) {
    case "value": return Math.abs(codeLog10(code, c) - targetLog10);
    case "missing": return -1;
    case "tiny": return 1000;
    case "zero": return 1001;
    case "huge": return 1002;
    case "inf": return 1003;
    case "nan": return 1004;
  }
}

/** The codes of the display rows ([R][C]), per cell the tag index it shows (for a group
 * header: its worst member in that column) and, given the run's held-cell index ([L][C]), the
 * display's (the shown cell's). */
export function displayMatrix(codes: Uint16Array, columns: number, specs: RowSpec[], targetLog10: number, c: Codes, heldIndex: Int32Array | null = null): { codes: Uint16Array; source: Int32Array; held: Int32Array | null } {
  const out = new Uint16Array(specs.length * columns);
  const source = new Int32Array(specs.length * columns);
  specs.forEach((spec, r) => {
    const o = r * columns;
    if (spec.kind === "tag") {
      out.set(codes.subarray(spec.tag * columns, (spec.tag + 1) * columns), o);
      source.fill(spec.tag, o, o + columns);
      return;
    }
    for (let k = 0; k < columns; k++) {
      let best = spec.members[0], bestCode = codes[best * columns + k], bestSev = severity(bestCode, targetLog10, c);
      for (let j = 1; j < spec.members.length; j++) {
        const m = spec.members[j], code = codes[m * columns + k], sev = severity(code, targetLog10, c);
        if (sev > bestSev) { best = m; bestCode = code; bestSev = sev; }
      }
      out[o + k] = bestCode;
      source[o + k] = best;
    }
  });
  let held: Int32Array | null = null;
  if (heldIndex) {
    held = new Int32Array(specs.length * columns);
    for (let i = 0; i < held.length; i++) held[i] = heldIndex[source[i] * columns + (i % columns)];
  }
  return { codes: out, source, held };
}

/** Rows of a run's heatmap: shown tags (filtered), display rows (grouped) and their codes. */
export function blockRows(h: Heatmap, runIndex: number, filter: RegExp | null, grouped: boolean, collapsed: ReadonlySet<string>, targetLog10: number) {
  const run = h.runs[runIndex];
  const shown: number[] = [];
  run.tags.forEach((tag, i) => { if (!filter || filter.test(tag)) shown.push(i); });
  const specs = layoutRows(run.tags, shown, grouped, collapsed);
  const display = specs.some((r) => r.kind === "group") ? displayMatrix(run.codes, h.columns, specs, targetLog10, h.codes, run.heldIndex) : null;
  return { shown, specs, display };
}
