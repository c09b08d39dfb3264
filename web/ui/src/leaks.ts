// The leak verdict: the reachability classes of a trace's leak check
// (GET /api/leaks) as Memcheck's leak summary gives them — LEAKS are the
// definitely and indirectly lost blocks, possibly lost listed next and
// marked, still reachable apart with its totals — and, for a live session,
// a check now (POST /api/leaks). Every number is the server's.

import { APIError, CheckAmount, CheckProcess, CheckSite, Frame, LeakAmount, LeakCheck, LeakClasses, LeaksCheckAnswer, ReportSummary, Scan, TraceLeaksAnswer, get } from "./api";
import { bytes, bytesExact, count, dur, el, siteName } from "./format";

// StackCell draws a site's stack as the page's tables do (main.ts).
export type StackCell = (st: Frame[] | null, name: string, compact?: boolean) => HTMLElement;

// leaksPath is what the overview asks for: the trace's verdict, ten sites
// of each class (html.go's static report holds this path).
export const leaksPath = "/api/leaks?top=10";

function amount(a: LeakAmount | CheckAmount): string {
  return `${bytesExact(a.bytes)} in ${count(a.blocks)} blocks`;
}

function rulesText(r: string): string {
  return r === "lsan" ? "LeakSanitizer's rules" : "Memcheck's rules";
}

// scansText says which scans the classes come from: the latest of each
// process, as the text report's ScanText does.
function scansText(lc: LeakCheck): string {
  const latest = new Map<number, Scan>();
  for (const s of lc.scans ?? []) latest.set(s.pid, s);
  const parts = [...latest.values()].map((s) => {
    let t = `pid ${s.pid} ${s.at_exit ? "at exit" : `at ${dur(s.time_ns)}`}`;
    if (s.pause_ns > 0) t += `, held ${dur(s.pause_ns)}`;
    if (s.partial) t += ", partial";
    if (!s.complete) t += ", incomplete";
    return t;
  });
  return `leak check of ${parts.join("; ")}, ${rulesText(lc.rules)}`;
}

// leakRows are the overview's summary rows for what is left at the end: with
// a leak check, what is lost, possibly lost and still reachable beside
// everything live; without, the one "Leaked" row of every live block.
// Each row: label, text, data-k, data-v.
export function leakRows(sm: ReportSummary, lc: LeakCheck | null | undefined, leaked: string, supp: string): [string, string, string, number?][] {
  if (!lc) {
    return [["Leaked", `${leaked} (no leak check: every block live at the end)${supp}`, "leaked_bytes", sm.leaked_bytes]];
  }
  return [
    ["Leaked (lost)", `${amount(lc.lost)}: definitely and indirectly lost`, "lost_bytes", lc.lost.bytes],
    ["Possibly lost", amount(lc.possibly_lost), "possibly_lost_bytes", lc.possibly_lost.bytes],
    ["Still reachable", amount(lc.still_reachable), "still_reachable_bytes", lc.still_reachable.bytes],
    ["Live at the end", `${leaked}${supp}`, "leaked_bytes", sm.leaked_bytes],
  ];
}

// leakHeadline is the overview's headline when the trace holds a leak
// check, null otherwise (the page's own then).
export function leakHeadline(lc: LeakCheck | null | undefined, supp: LeakAmount): { text: string; kind: string } | null {
  if (!lc) return null;
  const more = [`${bytes(lc.possibly_lost.bytes)} possibly lost`, `${bytes(lc.still_reachable.bytes)} still reachable`];
  if (supp.bytes > 0) more.push(`${bytes(supp.bytes)} suppressed`);
  if (lc.lost.blocks > 0) {
    return { text: `Leaked ${bytes(lc.lost.bytes)} in ${count(lc.lost.blocks)} blocks (definitely and indirectly lost); ${more.join(", ")}`, kind: "leaks" };
  }
  return { text: `No leaks: nothing definitely or indirectly lost; ${more.join(", ")}`, kind: lc.possibly_lost.blocks > 0 ? "possible" : "none" };
}

// classesText names a site's non-zero classes: "definitely 1.0 KiB in 1,
// still reachable 64 B in 2".
export function classesText(c: LeakClasses | null | undefined): string {
  if (!c) return "";
  const parts: string[] = [];
  const add = (word: string, a: LeakAmount) => {
    if (a.blocks > 0) parts.push(`${word} ${bytes(a.bytes)} in ${count(a.blocks)}`);
  };
  add("definitely lost", c.definitely_lost);
  add("indirectly lost", c.indirectly_lost);
  add("possibly lost", c.possibly_lost);
  add("still reachable", c.still_reachable);
  add("not classified", c.unclassified);
  add("not scanned", c.not_scanned);
  return parts.join(", ");
}

// fillTopLeaks fills the overview's "Leaks" list from a leak check: the
// lost sites, then the possibly lost ones, marked. pick: a site's row
// clicked (undefined in a static report). It returns false when the trace
// holds no check (the list stays the page's: every block live at the end).
export function fillTopLeaks(t: HTMLElement, title: HTMLElement, v: TraceLeaksAnswer, cell: StackCell, pick?: (name: string) => void): boolean {
  if (!v.leak_check) {
    title.textContent = "Leaks (live at the end: no leak check)";
    return false;
  }
  title.textContent = "Leaks (definitely + indirectly lost)";
  t.textContent = "";
  const lists = v.lists ?? [];
  const lost = lists.find((l) => l.class === "lost");
  const possible = lists.find((l) => l.class === "possibly_lost");
  const total = (lost?.total.bytes ?? 0) + (possible?.total.bytes ?? 0);
  for (const l of [lost, possible]) {
    if (!l) continue;
    for (const s of l.sites ?? []) {
      const bar = el("div", { class: l.class === "lost" ? "bar" : "bar possible" });
      bar.style.width = `${total ? (100 * s.bytes) / total : 0}%`;
      const name = siteName(s);
      const c = cell(s.stack, name, true);
      if (l.class === "possibly_lost") c.prepend(el("span", { class: "mark possible" }, "possibly lost"));
      c.title = `${classesText(s.classes)}\n${c.title}`;
      const tr = el("tr", { class: "pick", "data-v": String(s.bytes), "data-name": name, "data-class": l.class },
        el("td", { class: "num" }, bytes(s.bytes)), el("td", { class: "num dim" }, `${count(s.blocks)} bl.`), el("td", { class: "barcell" }, bar), c);
      if (pick) tr.addEventListener("click", () => pick(name));
      t.append(tr);
    }
    if (l.more) t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, `${count(l.more)} more ${l.class === "lost" ? "lost" : "possibly lost"} sites`)));
  }
  if (!lost?.sites?.length && !possible?.sites?.length) {
    t.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, v.suppressed.bytes > 0 ? `nothing lost — ${bytes(v.suppressed.bytes)} suppressed` : "nothing lost")));
  }
  return true;
}

// The classes of Memcheck's leak summary, in its order, by the JSON's key.
const classRows: [keyof LeakClasses, string, string][] = [
  ["definitely_lost", "definitely lost", "no pointer to them or into them remains"],
  ["indirectly_lost", "indirectly lost", "only lost blocks point to them"],
  ["possibly_lost", "possibly lost", "only pointers into their interior remain: perhaps lost, not counted as leaks"],
  ["still_reachable", "still reachable", "a pointer to their start remains: freed by nobody, not lost"],
  ["unclassified", "not classified", "the scan could not decide (memory it could not read)"],
  ["not_scanned", "not scanned", "made after the last scan of their process, or in a process not scanned"],
];

function classRow(key: string, label: string, a: LeakAmount | CheckAmount, note: string, cls = ""): HTMLElement {
  return el("tr", { "data-class": key, "data-bytes": String(a.bytes), "data-blocks": String(a.blocks), class: cls },
    el("th", {}, label), el("td", { class: "num" }, bytesExact(a.bytes)), el("td", { class: "num" }, `${count(a.blocks)} blocks`), el("td", { class: "dim" }, note));
}

// siteTable lists sites with their bytes and blocks of a class.
function siteTable(id: string, sites: { name?: string; stack: Frame[] | null; bytes: number; blocks: number; note?: string }[], more: number, cell: StackCell): HTMLElement {
  const t = el("table", { id, class: "list" });
  t.append(el("tr", {}, el("th", {}, "bytes"), el("th", {}, "blocks"), el("th", {}, "site")));
  for (const s of sites) {
    const c = cell(s.stack, siteName(s), true);
    if (s.note) c.append(el("div", { class: "dim" }, s.note));
    t.append(el("tr", { "data-v": String(s.bytes), "data-blocks": String(s.blocks) }, el("td", { class: "num" }, bytesExact(s.bytes)), el("td", { class: "num" }, count(s.blocks)), c));
  }
  if (sites.length === 0) t.append(el("tr", {}, el("td", { colspan: "3", class: "dim" }, "none")));
  if (more) t.append(el("tr", {}, el("td", { colspan: "3", class: "dim" }, `${count(more)} more sites`)));
  return t;
}

// renderVerdict draws the trace's leak check into box: Memcheck's summary
// (LEAKS, then each class), what the scans were and could not tell, and
// the still reachable and unclassified sites (the lost and possibly lost
// ones are the overview's "Leaks" list). scoped: the page shows a window or
// filter, which the classes (of the whole trace's end) do not follow.
export function renderVerdict(box: HTMLElement, v: TraceLeaksAnswer, scoped: boolean, cell: StackCell) {
  box.textContent = "";
  const lc = v.leak_check;
  if (!lc) {
    box.setAttribute("data-checked", "false");
    box.append(
      el("p", { id: "leak-none" }, `no leak check in this trace: live at the end ${amount(v.live)}`, el("span", { class: "dim" }, " — every one counted as a leak, reachable or not")),
      el("p", { class: "dim" }, "`heapscope run` checks a program as it exits (unless --no-leak-check); `heapscope leaks NAME`, or “Check leaks now” when serve follows a session, checks a running one."),
    );
    return;
  }
  box.setAttribute("data-checked", "true");
  box.append(el("p", { id: "leak-scans", class: "dim" }, scansText(lc)));
  if (scoped) box.append(el("p", { class: "dim" }, "The classes are of the whole trace's end: the window and filter do not apply to them."));
  const t = el("table", { id: "leak-summary", class: "kv classes" });
  t.append(classRow("lost", "LEAKS", lc.lost, "definitely + indirectly lost", "lost"));
  for (const [k, label, note] of classRows) {
    const a = lc[k] as LeakAmount;
    if ((k === "unclassified" || k === "not_scanned") && a.blocks === 0) continue;
    const sub = k === "definitely_lost" || k === "indirectly_lost";
    const text = k === "possibly_lost" ? "possibly lost (not counted as leaks)" : k === "still_reachable" ? "STILL REACHABLE" : label;
    t.append(classRow(k, text, a, note, sub ? `${k.replace("_", "-")} sub` : k.replace("_", "-")));
  }
  t.append(classRow("live", "live at the end", v.live, v.suppressed.blocks ? `the classes add up to it; suppressed besides: ${amount(v.suppressed)}` : "the classes add up to it", "at-end"));
  box.append(t);
  const notes = lc.notes ?? [];
  if (notes.length) {
    const ul = el("ul", { id: "leak-notes", class: "notes" });
    for (const n of notes) ul.append(el("li", {}, n));
    box.append(ul);
  }
  for (const l of v.lists ?? []) {
    if (l.class !== "still_reachable" && (l.class !== "unclassified" || l.total.blocks === 0)) continue;
    const head = l.class === "still_reachable" ? "STILL REACHABLE" : "NOT CLASSIFIED";
    box.append(
      el("h4", {}, `${head}: ${amount(l.total)}`),
      // A site's other classes, when it has some.
      siteTable(`leak-list-${l.class}`, (l.sites ?? []).map((s) => ({ ...s, note: classesText(s.classes).includes(", ") ? classesText(s.classes) : "" })), l.more, cell),
    );
  }
}

// ---- a live session's check ----

const checkClassOrder: [string, string][] = [
  ["definite", "definitely lost"],
  ["indirect", "indirectly lost"],
  ["possible", "possibly lost"],
  ["reachable", "still reachable"],
  ["unknown", "not classified"],
];

function renderCheck(box: HTMLElement, r: LeaksCheckAnswer, cell: StackCell) {
  box.textContent = "";
  const ps = r.processes ?? [];
  if (ps.length === 0) box.append(el("p", { class: "dim" }, "the session traces no process to check"));
  for (const p of ps) box.append(checkProcess(p, cell));
}

function checkProcess(p: CheckProcess, cell: StackCell): HTMLElement {
  const d = el("div", { class: "check", "data-pid": String(p.pid) });
  if (p.error) {
    d.append(el("p", { class: "check-error", "data-error": p.error }, `pid ${p.pid}: not checked: ${p.error}`));
    return d;
  }
  d.append(
    el(
      "p",
      { class: "check-head", "data-paused": String(p.paused_ns), "data-t": String(p.time_ns) },
      `pid ${p.pid}: checked at ${dur(p.time_ns)} by ${rulesText(p.rules)}; the process was stopped ${dur(p.paused_ns)} (the whole check ${dur(p.elapsed_ns)}); ${count(p.blocks)} live blocks known`,
      p.partial ? " — partial: not every live block was known" : "",
      p.complete ? "" : " — incomplete: some memory could not be read",
    ),
  );
  const c = p.classes;
  const t = el("table", { class: "kv classes check-classes" });
  const lost = { bytes: c.definitely_lost.bytes + c.indirectly_lost.bytes, blocks: c.definitely_lost.blocks + c.indirectly_lost.blocks };
  t.append(classRow("lost", "LEAKS", lost, "definitely + indirectly lost", "lost"));
  t.append(classRow("definitely_lost", "definitely lost", c.definitely_lost, "", "sub"));
  t.append(classRow("indirectly_lost", "indirectly lost", c.indirectly_lost, "", "sub"));
  t.append(classRow("possibly_lost", "possibly lost (not counted as leaks)", c.possibly_lost, "", "possibly-lost"));
  t.append(classRow("still_reachable", "STILL REACHABLE", c.still_reachable, "", "still-reachable"));
  if (c.unclassified.blocks) t.append(classRow("unclassified", "not classified", c.unclassified, ""));
  d.append(t);
  const notes = p.notes ?? [];
  if (notes.length) {
    const ul = el("ul", { class: "notes check-notes" });
    for (const n of notes) ul.append(el("li", {}, n));
    d.append(ul);
  }
  const sites = p.sites ?? [];
  for (const [k, label] of checkClassOrder) {
    const of: CheckSite[] = sites.filter((s) => s.class === k);
    if (of.length === 0) continue;
    d.append(el("h4", {}, `Top sites ${label}`), siteTable(`check-${p.pid}-${k}`, of, 0, cell));
  }
  return d;
}

// LiveCheck is the "Check leaks now" button of a live session: a POST of
// /api/leaks (the guard lets the page's own requests through: the cookie,
// its own Origin), its answer shown under it until the next check.
export class LiveCheck {
  private busy = false;

  constructor(
    private button: HTMLButtonElement,
    private box: HTMLElement,
    private cell: StackCell,
  ) {
    button.addEventListener("click", () => this.check());
  }

  // running shows the button while the session runs.
  running(on: boolean) {
    this.button.hidden = !on;
  }

  async check() {
    if (this.busy) return;
    this.busy = true;
    this.button.disabled = true;
    const text = this.button.textContent;
    this.button.textContent = "checking…";
    this.box.hidden = false;
    this.box.setAttribute("data-state", "checking");
    this.box.textContent = "Checking: each process is stopped while its memory is read…";
    try {
      const r = await get<LeaksCheckAnswer>("/api/leaks?top=10", { method: "POST" });
      renderCheck(this.box, r, this.cell);
      this.box.setAttribute("data-state", "done");
    } catch (e) {
      this.box.textContent = `the leak check failed: ${e instanceof APIError ? e.message : String(e)}`;
      this.box.setAttribute("data-state", "error");
    } finally {
      this.busy = false;
      this.button.disabled = false;
      this.button.textContent = text;
    }
  }
}
