// The API's answers (their types generated from the server's Go types in
// apitypes.ts; see web/API.md) and how they are fetched: from the server,
// or, in a self-contained HTML report, from the answers embedded in the
// page when it was written.

export * from "./apitypes";

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

// get fetches an API path ("/api/flame?cost=leaks"); init, for another
// method (POST /api/leaks). In a static report only the embedded answers
// exist.
export async function get<T>(path: string, init?: RequestInit): Promise<T> {
  const data = window.HEAPSCOPE_DATA;
  if (data !== undefined) {
    if (path in data) {
      return data[path] as T;
    }
    throw new APIError("not in this static report: run `heapscope serve` on the trace for every view");
  }
  const r = await fetch(path, init);
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
