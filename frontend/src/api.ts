// The backend routes (tb_wur_plugin/http_api.md), relative to the plugin's base URL.
import { Comparison, Heatmap, parseComparison, parseHeatmap } from "./codec";
export type { CompareRank, Comparison } from "./codec";

export interface LayerInfo {
  tag: string;
  description: string;
  first_step: number | null;
  last_step: number | null;
  logged_steps: number;
  has_histograms: boolean;
}
export interface RunInfo {
  run: string;
  first_step: number | null;
  last_step: number | null;
  has_learning_rate: boolean;
  /** how many kept logged steps the optimizer skipped */
  skipped_steps?: number;
  /** those steps, ascending */
  skipped_at?: number[];
  /** the run holds the stochastic Armijo line search's series (/line_search answers); absent
   * (an older backend): false */
  has_line_search?: boolean;
  /** the metrics the run has ratios of, in the order of /runs' top-level list (absent: an
   * older backend, Frobenius only) */
  metrics?: string[];
  layers: LayerInfo[];
}
/** The tags the plugin writes besides the ratios (from /runs: the frontend names none itself). */
export interface ReservedTags { learning_rate: string; skipped_step: string; histogram_prefix: string }
/** `metrics`: the metrics some run has ratios of ("frobenius", "spectral"; absent: an older
 * backend, Frobenius only). */
export interface RunsAnswer { runs: RunInfo[]; reserved_tags?: ReservedTags; metrics?: string[] }
/** One way the judgement flags a layer (/reasons: the server's table, in its order; the tab
 * names no reason itself). `judgement`: "default" (judged always) or "band" (only with a band
 * set); `label`: a few words; `streak`: flagged after `patience` judged steps in a row (else
 * at a single step). */
export interface Reason { name: string; judgement: "default" | "band"; label: string; streak: boolean }
export interface Reasons { reasons: Reason[] }
export interface FlagInfo {
  tag: string;
  /** the earliest step of the findings (a step, for a streak its first one) */
  since: number;
  /** the finding at `since`: the name of a Reason */
  reason: string;
  /** what the flag says, in words: the same text `tb-wur report` prints */
  text: string;
  nan_since?: number | null;
  inf_since?: number | null;
  streak_since?: number | null;
  /** judged steps of the whole streak holding streak_since (0: none) */
  streak_length?: number;
  median?: number | null;
  last?: number;
  above?: number;
  below?: number;
  nonfinite?: number;
  logged_steps?: number;
  /** logged steps the optimizer skipped: not judged */
  skipped_steps?: number;
  [more: string]: unknown;
}
/** /flags: `low`/`high` null under the default judgement (no band given). */
export interface Flags { run: string; low: number | null; high: number | null; patience: number; layers: FlagInfo[] }
/** /suggestions: per layer the learning rate that brings its ratio to `target`. */
export interface Suggestion { tag: string; suggested_learning_rate: number | null; ratio: number | null; learning_rate: number | null; steps: number }
/** `caveat`: what a suggestion is worth, in words (the report prints the same; absent: an
 * older backend). */
export interface Suggestions { run: string; target: number; last: number; has_learning_rate: boolean; caveat?: string; layers: Suggestion[] }
export interface Series { run: string; tag: string; kind: string; description: string; steps: number[]; wall_times: number[]; values: (number | string)[] }
/** /line_search: the line search's step size and backtracks per searched step, steps
 * ascending. */
export interface LineSearch { steps: number[]; step_size: number[]; backtracks: number[] }
export interface Histograms {
  run: string; tag: string; edges: number[];
  buckets: { zero: number; underflow: number; first_bin: number; overflow: number; inf: number; nan: number };
  steps: number[]; wall_times: number[]; counts: number[][];
}

export class HttpError extends Error {
  constructor(public readonly status: number, message: string) {
    super(message);
  }
}

export function query(params: Record<string, string | number | string[] | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else q.append(k, String(v));
  }
  return q.toString();
}

async function get(path: string, signal?: AbortSignal): Promise<Response> {
  const response = await fetch(path, { signal, credentials: "same-origin" });
  if (!response.ok) {
    const text = (await response.text()).trim().split("\n")[0].slice(0, 300);
    throw new HttpError(response.status, `${path.split("?")[0]}: HTTP ${response.status}${text ? ` — ${text}` : ""}`);
  }
  return response;
}

/** A WUR1 body, inflated here when the browser did not (no Content-Encoding). */
async function binary(response: Response): Promise<Uint8Array> {
  let bytes = new Uint8Array(await response.arrayBuffer());
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  }
  return bytes;
}

/** JSON with TensorBoard's non-finite strings turned into numbers. */
export function parseJsonNumbers(text: string): unknown {
  return JSON.parse(text, (_k, v) => (v === "NaN" ? NaN : v === "Infinity" ? Infinity : v === "-Infinity" ? -Infinity : v));
}

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  return parseJsonNumbers(await (await get(path, signal)).text()) as T;
}

/** The metric of the ratios the routes answer (`metric=`): the default one is not sent. */
export const DEFAULT_METRIC = "frobenius";
const metricParam = (metric: string) => (metric === DEFAULT_METRIC ? undefined : metric);

export const api = {
  runs: (signal?: AbortSignal) => getJson<RunsAnswer>("./runs", signal),
  async heatmap(p: { runs: string[]; columns: number; start?: number; end?: number; reduction: string; metric: string }, signal?: AbortSignal): Promise<Heatmap> {
    const response = await get(`./heatmap?${query({ run: p.runs, columns: p.columns, start: p.start, end: p.end, reduction: p.reduction, metric: metricParam(p.metric) })}`, signal);
    return parseHeatmap(await binary(response));
  },
  async compare(p: { runA: string; runB: string; columns: number; start?: number; end?: number; metric: string }, signal?: AbortSignal): Promise<Comparison> {
    const response = await get(`./compare?${query({ run_a: p.runA, run_b: p.runB, columns: p.columns, start: p.start, end: p.end, metric: metricParam(p.metric) })}`, signal);
    return parseComparison(await binary(response));
  },
  /** `band` null: no low/high (the default judgement). */
  /** as sent: a label may be "NaN" (no number in it to convert) */
  reasons: async (signal?: AbortSignal) => (await (await get("./reasons", signal)).json()) as Reasons,
  flags: (run: string, band: { low: number; high: number } | null, patience: number, metric: string, signal?: AbortSignal) =>
    getJson<Flags>(`./flags?${query({ run, low: band?.low, high: band?.high, patience, metric: metricParam(metric) })}`, signal),
  suggestions: (run: string, metric: string, signal?: AbortSignal) => getJson<Suggestions>(`./suggestions?${query({ run, metric: metricParam(metric) })}`, signal),
  /** `metric`: of a ratio series (the learning rate's series takes none) */
  series: (run: string, tag: string, metric?: string, signal?: AbortSignal) => getJson<Series>(`./series?${query({ run, tag, metric: metric === undefined ? undefined : metricParam(metric) })}`, signal),
  histograms: (run: string, tag: string, signal?: AbortSignal) => getJson<Histograms>(`./histograms?${query({ run, tag })}`, signal),
  lineSearch: (run: string, signal?: AbortSignal) => getJson<LineSearch>(`./line_search?${query({ run })}`, signal),
  exportUrl: (run: string, format: "csv" | "json", metric: string) => `./export?${query({ run, format, metric: metricParam(metric) })}`,
};
