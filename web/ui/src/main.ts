// The page of `heapscope serve`: one filter state, kept in the URL so that
// a link reproduces the view, and the views that read it. Every number is
// the server's: the page draws answers, it computes none of them.

import {
  APIError,
  CallersAnswer,
  ConsumedAnswer,
  Diff,
  FlameAnswer,
  Frame,
  Functions,
  Histogram,
  IndexState,
  LiveState,
  MemoryAnswer,
  ReportSummary,
  SearchAnswer,
  Sites,
  Summary,
  Suppressed,
  Timeline,
  TopAnswer,
  TopList,
  TopSite,
  TreeAnswer,
  WindowAnswer,
  Amount,
  RSSAnswer,
  TraceLeaksAnswer,
  embedded,
  get,
  isStatic,
} from "./api";
import { bytes, bytesExact, count, dur, el, exact, frameText, pct, siteName } from "./format";
import { TimelineView } from "./timeline";
import { FlameView } from "./flame";
import { TreeView } from "./tree";
import { ConsumedView } from "./consumed";
import { LiveCheck, classesText, fillTopLeaks, leakHeadline, leakRows, leaksPath, renderVerdict } from "./leaks";
import { renderRSS, rssPath } from "./rss";

interface State {
  from: number; // the window, ns from the trace's start; 0/0: the whole trace
  to: number;
  vfrom: number; // the timeline's view; 0/0: the whole trace
  vto: number;
  at: number; // an instant, for the "instant" cost; 0: none
  pid: number;
  tid: number;
  cost: string; // "": leaks when something leaked, else the peak
  inv: boolean; // bottom-up (inverted)
  up: boolean; // drawn as a flame (root at the bottom) rather than an icicle
  q: string; // search
  focus: string[]; // the zoomed flame node's path
  tab: string;
  share: number; // the flame graph's and trees' smallest node, a share of the total
  fn: string; // the function of the caller/callee view; "": none
  inc: string[]; // filter terms kept (include=) and left out (exclude=)
  exc: string[];
}

const tabs = ["overview", "flame", "topdown", "bottomup", "functions", "consumed", "sites", "classes", "sizes", "diff"];
// The tabs beside which the caller/callee view is shown.
const sideTabs = new Set(["functions", "topdown", "bottomup"]);
const byteCosts = new Set(["leaks", "peak", "instant", "net", "bytes", "aifi", "aifo", "aofi", "aofo"]);
// The costs whose flame graphs a static report holds.
const staticCosts = ["leaks", "peak", "bytes", "calls", "temporary"];
const costText: Record<string, string> = {
  leaks: "live at the end (leaks)",
  peak: "live at the peak",
  instant: "live at the instant",
  net: "net growth across the window",
  bytes: "bytes allocated",
  calls: "allocation calls",
  temporary: "temporary allocations",
  aifi: "AIFI bytes (allocated and freed inside)",
  aifo: "AIFO bytes (allocated inside, live at the end)",
  aofi: "AOFI bytes (allocated before, freed inside)",
  aofo: "AOFO bytes (allocated before, live at the end)",
};
const staticNodes = 2000; // web/html.go's staticMaxNodes

function readState(): State {
  const q = new URLSearchParams(location.search);
  const n = (k: string, d = 0) => {
    const v = Number(q.get(k));
    return Number.isFinite(v) && q.has(k) ? v : d;
  };
  let focus: string[] = [];
  try {
    const f = q.get("focus");
    if (f) focus = JSON.parse(f) as string[];
  } catch (e) {
    focus = [];
  }
  const tab = q.get("tab") ?? "overview";
  return {
    from: n("from"),
    to: n("to"),
    vfrom: n("vfrom"),
    vto: n("vto"),
    at: n("at"),
    pid: n("pid"),
    tid: n("tid"),
    cost: q.get("cost") ?? "",
    inv: q.get("inv") === "1",
    up: q.get("up") === "1",
    q: q.get("q") ?? "",
    focus,
    tab: tabs.includes(tab) ? tab : "overview",
    share: n("share", 0.001),
    fn: q.get("fn") ?? "",
    inc: q.getAll("include").filter((v) => v !== ""),
    exc: q.getAll("exclude").filter((v) => v !== ""),
  };
}

function writeState(s: State) {
  const q = new URLSearchParams();
  const put = (k: string, v: number | string | boolean, d: number | string | boolean) => {
    if (v !== d) q.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  };
  put("from", s.from, 0);
  put("to", s.to, 0);
  put("vfrom", s.vfrom, 0);
  put("vto", s.vto, 0);
  put("at", s.at, 0);
  put("pid", s.pid, 0);
  put("tid", s.tid, 0);
  put("cost", s.cost, "");
  put("inv", s.inv, false);
  put("up", s.up, false);
  put("q", s.q, "");
  if (s.focus.length) q.set("focus", JSON.stringify(s.focus));
  put("tab", s.tab, "overview");
  put("share", s.share, 0.001);
  put("fn", s.fn, "");
  for (const v of s.inc) q.append("include", v);
  for (const v of s.exc) q.append("exclude", v);
  const qs = q.toString();
  history.replaceState(null, "", qs ? `?${qs}` : location.pathname);
}

// api is an API path with its parameters in the order given (a static
// report holds its answers by these strings: web/html.go writes the same),
// then the state's filter unless common is false.
function api(path: string, params: [string, string | number][], common = true): string {
  const q = new URLSearchParams();
  for (const [k, v] of params) q.append(k, String(v));
  if (common) for (const [k, v] of filterParams(state)) q.append(k, v);
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}

// filterParams are the API's parameters for the state's filter: its
// window, instant, process, thread and terms.
function filterParams(s: State, withAt = true): [string, string][] {
  const q: [string, string][] = [];
  if (s.from) q.push(["from_ns", String(s.from)]);
  if (s.to) q.push(["to_ns", String(s.to)]);
  if (withAt && s.at) q.push(["at_ns", String(s.at)]);
  if (s.pid) q.push(["pid", String(s.pid)]);
  if (s.tid) q.push(["tid", String(s.tid)]);
  for (const v of s.inc) q.push(["include", v]);
  for (const v of s.exc) q.push(["exclude", v]);
  return q;
}

function filtered(s: State): boolean {
  return s.from !== 0 || s.to !== 0 || s.pid !== 0 || s.tid !== 0 || s.inc.length > 0 || s.exc.length > 0;
}

function $(id: string): HTMLElement {
  return document.getElementById(id)!;
}

// The URL serve printed holds a token, which the server traded for a
// cookie when it sent this page: it leaves the address bar and the history.
function dropToken() {
  const q = new URLSearchParams(location.search);
  if (!q.has("token")) return;
  q.delete("token");
  const qs = q.toString();
  history.replaceState(null, "", qs ? `?${qs}` : location.pathname);
}

dropToken();
let state = readState();
let summary: Summary;
let timeline: TimelineView;
let flame: FlameView;
let treeDown: TreeView;
let treeUp: TreeView;
let consumed: ConsumedView;
let liveCheck: LiveCheck;
let seq = 0; // the latest refresh; older answers are dropped

function setState(change: Partial<State>) {
  state = { ...state, ...change };
  writeState(state);
  refresh();
}

// cost is the state's cost: by default what leaked, or the peak when
// nothing did (a flame graph of nothing answers no question).
function cost(): string {
  if (state.cost) return state.cost;
  return summary && summary.summary.leaked_bytes > 0 ? "leaks" : "peak";
}

function amount(a: Amount): string {
  return `${bytesExact(a.bytes)} in ${count(a.blocks)} blocks`;
}

function valueFmt(c: string): (v: number) => string {
  return byteCosts.has(c) ? bytesExact : (v) => `${count(v)} calls`;
}

function showError(e: unknown) {
  const box = $("errors");
  box.hidden = false;
  box.textContent = e instanceof APIError ? e.message : String(e);
}

// ---- the header, the summary ----

function renderSummary(s: Summary) {
  document.title = `heapscope: ${s.trace.file.split("/").pop()}`;
  $("file").textContent = s.trace.file.split("/").pop() ?? s.trace.file;
  $("file").title = s.trace.file;
  const pt = $("processes");
  pt.textContent = "";
  pt.append(el("tr", {}, el("th", {}, "PID"), el("th", {}, "parent"), el("th", {}, "command line"), el("th", {}, "exit")));
  for (const p of s.processes ?? []) {
    // A status below 0 is not known: only heapscope's own child's is.
    const exit = !p.exited
      ? "running or unknown"
      : p.signal
        ? `signal ${p.signal}`
        : p.exit_status >= 0
          ? `status ${p.exit_status}`
          : s.trace.provider === "preload"
            ? "ended, status unknown (not heapscope's child)"
            : "detached";
    pt.append(el("tr", {}, el("td", {}, String(p.pid)), el("td", {}, String(p.ppid)), el("td", { class: "mono" }, (p.cmdline ?? []).join(" ") || p.exe), el("td", {}, exit)));
  }
  $("about").querySelector("summary")!.textContent = `Processes (${(s.processes ?? []).length})`;
  const warn = [...(s.warnings ?? []), ...(s.limitations ?? [])];
  const w = $("warnings");
  w.hidden = warn.length === 0;
  w.textContent = "";
  for (const m of warn) w.append(el("li", {}, m));
  const sel = $("pid") as HTMLSelectElement;
  sel.textContent = "";
  sel.append(el("option", { value: "0" }, "all processes"));
  for (const p of s.processes ?? []) sel.append(el("option", { value: String(p.pid) }, `${p.pid} ${p.exe.split("/").pop()}`));
  sel.hidden = (s.processes ?? []).length < 2 && state.pid === 0;
  sel.value = String(state.pid);
  $("tab-diff").hidden = !s.base;
  if (s.base) $("base-file").textContent = s.base.file;
  // With a leak check, the leaks cost is every class live at the end: the
  // lost ones are the Overview's (leaks.ts).
  costText.leaks = s.leak_check ? "live at the end (every class, lost or not)" : "live at the end (leaks)";
  const cs = $("cost") as HTMLSelectElement;
  cs.textContent = "";
  for (const c of s.costs ?? []) {
    if (!isStatic() || staticCosts.includes(c)) cs.append(el("option", { value: c }, costText[c] ?? c));
  }
}

// suppressedText says, as heaptrack does ("5.7kB (3.2kB suppressed)"), what
// the suppression rules took out of the leaks, and which rules.
function suppressedText(s: { summary: ReportSummary; suppressed: Suppressed[] | null }): string {
  const sm = s.summary;
  if (!sm.suppressed_blocks) return "";
  const rules = (s.suppressed ?? []).map((r) => r.rule).join(", ");
  return ` (${bytes(sm.suppressed_bytes)} in ${count(sm.suppressed_blocks)} blocks suppressed${rules ? ` by ${rules}` : ""}: not counted as leaked)`;
}

// scopeText names what the summary is of: the whole trace, or the process,
// thread, window and filter chosen.
function scopeText(s: State): string {
  const parts: string[] = [];
  if (s.pid) parts.push(`process ${s.pid}`);
  if (s.tid) parts.push(`thread ${s.tid}`);
  if (s.from || s.to) parts.push(`the window ${dur(s.from)} – ${dur(s.to || summary.end_ns)}`);
  if (s.inc.length || s.exc.length) parts.push("the sites the filter keeps");
  return parts.length ? parts.join(", ") : "the whole trace";
}

// renderFigures is the compact summary of the overview: of the whole trace
// (the report's, doc null), or of the window and filter (the window's
// report, doc), with the resident memory beside it. A sampled trace's
// figures are estimates (± its standard errors, where the report knows
// them); a count the trace cannot give says so, never 0.
function renderFigures(doc: Sites | null, top: TopAnswer | null, mem: MemoryAnswer | null, scope: string) {
  const s = summary;
  const d = doc ?? s;
  const sm = d.summary;
  const calls = sm.allocations + sm.reallocations;
  const supp = top ? top.suppressed : { bytes: sm.suppressed_bytes, blocks: sm.suppressed_blocks };
  const se = d.trace.standard_errors;
  const pm = (k: "bytes_allocated" | "peak_bytes" | "leaked_bytes") => (se ? ` ±${bytes(se[k])}` : "");
  const why = s.trace.estimated ? "not available when sampled" : "not available (aggregate trace)";
  const known = (field: string, text: string) => ((d.unknown ?? []).includes(field) ? why : text);
  const est = s.trace.estimated
    ? `estimated: ${s.trace.estimated}: ${count(d.trace.sampled_allocations)} allocations recorded, each scaled up${se ? "; ± is a standard error" : ""}`
    : s.trace.aggregate
      ? "estimated from snapshots (aggregate mode)"
      : "exact: every event";
  $("summary-title").textContent = `Summary of ${scope}`;
  const h = $("headline");
  // A leak check's classes are of the whole trace's end (leaks.ts).
  const lc = filtered(state) ? null : s.leak_check;
  const lh = leakHeadline(lc, supp);
  if (lh) {
    h.textContent = lh.text;
    h.setAttribute("data-kind", lh.kind);
  } else if (sm.leaked_bytes > 0) {
    h.textContent = `Leaked ${bytes(sm.leaked_bytes)}${pm("leaked_bytes")} in ${count(sm.leaked_blocks)} blocks` + (supp.bytes > 0 ? ` (${bytes(supp.bytes)} more suppressed)` : "");
    h.setAttribute("data-kind", "leaks");
  } else {
    h.textContent = `No leaks${supp.bytes > 0 ? ` — ${bytes(supp.bytes)} suppressed` : ""}; peak ${bytes(sm.peak_bytes)} at ${dur(sm.peak_time_ns)}`;
    h.setAttribute("data-kind", "none");
  }
  const rows: [string, string, string, number?][] = [
    ["Scope", scope, "scope"],
    ["Duration", dur(s.trace.duration_ns), "duration_ns"],
    ["Session", `${s.trace.session} (${s.trace.provider})`, "session"],
    ["Events", `${count(d.trace.events)}${d.trace.lost_events ? `, ${count(d.trace.lost_events)} lost` : ""}`, "events", d.trace.events],
    ["Allocation calls", count(calls), "calls", calls],
    ["Bytes allocated", bytesExact(sm.bytes_allocated) + pm("bytes_allocated"), "bytes_allocated", sm.bytes_allocated],
    ["Peak heap", `${bytesExact(sm.peak_bytes)}${pm("peak_bytes")} in ${count(sm.peak_blocks)} blocks at ${dur(sm.peak_time_ns)}`, "peak_bytes", sm.peak_bytes],
  ];
  if (mem && mem.samples > 0) {
    rows.push(["Peak resident (RSS)", `${bytesExact(mem.peak.rss)} at ${dur(mem.peak.t_ns)} (${count(mem.samples)} samples)`, "peak_rss", mem.peak.rss]);
  } else {
    rows.push(["Peak resident (RSS)", "not sampled in this trace", "peak_rss", 0]);
  }
  rows.push(
    ...leakRows(sm, lc, `${bytesExact(sm.leaked_bytes)}${pm("leaked_bytes")} in ${count(sm.leaked_blocks)} blocks`, suppressedText(d)),
    ["Temporary allocations", known("summary.temporary_allocations", `${count(sm.temporary_allocations)} (${pct(sm.temporary_allocations, calls)})`), "temporary", sm.temporary_allocations],
    ["Unmatched frees", count(sm.unmatched_frees), "unmatched_frees", sm.unmatched_frees],
    ["Failed allocations", known("summary.failed_allocations", count(sm.failed_allocations)), "failed", sm.failed_allocations],
    ["Data", est, "exact"],
  );
  const t = $("summary-table");
  t.textContent = "";
  for (const [k, v, key, n] of rows) {
    const td = el("td", { "data-k": key }, v);
    if (n !== undefined) td.setAttribute("data-v", String(n));
    t.append(el("tr", {}, el("th", {}, k), td));
  }
}

// renderTop fills the overview's four lists, heaptrack's first screen.
function renderTop(top: TopAnswer) {
  const lists: [string, TopList, (s: TopSite) => number, (v: number) => string][] = [
    ["top-peak", top.peak, (s) => s.peak, bytes],
    ["top-leaks", top.leaks, (s) => s.leaks, bytes],
    ["top-calls", top.calls, (s) => s.calls, count],
    ["top-temporary", top.temporary, (s) => s.temporary, count],
  ];
  for (const [id, l, of, fmt] of lists) {
    const t = $(id);
    t.textContent = "";
    const sites = l.sites ?? [];
    for (const s of sites) {
      const v = of(s);
      const bar = el("div", { class: "bar" });
      bar.style.width = `${l.total ? (100 * v) / l.total : 0}%`;
      const name = siteName(s);
      const tr = el("tr", { class: "pick", "data-v": String(v), "data-name": name, title: "callers and callees" },
        el("td", { class: "num" }, fmt(v)), el("td", { class: "num dim" }, pct(v, l.total)), el("td", { class: "barcell" }, bar), stackCell(s.stack, name, true));
      if (!isStatic()) tr.addEventListener("click", () => setState({ tab: "functions", fn: name }));
      t.append(tr);
    }
    if (sites.length === 0) {
      const none =
        id === "top-leaks" && top.suppressed.bytes > 0
          ? `no leaks — ${bytes(top.suppressed.bytes)} suppressed`
          : id === "top-leaks"
            ? "no leaks"
            : id === "top-temporary" && top.no_temporary
              ? "not available when sampled"
              : "none";
      t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, none)));
    }
    if (l.more) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, `${count(l.more)} more sites`)));
  }
}

// ---- the window and its classes ----

function renderWindowText() {
  const whole = !state.from && !state.to;
  $("sel-range").textContent = whole ? "whole trace" : `window ${dur(state.from)} – ${dur(state.to || summary.end_ns)} (${dur((state.to || summary.end_ns) - state.from)})`;
  $("sel-clear").hidden = whole;
}

function renderWindow(w: WindowAnswer) {
  const body = $("classes-total");
  body.textContent = "";
  const names: [keyof WindowAnswer["total"], string][] = [
    ["aifi", "allocated inside, freed inside"],
    ["aifo", "allocated inside, live at the end"],
    ["aofi", "allocated before, freed inside"],
    ["aofo", "allocated before, live at the end"],
  ];
  for (const [k, what] of names) {
    const a = w.total[k];
    const x = w.exited_aifi;
    let text = k === "aifi" && x.blocks ? `${what}, or left at their process's exit: ${amount(x)} (leaks)` : what;
    const sup = w.suppressed?.[k];
    if (sup && sup.blocks) text += `; ${amount(sup)} of it at sites whose leaks are suppressed`;
    body.append(
      el(
        "tr",
        { id: `class-${k}` },
        el("th", {}, k.toUpperCase()),
        el("td", { class: "num", "data-v": String(a.bytes) }, bytesExact(a.bytes)),
        el("td", { class: "num", "data-v": String(a.blocks) }, count(a.blocks)),
        el("td", { class: "dim", "data-exited": k === "aifi" ? String(x.bytes) : "", "data-suppressed": String(sup?.bytes ?? 0) }, text),
      ),
    );
  }
  $("sel-check").textContent =
    `${dur(w.from_ns)} – ${dur(w.to_ns)}: live at the start ${amount(w.start)} = AOFI + AOFO; live at the end ${amount(w.end)} = AIFO + AOFO; ` +
    `peak in the window ${bytesExact(w.peak.bytes)} at ${dur(w.peak.t_ns)}`;
  const t = $("classes-sites");
  t.textContent = "";
  t.append(el("tr", {}, ...["site", "AIFI", "AIFO", "AOFI", "AOFO"].map((h) => el("th", {}, h))));
  for (const s of w.sites ?? []) {
    const cell = stackCell(s.stack, siteName(s));
    if (s.suppressed_by) cell.append(el("div", { class: "dim suppressed" }, `leaks suppressed by ${s.suppressed_by}`));
    t.append(
      el(
        "tr",
        {},
        cell,
        ...[s.aifi, s.aifo, s.aofi, s.aofo].map((a) => el("td", { class: "num" }, a.blocks ? `${bytes(a.bytes)} / ${count(a.blocks)}` : "")),
      ),
    );
  }
  if (w.more) t.append(el("tr", {}, el("td", { colspan: "5", class: "dim" }, `${w.more} more sites`)));
}

// stackCell is a site: its name (the server's when it names sites) and its
// frames; a row whose frames hold the search's text is marked.
// compact: one line, the frames in its tooltip.
function stackCell(st: Frame[] | null, name: string, compact = false): HTMLElement {
  const frames = st ?? [];
  const td = el("td", { class: "stack" });
  if (frames.length === 0) {
    td.append("[no stack]");
    return td;
  }
  const named = frames.find((f) => frameText(f).startsWith(name + " ") || frameText(f) === name) ?? frames[0];
  td.append(el("div", { class: "fn" }, frameText(named)));
  if (compact) {
    td.title = frames.map(frameText).join("\n");
  } else {
    const d = el("details", {}, el("summary", {}, frames.length === 1 ? "1 frame" : `${frames.length} frames`));
    for (const f of frames) d.append(el("div", { class: "mono" }, frameText(f)));
    td.append(d);
  }
  const q = state.q.toLowerCase();
  if (q && frames.some((f) => (f.function || "").toLowerCase().includes(q))) td.classList.add("match");
  return td;
}

// ---- views ----

function renderFlame(f: FlameAnswer) {
  const c = f.cost;
  const empty = $("flame-empty");
  const canvas = $("flame");
  empty.hidden = f.total > 0;
  canvas.hidden = f.total === 0;
  if (f.total === 0) {
    empty.textContent = "";
    const what = c === "leaks" ? `Nothing leaked in this view${f.suppressed ? ` (${bytes(f.suppressed)} suppressed)` : ""}.` : `Nothing in this view by ${costText[c] ?? c}.`;
    empty.append(what, " ");
    const b = el("button", {}, "show what was live at the peak");
    b.addEventListener("click", () => setState({ cost: "peak", focus: [] }));
    if (c !== "peak") empty.append(b);
  }
  flame.set(f, state.focus, state.q, state.up, valueFmt(c), c);
  const bc = $("crumbs");
  bc.textContent = "";
  flame.crumbs().forEach((cr, i) => {
    if (i > 0) bc.append(" › ");
    const a = el("a", { href: "#" }, cr.name);
    a.addEventListener("click", (e) => {
      e.preventDefault();
      setState({ focus: cr.path });
    });
    bc.append(a);
  });
  bc.append(
    el(
      "span",
      { id: "flame-total", class: "dim", "data-v": String(f.total), "data-estimated": f.estimated ?? "" },
      `  total ${valueFmt(c)(f.total)}${f.suppressed ? `, ${bytes(f.suppressed)} suppressed, not counted` : ""}${f.estimated ? ` (${f.estimated})` : ""}`,
    ),
  );
  $("hidden").textContent = f.hidden ? `${count(f.hidden)} nodes under the threshold are not drawn (a search finds them)` : "";
}

// renderSearch says what the search found: the share of the sites whose
// stacks hold a matching function, however small each flame node.
function renderSearch(s: SearchAnswer | null, c: string) {
  const m = $("match");
  const b = $("match-filter");
  if (s === null) {
    m.textContent = "";
    b.hidden = true;
    return;
  }
  const fmt = valueFmt(c);
  const fns = s.functions ?? [];
  m.textContent = `“${s.q}”: ${fmt(s.value)}, ${pct(s.value, s.total)} of ${fmt(s.total)} (${costText[c] ?? c}) in ${count(fns.length + s.more)} functions`;
  m.setAttribute("data-value", String(s.value));
  m.setAttribute("data-total", String(s.total));
  b.hidden = isStatic();
}

function renderFunctions(rows: { name: string; module?: string; file?: string; line?: number; self: number; total: number }[], c: string) {
  const fmt = valueFmt(c);
  const t = $("functions-table");
  t.textContent = "";
  const total = rows.reduce((a, f) => Math.max(a, f.total), 0);
  let key: "self" | "total" = (t.getAttribute("data-sort") as "self" | "total") || "total";
  const head = el("tr", {}, el("th", {}, "function"), el("th", { class: "sort", "data-key": "self" }, "self"), el("th", { class: "sort", "data-key": "total" }, "inclusive"), el("th", {}, "location"));
  t.append(head);
  const sorted = [...rows].sort((a, b) => b[key] - a[key]);
  for (const f of sorted) {
    const tr = el("tr", { class: f.name === state.fn ? "pick chosen" : "pick", title: "callers and callees", "data-name": f.name },
      el("td", { class: "fn" }, f.name), el("td", { class: "num" }, fmt(f.self)), el("td", { class: "num", "data-v": String(f.total) }, `${fmt(f.total)} (${pct(f.total, total)})`),
      el("td", { class: "mono dim" }, f.file ? `${f.file.split("/").pop()}:${f.line}` : (f.module ?? "").split("/").pop() ?? ""));
    if (!isStatic()) tr.addEventListener("click", () => setState({ fn: f.name }));
    t.append(tr);
  }
  if (sorted.length === 0) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, "none")));
  head.querySelectorAll("th.sort").forEach((th) =>
    th.addEventListener("click", () => {
      key = th.getAttribute("data-key") as "self" | "total";
      t.setAttribute("data-sort", key);
      renderFunctions(rows, c);
    }),
  );
}

// renderCallers shows who called the chosen function and what it called,
// each with what the sites through them cost, beside the table.
function renderCallers(c: CallersAnswer | null) {
  const box = $("callers");
  box.hidden = c === null;
  if (c === null) return;
  const fmt = valueFmt(c.cost);
  $("callers-title").textContent = `${c.function}: ${fmt(c.total)} inclusive, ${fmt(c.self)} self`;
  for (const [id, head, rows] of [
    ["callers-table", "called by", c.callers ?? []],
    ["callees-table", "calls", c.callees ?? []],
  ] as [string, string, { name: string; value: number }[]][]) {
    const t = $(id);
    t.textContent = "";
    t.append(el("tr", {}, el("th", {}, head), el("th", {}, "value")));
    for (const r of rows) {
      const name = el("td", { class: "fn" }, r.name);
      const tr = el("tr", { "data-name": r.name }, name, el("td", { class: "num", "data-v": String(r.value) }, `${fmt(r.value)} (${pct(r.value, c.total)})`));
      if (r.name !== "[root]" && r.name !== "[self]") {
        tr.classList.add("pick");
        tr.addEventListener("click", () => setState({ fn: r.name }));
      }
      t.append(tr);
    }
    if (rows.length === 0) t.append(el("tr", {}, el("td", { colspan: "2", class: "dim" }, "none")));
  }
}

function renderSites(d: Sites) {
  const allocs = d.allocations ?? [];
  const lists: [string, string, { v: number; b?: number; name: string; stack: Frame[] | null; note?: string }[], (v: number) => string][] = [
    ["sites-leaks", d.leak_check ? "Live at the end, by class (the Overview has the leak check)" : "Leaks (live at the end of the window)", (d.leaks ?? []).map((l) => ({ v: l.bytes, b: l.blocks, name: siteName(l), stack: l.stack, note: classesText(l.classes) })), bytesExact],
    ["sites-peak", "Live at the peak", (d.peak ?? []).map((l) => ({ v: l.bytes, b: l.blocks, name: siteName(l), stack: l.stack })), bytesExact],
    ["sites-calls", "Allocation calls", allocs.filter((s) => s.allocations + s.reallocations > 0).map((s) => ({ v: s.allocations + s.reallocations, b: s.bytes, name: siteName(s), stack: s.stack })), count],
  ];
  const box = $("sites");
  box.textContent = "";
  for (const [id, title, rows, fmt] of lists) {
    const t = el("table", { id, class: "list" });
    t.append(el("tr", {}, el("th", {}, "value"), el("th", {}, id === "sites-calls" ? "bytes" : "blocks"), el("th", {}, "site")));
    for (const r of rows.slice(0, 50)) {
      const second = r.b === undefined ? "" : id === "sites-calls" ? bytes(r.b) : count(r.b);
      const cell = stackCell(r.stack, r.name);
      if (r.note) cell.append(el("div", { class: "dim" }, r.note));
      t.append(el("tr", {}, el("td", { class: "num" }, fmt(r.v)), el("td", { class: "num" }, second), cell));
    }
    if (rows.length === 0) t.append(el("tr", {}, el("td", { colspan: "3", class: "dim" }, "none")));
    box.append(el("h3", {}, title), t);
    if (id === "sites-leaks" && d.summary.suppressed_blocks) box.append(el("p", { id: "sites-suppressed", class: "dim" }, `Not listed:${suppressedText(d)}.`));
  }
  box.append(el("p", { class: "dim" }, "Temporary allocations by site: the Overview's list, or cost “temporary allocations” in the flame graph."));
}

function bars(id: string, rows: { label: string; v: number }[]) {
  const t = $(id);
  t.textContent = "";
  const max = rows.reduce((a, r) => Math.max(a, r.v), 1);
  for (const r of rows) {
    const bar = el("div", { class: "bar" });
    bar.style.width = `${(100 * r.v) / max}%`;
    t.append(el("tr", {}, el("td", { class: "num" }, r.label), el("td", { class: "num" }, count(r.v)), el("td", { class: "barcell" }, bar)));
  }
}

function sizeRows(sizes: { le: number; count: number }[]) {
  // Empty buckets before the first used one, and after the last, say nothing.
  const first = Math.max(0, sizes.findIndex((b) => b.count > 0));
  let last = sizes.length - 1;
  while (last > first && sizes[last].count === 0) last--;
  let prev = 0;
  const rows = sizes.map((b) => {
    const label = b.le <= 1 ? `≤ ${bytes(b.le)}` : prev + 1 === b.le ? bytes(b.le) : `${bytes(prev + 1)} – ${bytes(b.le)}`;
    prev = b.le;
    return { label, v: b.count };
  });
  return rows.slice(first, last + 1);
}

function renderSizes(h: Histogram | null) {
  if (h === null) {
    // A static report without the window index: the report's histogram.
    bars("sizes-table", sizeRows(summary.histogram ?? []));
    $("lifetimes-box").hidden = true;
    return;
  }
  $("lifetimes-box").hidden = false;
  bars("sizes-table", sizeRows(h.sizes ?? []));
  // Bucket 0 holds the blocks freed at the same timestamp as they were
  // made: shorter than the trace's time resolution (10 µs by default), so
  // the empty buckets after it, up to the first used, are below it and say
  // nothing (the server leaves those out).
  const lts = h.lifetimes ?? [];
  const under = h.time_resolution_ns > 1 ? ` (under ${dur(h.time_resolution_ns)}, the trace's resolution)` : "";
  const label = (b: { lt_ns: number }) => (b.lt_ns <= 1 ? `same timestamp${under}` : `< ${dur(b.lt_ns)}`);
  const lifetimes = lts.length && lts[0].count > 0 ? [{ label: label(lts[0]), v: lts[0].count }] : [];
  const first = lts.findIndex((b, i) => i > 0 && b.count > 0);
  if (first > 0) for (const b of lts.slice(first)) lifetimes.push({ label: label(b), v: b.count });
  bars("lifetimes-table", [...lifetimes, { label: "never freed", v: h.live }]);
}

function signed(fmt: (v: number) => string, v: number): string {
  return v > 0 ? `+${fmt(v)}` : v < 0 ? `−${fmt(-v)}` : fmt(0);
}

function renderDiff(d: Diff) {
  const fmt = valueFmt(d.cost);
  $("diff-total").textContent =
    `${costText[d.cost] ?? d.cost}: this trace ${fmt(d.total.value)}, base ${fmt(d.total.base)}, difference ${signed(fmt, d.total.delta)}` +
    (d.suppressed ? ` (suppressed, not counted: this trace ${fmt(d.suppressed.value)}, base ${fmt(d.suppressed.base)})` : "");
  $("diff-total").setAttribute("data-delta", String(d.total.delta));
  const t = $("diff-table");
  t.textContent = "";
  t.append(el("tr", {}, el("th", {}, "difference"), el("th", {}, "this trace"), el("th", {}, "base"), el("th", {}, "site")));
  for (const r of d.sites ?? []) {
    t.append(
      el(
        "tr",
        { "data-delta": String(r.delta) },
        el("td", { class: `num ${r.delta > 0 ? "up" : "down"}` }, signed(fmt, r.delta)),
        el("td", { class: "num" }, fmt(r.value)),
        el("td", { class: "num" }, fmt(r.base)),
        stackCell(r.stack, siteName(r)),
      ),
    );
  }
  if ((d.sites ?? []).length === 0) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, "no difference")));
  if (d.more) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, `${d.more} more sites`)));
}

// renderChips shows the filter's terms, each removable, each a click away
// from its opposite.
function renderChips() {
  const box = $("chips");
  box.textContent = "";
  const chip = (term: string, inc: boolean) => {
    const x = el("button", { class: "x", title: "remove" }, "×");
    const c = el("span", { class: inc ? "chip inc" : "chip exc", title: inc ? "kept: click to leave out instead" : "left out: click to keep only these instead", "data-term": term }, inc ? term : `−${term}`, x);
    c.addEventListener("click", (e) => {
      const inc2 = state.inc.filter((v) => !(inc && v === term));
      const exc2 = state.exc.filter((v) => !(!inc && v === term));
      if (e.target !== x) (inc ? exc2 : inc2).push(term);
      setState({ inc: inc2, exc: exc2, focus: [] });
    });
    box.append(c);
  };
  state.inc.forEach((t) => chip(t, true));
  state.exc.forEach((t) => chip(t, false));
}

// showControls shows the controls that do something on the tab, and only
// those.
function showControls(tab: string) {
  let any = false;
  document.querySelectorAll<HTMLElement>("#controls [data-tabs]").forEach((c) => {
    let on = (c.getAttribute("data-tabs") ?? "").split(" ").includes(tab);
    if (isStatic() && c.querySelector("#share")) on = false; // a static report holds one threshold
    c.hidden = !on;
    any = any || on;
  });
  $("controls").classList.toggle("bare", !any && !state.q);
}

// ---- refresh ----

// refresh draws every view of the state; partial: a first drawing while the
// index is built, which does not mark the page complete (data-ready).
async function refresh(partial = false) {
  const my = ++seq;
  const s = state;
  const c = cost();
  const stat = isStatic();
  for (const t of tabs) {
    $(`tab-${t}`).classList.toggle("on", t === s.tab);
    $(`view-${t}`).hidden = t !== s.tab;
  }
  showControls(s.tab);
  ($("cost") as HTMLSelectElement).value = c;
  ($("inv") as HTMLInputElement).checked = s.inv;
  ($("up") as HTMLInputElement).checked = s.up;
  ($("share") as HTMLInputElement).value = String(s.share * 100);
  const search = $("search") as HTMLInputElement;
  if (document.activeElement !== search) search.value = s.q;
  $("at-text").textContent = s.at ? `instant ${dur(s.at)}` : "";
  $("errors").hidden = true;
  renderChips();
  renderWindowText();
  const jobs: Promise<void>[] = [];
  const then = <T>(p: Promise<T>, f: (v: T) => void) =>
    jobs.push(
      p.then((v) => {
        if (my === seq) f(v);
      }),
    );

  // The timeline and the resident memory, of the view (zoomed) and filter.
  const view: [string, string | number][] = [];
  if (s.vfrom) view.push(["from_ns", s.vfrom]);
  if (s.vto) view.push(["to_ns", s.vto]);
  const points = stat ? 1000 : Math.min(2000, Math.max(100, Math.round($("timeline").getBoundingClientRect().width)));
  view.push(["points", points]);
  // The heap of the process, thread and sites the filter keeps, as every
  // other view is (the timeline of a process is its heap alone).
  const terms: [string, string | number][] = [];
  if (s.pid) terms.push(["pid", s.pid]);
  if (s.tid) terms.push(["tid", s.tid]);
  for (const v of s.inc) terms.push(["include", v]);
  for (const v of s.exc) terms.push(["exclude", v]);
  const sel: [number, number] | null = s.from || s.to ? [s.from || summary.start_ns, s.to || summary.end_ns] : null;
  then(get<Timeline>(api("/api/timeline", [...view, ...terms], false)), (t) => timeline.set(t, sel, s.at));
  const memView: [string, string | number][] = [...view];
  if (s.pid) memView.push(["pid", s.pid]);
  const memPath = api("/api/memory", memView, false);
  if (embedded(memPath)) then(get<MemoryAnswer>(memPath), (m) => timeline.setMemory(m));

  // The search's share, on every tab.
  if (s.q && !stat) {
    then(get<SearchAnswer>(api("/api/search", [["q", s.q], ["cost", c], ["top", 500]])), (r) => {
      renderSearch(r, c);
      if (s.tab === "functions") renderFunctions(r.functions ?? [], c);
    });
  } else {
    renderSearch(null, c);
  }

  switch (s.tab) {
    case "overview": {
      const topPath = api("/api/top", [["top", 10]]);
      const winMem: [string, string | number][] = [];
      if (s.from) winMem.push(["from_ns", s.from]);
      if (s.to) winMem.push(["to_ns", s.to]);
      winMem.push(["points", 1000]);
      if (s.pid) winMem.push(["pid", s.pid]);
      const mp = api("/api/memory", winMem, false);
      const docPath = api("/api/sites", [["top", 1]]);
      jobs.push(
        Promise.all([
          get<TopAnswer>(topPath),
          embedded(mp) ? get<MemoryAnswer>(mp) : Promise.resolve(null),
          filtered(s) ? get<Sites>(docPath) : Promise.resolve(null),
          embedded(leaksPath) ? get<TraceLeaksAnswer>(leaksPath) : Promise.resolve(null),
        ]).then(([top, mem, doc, lv]) => {
          if (my !== seq) return;
          renderTop(top);
          // The leak check's classes: the "Leaks" list, the verdict (leaks.ts).
          const title = $("top-leaks-title");
          if (lv && !filtered(s)) fillTopLeaks($("top-leaks"), title, lv, stackCell, stat ? undefined : (name) => setState({ tab: "functions", fn: name }));
          else title.textContent = lv?.leak_check ? "Leaks (live at the end of the window)" : "Leaks (live at the end)";
          if (lv) renderVerdict($("leak-verdict"), lv, filtered(s), stackCell);
          renderFigures(doc, top, mem, scopeText(s));
        }),
      );
      if (embedded(rssPath)) then(get<RSSAnswer>(rssPath), (r) => renderRSS($("rss-panel"), r));
      break;
    }
    case "flame":
      then(get<FlameAnswer>(api("/api/flame", [["cost", c], ["invert", s.inv ? 1 : 0], ["min_share", s.share], ...(stat ? ([["max_nodes", staticNodes]] as [string, number][]) : [])])), renderFlame);
      break;
    case "topdown":
    case "bottomup": {
      const inv = s.tab === "bottomup";
      then(get<TreeAnswer>(api("/api/tree", [["cost", "peak"], ["invert", inv ? 1 : 0], ["min_share", s.share], ...(stat ? ([["max_nodes", staticNodes]] as [string, number][]) : [])])), (t) =>
        (inv ? treeUp : treeDown).set(t, s.q),
      );
      break;
    }
    case "functions":
      if (!s.q) then(get<Functions>(api("/api/functions", [["cost", c], ["top", 500]])), (fs) => renderFunctions(fs.functions ?? [], c));
      break;
    case "consumed":
      then(get<ConsumedAnswer>(api("/api/consumed", [["points", stat ? 1000 : points], ["top", 10]])), (r) => consumed.set(r));
      break;
    case "sites":
      then(get<Sites>(api("/api/sites", [["top", 50]])), renderSites);
      break;
    case "classes":
      then(get<WindowAnswer>(api("/api/window", [["top", 100], ...filterParams(s, false)], false)), renderWindow);
      break;
    case "diff":
      then(get<Diff>(api("/api/diff", [["cost", c], ["top", 200]])), renderDiff);
      break;
    case "sizes": {
      const hp = api("/api/histogram", []);
      if (embedded(hp)) then(get<Histogram>(hp), renderSizes);
      else renderSizes(null);
      break;
    }
  }
  // The caller/callee view, beside the tables.
  if (sideTabs.has(s.tab) && s.fn && !stat) {
    then(get<CallersAnswer>(api("/api/callers", [["function", s.fn], ["cost", c], ["top", 50]])), renderCallers);
  } else {
    renderCallers(null);
  }
  const ex = filterParams(s);
  ($("export-pprof") as HTMLAnchorElement).href = api("/api/export", [["format", "pprof"], ...ex], false);
  ($("export-collapsed") as HTMLAnchorElement).href = api("/api/export", [["format", "collapsed"], ["cost", c], ...ex], false);
  ($("export-json") as HTMLAnchorElement).href = api("/api/export", [["format", "json"], ...ex], false);
  try {
    await Promise.all(jobs);
  } catch (e) {
    showError(e);
  }
  if (my === seq && !partial) document.body.setAttribute("data-ready", String(my));
}

// addTerm reads the filter box: "name", "module:x", "file:y", and with a
// leading "-" a term to leave out.
function addTerm(text: string) {
  let t = text.trim();
  if (!t) return;
  const exc = t.startsWith("-");
  if (exc) t = t.slice(1).trim();
  if (!t) return;
  if (exc && !state.exc.includes(t)) setState({ exc: [...state.exc, t], focus: [] });
  if (!exc && !state.inc.includes(t)) setState({ inc: [...state.inc, t], focus: [] });
}

function wire() {
  const stat = isStatic();
  timeline = new TimelineView($("timeline") as HTMLCanvasElement, $("readout"), {
    select: (from, to) => setState({ from: Math.max(0, from), to: Math.max(from + 1, to), focus: [] }),
    instant: (at) => setState({ at: Math.max(1, at), cost: "instant" }),
    view: (from, to) => {
      const a = Math.max(summary.start_ns, from);
      const b = Math.min(summary.end_ns + 1, to);
      setState(a <= summary.start_ns && b >= summary.end_ns + 1 ? { vfrom: 0, vto: 0 } : { vfrom: a, vto: b });
    },
  }, !stat);
  flame = new FlameView($("flame") as HTMLCanvasElement, $("tip"), { focus: (p) => setState({ focus: p }) });
  const pick = { pick: (name: string) => (stat ? undefined : setState({ fn: name })) };
  treeDown = new TreeView($("tree-down") as HTMLTableElement, pick);
  treeUp = new TreeView($("tree-up") as HTMLTableElement, pick);
  liveCheck = new LiveCheck($("check-leaks") as HTMLButtonElement, $("leak-check-result"), stackCell);
  consumed = new ConsumedView($("consumed") as HTMLCanvasElement, $("consumed-legend") as HTMLTableElement, $("consumed-readout"));
  for (const t of tabs) $(`tab-${t}`).addEventListener("click", () => setState({ tab: t }));
  $("cost").addEventListener("change", (e) => setState({ cost: (e.target as HTMLSelectElement).value, focus: [] }));
  $("pid").addEventListener("change", (e) => setState({ pid: Number((e.target as HTMLSelectElement).value) }));
  $("inv").addEventListener("change", (e) => setState({ inv: (e.target as HTMLInputElement).checked, focus: [] }));
  $("up").addEventListener("change", (e) => setState({ up: (e.target as HTMLInputElement).checked }));
  $("share").addEventListener("change", (e) => setState({ share: Math.max(0, Number((e.target as HTMLInputElement).value) / 100) }));
  $("search").addEventListener("input", (e) => setState({ q: (e.target as HTMLInputElement).value }));
  $("filter").addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    const box = e.target as HTMLInputElement;
    addTerm(box.value);
    box.value = "";
  });
  $("match-filter").addEventListener("click", () => {
    if (state.q && !state.inc.includes(state.q)) setState({ inc: [...state.inc, state.q], q: "" });
  });
  $("sel-clear").addEventListener("click", () => setState({ from: 0, to: 0 }));
  $("zoom-sel").addEventListener("click", () => {
    if (state.from || state.to) setState({ vfrom: state.from, vto: state.to });
  });
  $("zoom-out").addEventListener("click", () => {
    const a = state.vfrom || summary.start_ns;
    const b = state.vto || summary.end_ns;
    const w = b - a;
    const na = Math.max(summary.start_ns, a - w / 2);
    const nb = Math.min(summary.end_ns + 1, b + w / 2);
    setState(na <= summary.start_ns && nb >= summary.end_ns + 1 ? { vfrom: 0, vto: 0 } : { vfrom: Math.round(na), vto: Math.round(nb) });
  });
  $("zoom-reset").addEventListener("click", () => setState({ vfrom: 0, vto: 0 }));
  if (stat) {
    // A static report holds the whole trace's answers: no window, instant,
    // process, filter or search to ask the server for.
    document.body.classList.add("static");
    $("tl-hint").textContent = "a self-contained report of the whole trace: `heapscope serve` selects windows, instants, processes and filters";
    $("functions-hint").textContent = "Self: the function allocated; inclusive: it or what it called did. Click a column to sort. (`heapscope serve` shows each function's callers and callees.)";
  }
}

// staticTabs hides the tabs a static report holds no answers for.
function staticTabs() {
  if (!isStatic()) return;
  $("tab-classes").hidden = !embedded(api("/api/window", [["top", 100]], false));
  $("tab-consumed").hidden = !embedded(api("/api/consumed", [["points", 1000], ["top", 10]], false));
  $("tab-functions").hidden = !embedded(api("/api/functions", [["cost", cost()], ["top", 500]], false));
  if ($(`tab-${state.tab}`).hidden) state.tab = "overview";
}

// follow polls /api/live every second and redraws every view, keeping the
// filter, when the server has indexed newer records of the session.
async function follow(first: LiveState) {
  let version = first.version;
  const show = (l: LiveState) => {
    const b = $("live");
    b.hidden = false;
    b.setAttribute("data-running", String(l.running));
    b.textContent =
      `${l.running ? "live" : "ended"}: session ${l.session} (${l.file}), updated ${new Date(l.updated).toLocaleTimeString()}` +
      (l.error ? ` — ${l.error}` : "");
    liveCheck.running(l.running);
  };
  show(first);
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    let l: LiveState;
    try {
      l = await get<LiveState>("/api/live");
    } catch (e) {
      continue; // the server is busy or gone: try again
    }
    show(l);
    if (l.version !== version) {
      version = l.version;
      try {
        summary = await get<Summary>("/api/summary");
        renderSummary(summary);
        await refresh();
      } catch (e) {
        showError(e);
      }
    }
    if (!l.running && l.version === version) return;
  }
}

async function main() {
  wire();
  try {
    summary = await get<Summary>("/api/summary");
  } catch (e) {
    showError(e);
    document.body.setAttribute("data-ready", "error");
    return;
  }
  renderSummary(summary);
  staticTabs();
  if (summary.indexing && !isStatic()) {
    // The summary, timeline, flame graphs and sites of the whole trace are
    // answered at once; windows wait for the index: draw what is there, and
    // everything again once it is built.
    $("indexing").hidden = false;
    refresh(true);
    try {
      const ix = await get<IndexState>("/api/index?wait=1");
      if (ix.error) throw new APIError(ix.error);
      summary = await get<Summary>("/api/summary");
      renderSummary(summary);
    } catch (e) {
      showError(e);
    }
    $("indexing").hidden = true;
  }
  await refresh();
  if (!isStatic()) {
    try {
      const l = await get<LiveState>("/api/live");
      follow(l);
    } catch (e) {
      // not a live session
    }
  }
}

main();

export { exact };
