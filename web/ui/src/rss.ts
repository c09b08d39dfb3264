// The resident memory explained (GET /api/rss): for each census of the
// trace (an attach takes one of each process, `heapscope snapshot` is one),
// the process's RSS from /proc/PID/smaps split into parts that add up to
// it — heap in use, allocator overhead, free but kept by malloc, mmapped
// chunks, other anonymous memory, file-backed pages — each measured page by
// page or estimated, as the server says.

import { RSSAnswer, Resident, Rundown } from "./api";
import { bytes, bytesExact, count, dur, el, pct } from "./format";

export const rssPath = "/api/rss";

// renderRSS draws the answer into box.
export function renderRSS(box: HTMLElement, r: RSSAnswer) {
  box.textContent = "";
  const res = r.resident ?? [];
  box.setAttribute("data-censuses", String(res.length));
  box.append(el("h3", {}, "Resident memory (RSS) explained"));
  if (res.length === 0) {
    box.append(
      el("p", { id: "rss-none", class: "dim" }, "no census in this trace: RSS is not explained. `heapscope attach` takes a census of each process as it attaches (unless --no-census); `heapscope snapshot PID` is one; `heapscope info PID` prints it for any running process."),
    );
    return;
  }
  const runs = r.rundowns ?? [];
  for (const x of res) box.append(resident(x, runs.find((u) => u.pid === x.pid && u.time_ns === x.time_ns)));
}

function resident(x: Resident, run?: Rundown): HTMLElement {
  const d = el("div", { class: "rss", "data-pid": String(x.pid), "data-rss": String(x.rss), "data-pss": String(x.pss) });
  d.append(
    el("p", { class: "rss-head" }, `pid ${x.pid} at ${dur(x.time_ns)}: RSS ${bytesExact(x.rss)}, PSS ${bytesExact(x.pss)}${x.swap ? `, ${bytes(x.swap)} swapped out` : ""}`),
  );
  const t = el("table", { class: "list rss-parts" });
  t.append(el("tr", {}, ...["part", "RSS", "share", "PSS", "census bytes", "how"].map((h) => el("th", {}, h))));
  let sum = 0;
  let psum = 0;
  for (const p of x.parts ?? []) {
    sum += p.rss;
    psum += p.pss;
    const how = (p.measured ? "measured" : "estimated") + (p.how ? `: ${p.how}` : "");
    t.append(
      el(
        "tr",
        { "data-part": p.name, "data-rss": String(p.rss), "data-measured": String(p.measured) },
        el("td", {}, p.name),
        el("td", { class: "num" }, bytes(p.rss)),
        el("td", { class: "num dim" }, pct(p.rss, x.rss)),
        el("td", { class: "num" }, bytes(p.pss)),
        el("td", { class: "num dim" }, p.bytes ? bytes(p.bytes) : ""),
        el("td", { class: p.measured ? "measured" : "estimated" }, how),
      ),
    );
  }
  t.append(
    el(
      "tr",
      { class: "total", "data-sum": String(sum), "data-psum": String(psum) },
      el("th", {}, "total"),
      el("td", { class: "num" }, bytes(sum)),
      el("td", { class: "num dim" }, pct(sum, x.rss)),
      el("td", { class: "num" }, bytes(psum)),
      el("td", {}, ""),
      el("td", { class: "dim" }, `smaps_rollup says ${bytes(x.rollup_rss)}`),
    ),
  );
  d.append(t);
  const notes: string[] = [];
  notes.push(sum === x.rss ? `The parts add up to the RSS: ${bytesExact(sum)}.` : `The parts add up to ${bytesExact(sum)}, the RSS is ${bytesExact(x.rss)}: ${bytesExact(Math.abs(x.rss - sum))} apart.`);
  const est = (x.parts ?? []).filter((p) => !p.measured);
  notes.push(est.length === 0 ? "Every part was measured page by page." : `Estimated, not counted page by page: ${est.map((p) => p.name).join(", ")} (${bytes(est.reduce((a, p) => a + p.rss, 0))}); the rest was measured.`);
  if (x.trimmable > 0) notes.push(`malloc_trim(0) could give back about ${bytes(x.trimmable)} of it (whole free pages in the bins, the main arena's top).`);
  if (x.disagreement > 0) notes.push(`The pages counted in the heap exceed smaps' count there by ${bytes(x.disagreement)} (read a moment apart).`);
  if (!x.zero_pages_known) notes.push("Pages never written could not be told from resident ones (needs CAP_SYS_ADMIN): the heap's lines may count some smaps does not.");
  if (run) {
    notes.push(
      `The census found ${bytesExact(run.bytes)} in ${count(run.blocks)} blocks live that the trace had not seen allocated (the process was stopped ${dur(run.pause_ns)}); ${bytes(run.live_bytes)} in ${count(run.live_blocks)} of them are still live at the end.`,
    );
  }
  const ul = el("ul", { class: "notes" });
  for (const n of notes) ul.append(el("li", {}, n));
  d.append(ul);
  return d;
}
