// Tiny DOM helpers. Text always goes in through textContent: names are never parsed as HTML.
import { nameParts, numberParts } from "./names";

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K, attrs: Record<string, string | number | boolean | undefined> = {}, ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k === "class") node.className = String(v);
    else if (k === "text") node.textContent = String(v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return node;
}

/** A tag or run name as text nodes with a <wbr> where it may wrap (names.ts): a line never
 * breaks inside a word; the element's text is the name. */
export function nameNodes(name: string): Node[] {
  return nameParts(name).flatMap((part, i) => (i ? [document.createElement("wbr"), document.createTextNode(part)] : [document.createTextNode(part)]));
}

/** Prose as text nodes, each number in exponent notation in a span that does not wrap
 * (names.ts numberParts). */
export function proseNodes(text: string): Node[] {
  return numberParts(text).map((part, i) => (i % 2 ? el("span", { class: "wur-nowrap", text: part }) : document.createTextNode(part)));
}

/** Run colors: TensorBoard's palette by position among the sorted run names (distinct for the
 * first ten runs, as TensorBoard assigns them); a name not in `names` falls back to a hash. */
export function runColorOf(name: string, names: string[]): string {
  const sorted = [...names].sort();
  const i = sorted.indexOf(name);
  return i >= 0 ? PALETTE[i % PALETTE.length] : runColor(name);
}

/** A run's color from a hash of its name (stable across reloads, but may collide). */
const PALETTE = ["#ff7043", "#0077bb", "#cc3311", "#33bbee", "#ee3377", "#009988", "#bbbbbb", "#795548", "#7e57c2", "#c0ca33"];
export function runColor(name: string): string {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
  return PALETTE[(h >>> 0) % PALETTE.length];
}

/** A regular expression from user input, case-insensitive; an Error when it does not parse. */
export function compileFilter(text: string): RegExp | null | Error {
  if (!text.trim()) return null;
  try {
    return new RegExp(text, "i");
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
}

export function safeFileName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[._]+|[._]+$/g, "") || "run";
}

/** The one tooltip of the tab: lines of text next to the pointer, kept inside the window. */
export class Tooltip {
  readonly element = el("div", { class: "wur-tooltip", "data-testid": "wur-tooltip", role: "tooltip", hidden: true });

  show(lines: string[], x: number, y: number): void {
    const tip = this.element;
    tip.replaceChildren(...lines.map((line, i) => el("div", { class: i === 0 ? "wur-tt-tag" : "", text: line })));
    tip.hidden = false;
    const w = tip.offsetWidth, h = tip.offsetHeight;
    tip.style.left = `${x + 14 + w > window.innerWidth ? Math.max(0, x - 14 - w) : x + 14}px`;
    tip.style.top = `${y + 14 + h > window.innerHeight ? Math.max(0, y - 14 - h) : y + 14}px`;
  }

  hide(): void {
    this.element.hidden = true;
  }

  get hidden(): boolean {
    return this.element.hidden;
  }
}

/** Whether two lists of memo keys are the same, item by item (===). */
export function sameKeys(a: unknown[], b: unknown[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Sets the attributes that differ. */
export function setAttrs(node: Element, attrs: Record<string, string | number>): void {
  for (const [k, v] of Object.entries(attrs)) if (node.getAttribute(k) !== String(v)) node.setAttribute(k, String(v));
}
