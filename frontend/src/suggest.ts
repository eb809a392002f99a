// The suggested learning rate of the layer detail (/suggestions: lr · target / ratio, the
// geometric means over the layer's last logged steps): its text (its caveat is the server's,
// /suggestions' `caveat`, shown as sent; the cache per run, one request per run per reload, is
// a KeyedCache of cache.ts, held by the app).
import type { Suggestions } from "./api";
import { formatRatio, formatShortRatio } from "./format";

/** The suggestion for layer `tag` in words; `answer` null: the run logs no learning rate. */
export function suggestionText(answer: Suggestions | null, tag: string): string {
  if (!answer || !answer.has_learning_rate) return "Suggested learning rate: learning rate not logged for this run.";
  const s = answer.layers.find((l) => l.tag === tag);
  const target = formatShortRatio(answer.target);
  if (!s || s.suggested_learning_rate === null || s.ratio === null || s.learning_rate === null) {
    return `Suggested learning rate for a ratio of ${target}: learning rate not logged at the last ${answer.last} logged steps of this layer (or no finite ratio there).`;
  }
  return `Suggested learning rate ${formatRatio(s.suggested_learning_rate)} for a ratio of ${target} `
    + `(now ratio ${formatRatio(s.ratio)} at learning rate ${formatRatio(s.learning_rate)}: geometric means over the last ${s.steps} judged step${s.steps === 1 ? "" : "s"})`;
}
