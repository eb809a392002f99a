// The fetch caches: one promise per key (a run, a (run, tag)) until clear() (a reload); a
// failed fetch is not kept; optionally at most `capacity` keys, the least recently asked for
// go first. Pure.

/** One promise per key `args` (compared as JSON) until clear(); a rejected promise is dropped.
 * At most `capacity` keys: a hit becomes the most recent, the least recent go first. */
export class KeyedCache<A extends unknown[], T> {
  private readonly entries = new Map<string, Promise<T>>();

  constructor(private readonly fetch: (...args: A) => Promise<T>, private readonly capacity = Infinity) {}

  get(...args: A): Promise<T> {
    const key = JSON.stringify(args);
    const hit = this.entries.get(key);
    if (hit) {
      this.entries.delete(key); // most recent last
      this.entries.set(key, hit);
      return hit;
    }
    const p = this.fetch(...args);
    this.entries.set(key, p);
    p.catch(() => { if (this.entries.get(key) === p) this.entries.delete(key); });
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
    return p;
  }

  has(...args: A): boolean {
    return this.entries.has(JSON.stringify(args));
  }

  get size(): number {
    return this.entries.size;
  }

  /** On reload: the next get() of every key fetches again. */
  clear(): void {
    this.entries.clear();
  }
}

/** One promise per run (/line_search, /suggestions), unbounded. */
export class RunCache<T> extends KeyedCache<[run: string], T> {}
