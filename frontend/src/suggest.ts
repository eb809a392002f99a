// The suggested learning rate of the layer detail (/suggestions: lr · target / ratio, the
// geometric means over the layer's last logged steps): its cache per run (one request per run
// per reload, as the layer detail's cache) and its text.
import type { Suggestions } from "./api";
import { formatRatio, formatShortRatio } from "./format";

/** One promise per run until clear() (on reload); a failed fetch is not kept. */
export class RunCache<T> {
  private readonly entries = new Map<string, Promise<T>>();

  constructor(private readonly fetch: (run: string) => Promise<T>) {}

  get(run: string): Promise<T> {
    const hit = this.entries.get(run);
    if (hit) return hit;
    const p = this.fetch(run);
    this.entries.set(run, p);
    p.catch(() => { if (this.entries.get(run) === p) this.entries.delete(run); });
    return p;
  }

  has(run: string): boolean {
    return this.entries.has(run);
  }

  get size(): number {
    return this.entries.size;
  }

  clear(): void {
    this.entries.clear();
  }
}

export const SUGGESTION_CAVEAT = "Exact for plain SGD; a first-order estimate for Adam-type optimizers; ignores momentum and learning-rate schedules.";

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
