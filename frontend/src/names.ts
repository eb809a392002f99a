// Where a tag or run name may wrap: never inside a word. A name is cut into parts, a line break
// allowed only between two parts: after each "/" (a variable path's or a run directory's
// levels), and inside a level too long for a narrow column also after each "_". The view puts
// a <wbr> element between the parts (dom.ts nameNodes): the text itself stays the name. In
// prose (a flag's text) a number is kept whole: "9.33e-07" never ends a line at its "-".

/** A level (the text between two "/") longer than this may also wrap after its "_". */
export const LONG_LEVEL = 16;

/** `name` cut where it may wrap; the parts joined are `name`. */
export function nameParts(name: string): string[] {
  const parts: string[] = [];
  for (const level of name.match(/[^/]*\/|[^/]+$/g) ?? []) {
    if (level.replace(/\/$/, "").length > LONG_LEVEL) parts.push(...(level.match(/[^_]*_|[^_]+$/g) ?? [level]));
    else parts.push(level);
  }
  return parts.length ? parts : [name];
}


/** `text` cut around its numbers in exponent notation ("9.33e-07", "1e+24"): the parts at odd
 * indices are those numbers (which a line must not split), the others the text between them;
 * the parts joined are `text`. */
export function numberParts(text: string): string[] {
  return text.split(/(\d(?:[\d.]*\d)?e[-+]\d+)/);
}
