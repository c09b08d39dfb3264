// The page of `heapscope serve`: one filter state, kept in the URL so that
// a link reproduces the view, and the views that read it.

import {
  APIError,
  Callers,
  Flame,
  Functions,
  Histogram,
  isStatic,
  embedded,
  get,
  ReportJSON,
  Summary,
  Timeline,
  Window,
  Frame,
  Amount,
  Diff,
  IndexState,
} from "./api";
import { bytes, bytesExact, count, dur, el, exact, frameText, pct } from "./format";
import { TimelineView } from "./timeline";
import { FlameView } from "./flame";

interface State {
  from: number; // the window, ns from the trace's start; 0/0: the whole trace
  to: number;
  vfrom: number; // the timeline's view; 0/0: the whole trace
  vto: number;
  at: number; // an instant, for the "instant" cost; 0: none
  pid: number;
  tid: number;
  cost: string;
  inv: boolean; // bottom-up (inverted)
  up: boolean; // drawn as a flame (root at the bottom) rather than an icicle
  q: string; // search
  focus: string[]; // the zoomed flame node's path
  tab: string;
  share: number; // the flame graph's smallest node, a share of the total
  fn: string; // the function of the caller/callee view; "": none
}

const tabs = ["flame", "functions", "sites", "classes", "sizes", "diff"];
const byteCosts = new Set(["leaks", "peak", "instant", "net", "bytes", "aifi", "aifo", "aofi", "aofo"]);
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
  const tab = q.get("tab") ?? "flame";
  return {
    from: n("from"),
    to: n("to"),
    vfrom: n("vfrom"),
    vto: n("vto"),
    at: n("at"),
    pid: n("pid"),
    tid: n("tid"),
    cost: q.get("cost") ?? "leaks",
    inv: q.get("inv") === "1",
    up: q.get("up") === "1",
    q: q.get("q") ?? "",
    focus,
    tab: tabs.includes(tab) ? tab : "flame",
    share: n("share", 0.001),
    fn: q.get("fn") ?? "",
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
  put("cost", s.cost, "leaks");
  put("inv", s.inv, false);
  put("up", s.up, false);
  put("q", s.q, "");
  if (s.focus.length) q.set("focus", JSON.stringify(s.focus));
  put("tab", s.tab, "flame");
  put("share", s.share, 0.001);
  put("fn", s.fn, "");
  const qs = q.toString();
  history.replaceState(null, "", qs ? `?${qs}` : location.pathname);
}

// filter is the API's query string for the state's filter.
function filter(s: State, withAt = true): string {
  const q = new URLSearchParams();
  if (s.from) q.set("from_ns", String(s.from));
  if (s.to) q.set("to_ns", String(s.to));
  if (withAt && s.at) q.set("at_ns", String(s.at));
  if (s.pid) q.set("pid", String(s.pid));
  if (s.tid) q.set("tid", String(s.tid));
  return q.toString();
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
let seq = 0; // the latest refresh; older answers are dropped

function setState(change: Partial<State>) {
  state = { ...state, ...change };
  writeState(state);
  refresh();
}

function amount(a: Amount): string {
  return `${bytesExact(a.bytes)} in ${count(a.blocks)} blocks`;
}

function valueFmt(cost: string): (v: number) => string {
  return byteCosts.has(cost) ? bytesExact : (v) => `${count(v)} calls`;
}

function showError(e: unknown) {
  const box = $("errors");
  box.hidden = false;
  box.textContent = e instanceof APIError ? e.message : String(e);
}

// ---- summary ----

function renderSummary(s: Summary) {
  document.title = `heapscope: ${s.trace.file.split("/").pop()}`;
  $("file").textContent = s.trace.file;
  const sm = s.summary;
  const rows: [string, string, string, number?][] = [
    ["Duration", dur(s.trace.duration_ns), "duration_ns"],
    ["Session", `${s.trace.session} (${s.trace.provider})`, "session"],
    ["Events", count(s.trace.events), "events", s.trace.events],
    ["Lost events", count(s.trace.lost_events), "lost_events", s.trace.lost_events],
    ["Allocation calls", count(sm.allocations + sm.reallocations), "calls", sm.allocations + sm.reallocations],
    ["Bytes allocated", bytesExact(sm.bytes_allocated), "bytes_allocated", sm.bytes_allocated],
    ["Peak", `${bytesExact(sm.peak_bytes)} in ${count(sm.peak_blocks)} blocks at ${dur(sm.peak_time_ns)}`, "peak_bytes", sm.peak_bytes],
    ["Leaked", `${bytesExact(sm.leaked_bytes)} in ${count(sm.leaked_blocks)} blocks`, "leaked_bytes", sm.leaked_bytes],
    ["Temporary allocations", `${count(sm.temporary_allocations)} (${pct(sm.temporary_allocations, sm.allocations + sm.reallocations)})`, "temporary", sm.temporary_allocations],
    ["Unmatched frees", count(sm.unmatched_frees), "unmatched_frees", sm.unmatched_frees],
    ["Failed allocations", count(sm.failed_allocations), "failed", sm.failed_allocations],
    ["Data", s.trace.aggregate ? "estimated from snapshots (aggregate mode)" : "exact: every event", "exact"],
  ];
  const t = $("summary-table");
  t.textContent = "";
  for (const [k, v, key, n] of rows) {
    const td = el("td", { "data-k": key }, v);
    if (n !== undefined) td.setAttribute("data-v", String(n));
    t.append(el("tr", {}, el("th", {}, k), td));
  }
  const pt = $("processes");
  pt.textContent = "";
  pt.append(el("tr", {}, el("th", {}, "PID"), el("th", {}, "parent"), el("th", {}, "command line"), el("th", {}, "exit")));
  for (const p of s.processes) {
    const exit = p.exited ? (p.signal ? `signal ${p.signal}` : `status ${p.exit_status}`) : "running or unknown";
    pt.append(el("tr", {}, el("td", {}, String(p.pid)), el("td", {}, String(p.ppid)), el("td", { class: "mono" }, p.cmdline.join(" ") || p.exe), el("td", {}, exit)));
  }
  const warn = [...s.warnings, ...s.limitations];
  const w = $("warnings");
  w.hidden = warn.length === 0;
  w.textContent = "";
  for (const m of warn) w.append(el("li", {}, m));
  const sel = $("pid") as HTMLSelectElement;
  sel.textContent = "";
  sel.append(el("option", { value: "0" }, "all processes"));
  for (const p of s.processes) sel.append(el("option", { value: String(p.pid) }, `${p.pid} ${p.exe.split("/").pop()}`));
  sel.value = String(state.pid);
  $("tab-diff").hidden = !s.base;
  if (s.base) $("base-file").textContent = s.base.file;
  const cs = $("cost") as HTMLSelectElement;
  cs.textContent = "";
  for (const c of s.costs) cs.append(el("option", { value: c }, costText[c] ?? c));
}

// ---- the window bar and classes ----

function renderWindow(w: Window) {
  const whole = !state.from && !state.to;
  $("sel-range").textContent = whole
    ? `whole trace (${dur(w.from_ns)} – ${dur(w.to_ns)})`
    : `${dur(w.from_ns)} – ${dur(w.to_ns)} (${dur(w.to_ns - w.from_ns)})`;
  $("sel-clear").hidden = whole;
  const body = $("classes-total");
  body.textContent = "";
  const names: [keyof Window["total"], string][] = [
    ["aifi", "allocated inside, freed inside"],
    ["aifo", "allocated inside, live at the end"],
    ["aofi", "allocated before, freed inside"],
    ["aofo", "allocated before, live at the end"],
  ];
  for (const [k, text] of names) {
    const a = w.total[k];
    body.append(
      el(
        "tr",
        { id: `class-${k}` },
        el("th", {}, k.toUpperCase()),
        el("td", { class: "num", "data-v": String(a.bytes) }, bytesExact(a.bytes)),
        el("td", { class: "num", "data-v": String(a.blocks) }, count(a.blocks)),
        el("td", { class: "dim" }, text),
      ),
    );
  }
  $("sel-check").textContent =
    `live at the start ${amount(w.start)} = AOFI + AOFO; live at the end ${amount(w.end)} = AIFO + AOFO; ` +
    `peak in the window ${bytesExact(w.peak.bytes)} at ${dur(w.peak.t_ns)}`;
  const t = $("classes-sites");
  t.textContent = "";
  t.append(el("tr", {}, ...["site", "AIFI", "AIFO", "AOFI", "AOFO"].map((h) => el("th", {}, h))));
  for (const s of w.sites) {
    t.append(
      el(
        "tr",
        {},
        stackCell(s.stack),
        ...[s.aifi, s.aifo, s.aofi, s.aofo].map((a) => el("td", { class: "num" }, a.blocks ? `${bytes(a.bytes)} / ${count(a.blocks)}` : "")),
      ),
    );
  }
  if (w.more) t.append(el("tr", {}, el("td", { colspan: "5", class: "dim" }, `${w.more} more sites`)));
}

function stackCell(st: Frame[]): HTMLElement {
  const td = el("td", { class: "stack" });
  if (st.length === 0) {
    td.append("[no stack]");
    return td;
  }
  const head = el("div", { class: "fn" }, frameText(st[0]));
  td.append(head);
  if (st.length > 1) {
    const d = el("details", {}, el("summary", {}, `${st.length - 1} callers`));
    for (const f of st.slice(1)) d.append(el("div", { class: "mono" }, frameText(f)));
    td.append(d);
  }
  return td;
}

// ---- views ----

function renderFlame(f: Flame) {
  flame.set(f, state.focus, state.q, state.up, valueFmt(f.cost), f.cost);
  const bc = $("crumbs");
  bc.textContent = "";
  flame.crumbs().forEach((c, i) => {
    if (i > 0) bc.append(" › ");
    const a = el("a", { href: "#" }, c.name);
    a.addEventListener("click", (e) => {
      e.preventDefault();
      setState({ focus: c.path });
    });
    bc.append(a);
  });
  const m = flame.matched();
  $("match").textContent = state.q ? `“${state.q}”: ${valueFmt(f.cost)(m.value)}, ${pct(m.value, m.total)} of ${valueFmt(f.cost)(m.total)}` : `total ${valueFmt(f.cost)(f.total)}`;
  $("hidden").textContent = f.hidden ? `${count(f.hidden)} nodes under the threshold are not drawn` : "";
}

function renderFunctions(fs: Functions) {
  const fmt = valueFmt(fs.cost);
  const t = $("functions-table");
  t.textContent = "";
  const total = fs.functions.reduce((a, f) => Math.max(a, f.total), 0);
  let key: "self" | "total" = (t.getAttribute("data-sort") as "self" | "total") || "total";
  const head = el("tr", {}, el("th", {}, "function"), el("th", { class: "sort", "data-key": "self" }, "self"), el("th", { class: "sort", "data-key": "total" }, "inclusive"), el("th", {}, "location"));
  t.append(head);
  const rows = [...fs.functions].sort((a, b) => b[key] - a[key]);
  for (const f of rows) {
    const tr = el("tr", { class: f.name === state.fn ? "pick chosen" : "pick", title: "callers and callees" }, el("td", { class: "fn" }, f.name), el("td", { class: "num" }, fmt(f.self)), el("td", { class: "num" }, `${fmt(f.total)} (${pct(f.total, total)})`), el("td", { class: "mono dim" }, f.file ? `${f.file.split("/").pop()}:${f.line}` : (f.module ?? "")));
    tr.addEventListener("click", () => setState({ fn: f.name }));
    t.append(tr);
  }
  head.querySelectorAll("th.sort").forEach((th) =>
    th.addEventListener("click", () => {
      key = th.getAttribute("data-key") as "self" | "total";
      t.setAttribute("data-sort", key);
      renderFunctions(fs);
    }),
  );
}

// renderCallers shows who called the chosen function and what it called,
// each with what the sites through them cost.
function renderCallers(c: Callers | null) {
  const box = $("callers");
  box.hidden = c === null;
  if (c === null) return;
  const fmt = valueFmt(c.cost);
  $("callers-title").textContent = `${c.function}: ${fmt(c.total)} inclusive, ${fmt(c.self)} self`;
  for (const [id, head, rows] of [
    ["callers-table", "called by", c.callers],
    ["callees-table", "calls", c.callees],
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

function renderSites(d: ReportJSON) {
  const lists: [string, string, { v: number; b?: number; stack: Frame[] }[], (v: number) => string][] = [
    ["sites-leaks", "Leaks (live at the end of the window)", d.leaks.map((l) => ({ v: l.bytes, b: l.blocks, stack: l.stack })), bytesExact],
    ["sites-peak", "Live at the peak", d.peak.map((l) => ({ v: l.bytes, b: l.blocks, stack: l.stack })), bytesExact],
    ["sites-calls", "Allocation calls", d.allocations.filter((s) => s.allocations + s.reallocations > 0).sort((a, b) => b.allocations + b.reallocations - (a.allocations + a.reallocations)).map((s) => ({ v: s.allocations + s.reallocations, b: s.bytes, stack: s.stack })), count],
    ["sites-temp", "Temporary allocations", d.allocations.filter((s) => s.temporary > 0).sort((a, b) => b.temporary - a.temporary).map((s) => ({ v: s.temporary, stack: s.stack })), count],
  ];
  const box = $("sites");
  box.textContent = "";
  for (const [id, title, rows, fmt] of lists) {
    const t = el("table", { id, class: "list" });
    t.append(el("tr", {}, el("th", {}, "value"), el("th", {}, id === "sites-calls" ? "bytes" : id === "sites-temp" ? "" : "blocks"), el("th", {}, "site")));
    for (const r of rows.slice(0, 50)) {
      const second = r.b === undefined ? "" : id === "sites-calls" ? bytes(r.b) : count(r.b);
      t.append(el("tr", {}, el("td", { class: "num" }, fmt(r.v)), el("td", { class: "num" }, second), stackCell(r.stack)));
    }
    if (rows.length === 0) t.append(el("tr", {}, el("td", { colspan: "3", class: "dim" }, "none")));
    box.append(el("h3", {}, title), t);
  }
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

function renderSizes(h: Histogram) {
  // Empty buckets before the first used one say nothing.
  const from = (xs: { count: number }[]) => Math.max(0, xs.findIndex((b) => b.count > 0));
  let prev = 0;
  const sizes = h.sizes.map((b) => {
    const label = b.le <= 1 ? `≤ ${bytes(b.le)}` : prev + 1 === b.le ? bytes(b.le) : `${bytes(prev + 1)} – ${bytes(b.le)}`;
    prev = b.le;
    return { label, v: b.count };
  });
  bars("sizes-table", sizes.slice(from(h.sizes)));
  // Bucket 0 holds the blocks freed at the same timestamp as they were
  // made: shorter than the trace's time resolution.
  const lifetimes = h.lifetimes.map((b) => ({ label: b.lt_ns <= 1 ? "same timestamp" : `< ${dur(b.lt_ns)}`, v: b.count }));
  bars("lifetimes-table", [...lifetimes.slice(from(h.lifetimes)), { label: "never freed", v: h.live }]);
}

function signed(fmt: (v: number) => string, v: number): string {
  return v > 0 ? `+${fmt(v)}` : v < 0 ? `−${fmt(-v)}` : fmt(0);
}

function renderDiff(d: Diff) {
  const fmt = valueFmt(d.cost);
  $("diff-total").textContent = `${costText[d.cost] ?? d.cost}: this trace ${fmt(d.total.value)}, base ${fmt(d.total.base)}, difference ${signed(fmt, d.total.delta)}`;
  $("diff-total").setAttribute("data-delta", String(d.total.delta));
  const t = $("diff-table");
  t.textContent = "";
  t.append(el("tr", {}, el("th", {}, "difference"), el("th", {}, "this trace"), el("th", {}, "base"), el("th", {}, "site")));
  for (const r of d.sites) {
    t.append(
      el(
        "tr",
        { "data-delta": String(r.delta) },
        el("td", { class: `num ${r.delta > 0 ? "up" : "down"}` }, signed(fmt, r.delta)),
        el("td", { class: "num" }, fmt(r.value)),
        el("td", { class: "num" }, fmt(r.base)),
        stackCell(r.stack),
      ),
    );
  }
  if (d.sites.length === 0) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, "no difference")));
  if (d.more) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, `${d.more} more sites`)));
}

// ---- refresh ----

// refresh draws every view of the state; partial: a first drawing while the
// index is built, which does not mark the page complete (data-ready).
async function refresh(partial = false) {
  const my = ++seq;
  const s = state;
  for (const t of tabs) {
    $(`tab-${t}`).classList.toggle("on", t === s.tab);
    $(`view-${t}`).hidden = t !== s.tab;
  }
  ($("cost") as HTMLSelectElement).value = s.cost;
  ($("inv") as HTMLInputElement).checked = s.inv;
  ($("up") as HTMLInputElement).checked = s.up;
  ($("share") as HTMLInputElement).value = String(s.share * 100);
  const search = $("search") as HTMLInputElement;
  if (document.activeElement !== search) search.value = s.q;
  $("at-text").textContent = s.at ? `instant ${dur(s.at)}` : "click the timeline for an instant";
  $("errors").hidden = true;
  const f = filter(s);
  const view = new URLSearchParams();
  if (s.vfrom) view.set("from_ns", String(s.vfrom));
  if (s.vto) view.set("to_ns", String(s.vto));
  // A static report holds one timeline, of 1000 points.
  view.set("points", isStatic() ? "1000" : String(Math.min(2000, Math.max(100, Math.round($("timeline").getBoundingClientRect().width)))));
  const jobs: Promise<void>[] = [];
  const sel: [number, number] | null = s.from || s.to ? [s.from || summary.start_ns, s.to || summary.end_ns] : null;
  jobs.push(
    get<Timeline>(`/api/timeline?${view}`).then((t) => {
      if (my === seq) timeline.set(t, sel, s.at);
    }),
  );
  const wpath = `/api/window?${filter(s, false)}&top=100`;
  if (embedded(wpath)) {
    jobs.push(
      get<Window>(wpath).then((w) => {
        if (my === seq) renderWindow(w);
      }),
    );
  } else {
    // A static report made without the window index.
    $("sel-range").textContent = "whole trace (window classes: run `heapscope serve` on the trace)";
  }
  const amp = f ? `&${f}` : "";
  switch (s.tab) {
    case "flame":
      jobs.push(
        get<Flame>(`/api/flame?cost=${s.cost}&invert=${s.inv ? 1 : 0}&min_share=${s.share}${amp}${isStatic() ? "&max_nodes=2000" : ""}`).then((fl) => {
          if (my === seq) renderFlame(fl);
        }),
      );
      break;
    case "functions":
      jobs.push(
        get<Functions>(`/api/functions?cost=${s.cost}&top=500${amp}`).then((fs) => {
          if (my === seq) renderFunctions(fs);
        }),
      );
      if (s.fn && !isStatic()) {
        jobs.push(
          get<Callers>(`/api/callers?function=${encodeURIComponent(s.fn)}&cost=${s.cost}&top=50${amp}`).then((c) => {
            if (my === seq) renderCallers(c);
          }),
        );
      } else {
        renderCallers(null);
      }
      break;
    case "sites":
      jobs.push(
        get<ReportJSON>(`/api/sites?top=50${amp}`).then((d) => {
          if (my === seq) renderSites(d);
        }),
      );
      break;
    case "diff":
      jobs.push(
        get<Diff>(`/api/diff?cost=${s.cost}&top=200${amp}`).then((d) => {
          if (my === seq) renderDiff(d);
        }),
      );
      break;
    case "sizes":
      jobs.push(
        get<Histogram>(`/api/histogram?${f}`).then((h) => {
          if (my === seq) renderSizes(h);
        }),
      );
      break;
  }
  const ex = f ? `&${f}` : "";
  ($("export-pprof") as HTMLAnchorElement).href = `/api/export?format=pprof${ex}`;
  ($("export-collapsed") as HTMLAnchorElement).href = `/api/export?format=collapsed&cost=${s.cost}${ex}`;
  ($("export-json") as HTMLAnchorElement).href = `/api/export?format=json${ex}`;
  try {
    await Promise.all(jobs);
  } catch (e) {
    showError(e);
  }
  if (my === seq && !partial) document.body.setAttribute("data-ready", String(my));
}

function wire() {
  timeline = new TimelineView($("timeline") as HTMLCanvasElement, {
    select: (from, to) => setState({ from: Math.max(0, from), to: Math.max(from + 1, to), focus: [] }),
    instant: (at) => setState({ at: Math.max(1, at), cost: "instant" }),
    view: (from, to) => {
      const a = Math.max(summary.start_ns, from);
      const b = Math.min(summary.end_ns + 1, to);
      setState(a <= summary.start_ns && b >= summary.end_ns + 1 ? { vfrom: 0, vto: 0 } : { vfrom: a, vto: b });
    },
  });
  flame = new FlameView($("flame") as HTMLCanvasElement, $("tip"), { focus: (p) => setState({ focus: p }) });
  for (const t of tabs) $(`tab-${t}`).addEventListener("click", () => setState({ tab: t }));
  $("cost").addEventListener("change", (e) => setState({ cost: (e.target as HTMLSelectElement).value, focus: [] }));
  $("pid").addEventListener("change", (e) => setState({ pid: Number((e.target as HTMLSelectElement).value) }));
  $("inv").addEventListener("change", (e) => setState({ inv: (e.target as HTMLInputElement).checked, focus: [] }));
  $("up").addEventListener("change", (e) => setState({ up: (e.target as HTMLInputElement).checked }));
  $("share").addEventListener("change", (e) => setState({ share: Math.max(0, Number((e.target as HTMLInputElement).value) / 100) }));
  $("search").addEventListener("input", (e) => setState({ q: (e.target as HTMLInputElement).value }));
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
  if (isStatic()) {
    document.body.classList.add("static");
  }
}

interface LiveState {
  session: string;
  file: string;
  running: boolean;
  version: number;
  updated: string;
  error?: string;
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
