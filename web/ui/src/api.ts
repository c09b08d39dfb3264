// The API's answers (see web/API.md) and how they are fetched: from the
// server, or, in a self-contained HTML report, from the answers embedded in
// the page when it was written.

export interface Frame {
  function: string;
  file: string;
  line: number;
  module: string;
  address: string;
  offset: string;
  inlined: boolean;
}

export interface Process {
  pid: number;
  ppid: number;
  exe: string;
  cmdline: string[];
  exited: boolean;
  exit_status: number;
  signal: number;
}

export interface ReportSummary {
  allocations: number;
  reallocations: number;
  frees: number;
  bytes_allocated: number;
  peak_bytes: number;
  peak_blocks: number;
  peak_time_ns: number;
  leaked_bytes: number;
  leaked_blocks: number;
  temporary_allocations: number;
  unmatched_frees: number;
  failed_allocations: number;
  missed_frees: number;
}

export interface Live {
  bytes: number;
  blocks: number;
  name: string; // the site's name: its first frame that is not an allocator wrapper
  pids: number[];
  stack: Frame[];
}

export interface SiteTotals {
  allocations: number;
  reallocations: number;
  bytes: number;
  temporary: number;
  frees: number;
  failed: number;
  leaked_bytes: number;
  peak_bytes: number;
  name: string;
  pids: number[];
  stack: Frame[];
}

export interface Bucket {
  le: number;
  count: number;
}

export interface ReportJSON {
  trace: {
    file: string;
    session: string;
    provider: string;
    pids: number[];
    duration_ns: number;
    events: number;
    lost_events: number;
    aggregate: boolean;
  };
  summary: ReportSummary;
  leaks: Live[];
  peak: Live[];
  allocations: SiteTotals[];
  histogram: Bucket[];
  processes: Process[];
  limitations: string[];
  warnings: string[];
  window?: { from_ns: number; to_ns: number };
}

export interface Summary extends ReportJSON {
  start_ns: number;
  end_ns: number;
  index: { events: number; blocks: number; sites: number };
  costs: string[];
  // true while the server builds its windowed index (see /api/index)
  indexing: boolean;
  base: { file: string; summary: ReportSummary } | null;
}

export interface IndexState {
  ready: boolean;
  error?: string;
  events: number;
  blocks: number;
}

export interface DiffTotal {
  value: number;
  base: number;
  delta: number;
}

export interface Diff {
  cost: string;
  base: string;
  total: DiffTotal;
  sites: (DiffTotal & { name: string; stack: Frame[] })[];
  more: number;
}

export interface Point {
  t_ns: number;
  bytes: number;
  blocks: number;
}

export interface TimelinePoint {
  t_ns: number;
  width: number;
  max_bytes: number;
  max_blocks: number;
  end_bytes: number;
  end_blocks: number;
  allocs: number;
  frees: number;
}

export interface Timeline {
  from_ns: number;
  to_ns: number;
  width_ns: number;
  peak: Point;
  points: TimelinePoint[];
  // the heap model's coarse timeline, while the index is built
  coarse?: boolean;
}

export interface Amount {
  bytes: number;
  blocks: number;
}

export interface Classes {
  aifi: Amount;
  aifo: Amount;
  aofi: Amount;
  aofo: Amount;
}

export interface SiteClasses extends Classes {
  site: number;
  name: string;
  pids: number[];
  stack: Frame[];
}

export interface Window {
  from_ns: number;
  to_ns: number;
  total: Classes;
  start: Amount;
  end: Amount;
  peak: Point;
  sites: SiteClasses[];
  more: number;
  unmatched_frees: number;
}

export interface FlameNode {
  name: string;
  module?: string;
  file?: string;
  line?: number;
  parent: number;
  depth: number;
  value: number;
  self: number;
}

export interface Flame {
  cost: string;
  inverted: boolean;
  total: number;
  nodes: FlameNode[];
  hidden: number;
}

export interface FunctionRow {
  name: string;
  module?: string;
  file?: string;
  line?: number;
  self: number;
  total: number;
}

export interface Functions {
  cost: string;
  functions: FunctionRow[];
}

export interface Callers {
  cost: string;
  function: string;
  self: number;
  total: number;
  callers: { name: string; value: number }[];
  callees: { name: string; value: number }[];
}

export interface Histogram {
  sizes: Bucket[];
  lifetimes: { lt_ns: number; count: number }[];
  live: number;
}

// Answers embedded in a self-contained report, by request path and query.
declare global {
  interface Window {
    HEAPSCOPE_DATA?: Record<string, unknown>;
  }
}

export function isStatic(): boolean {
  return window.HEAPSCOPE_DATA !== undefined;
}

// embedded reports whether path can be answered: always with a server; in
// a static report, when its answer is in the file.
export function embedded(path: string): boolean {
  const data = window.HEAPSCOPE_DATA;
  return data === undefined || path in data;
}

export class APIError extends Error {}

// get fetches an API path ("/api/flame?cost=leaks"). In a static report
// only the embedded answers exist.
export async function get<T>(path: string): Promise<T> {
  const data = window.HEAPSCOPE_DATA;
  if (data !== undefined) {
    if (path in data) {
      return data[path] as T;
    }
    throw new APIError("not in this static report: run `heapscope serve` on the trace for every view");
  }
  const r = await fetch(path);
  if (!r.ok) {
    let msg = r.statusText;
    try {
      msg = ((await r.json()) as { error: string }).error;
    } catch (e) {
      // not JSON: keep the status text
    }
    throw new APIError(`${path}: ${msg}`);
  }
  return (await r.json()) as T;
}
