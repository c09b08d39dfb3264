// The top-down and bottom-up trees, as heaptrack's: a row per frame on the
// paths from the root, a column per cost (peak, leaked, allocations,
// temporary, allocated), expandable. Rows open and close with a click on
// their arrow; a click on a column's head orders every level by it; a
// click on a row's name shows its callers and callees.

import { TreeAnswer, TreeNode } from "./api";
import { bytes, count, el, pct } from "./format";

export interface TreeEvents {
  pick(name: string): void; // the caller/callee view of a function
}

const heads: Record<string, string> = {
  peak: "peak",
  leaks: "leaked",
  calls: "allocations",
  temporary: "temporary",
  bytes: "allocated",
};
const byteCols = new Set(["peak", "leaks", "bytes"]);

export class TreeView {
  private data: TreeAnswer | null = null;
  private nodes: TreeNode[] = [];
  private kids: number[][] = [];
  private open = new Set<string>(); // the paths open, kept across answers
  private sortCol = 0;
  private search = "";
  private opened = false; // the first answer opened its largest path

  constructor(
    private table: HTMLTableElement,
    private ev: TreeEvents,
  ) {}

  set(t: TreeAnswer, search: string) {
    this.data = t;
    this.nodes = t.nodes ?? [];
    this.search = search.toLowerCase();
    this.kids = this.nodes.map(() => []);
    this.nodes.forEach((n, i) => {
      if (n.parent >= 0) this.kids[n.parent].push(i);
    });
    const costs = t.costs ?? [];
    this.sortCol = Math.max(0, costs.indexOf(t.sort));
    if (!this.opened && this.nodes.length > 0) {
      // Open the largest path while it goes on alone, as far as ten levels.
      this.opened = true;
      let i = 0;
      for (let d = 0; d < 10; d++) {
        this.open.add(this.path(i));
        const ks = this.kids[i];
        if (ks.length === 0) break;
        i = ks[0];
        if (ks.length > 1) {
          this.open.add(this.path(i));
          break;
        }
      }
    }
    this.render();
  }

  private path(i: number): string {
    const out: string[] = [];
    for (; i > 0; i = this.nodes[i].parent) out.push(this.nodes[i].name);
    return out.reverse().join("\u001f");
  }

  private sorted(ks: number[]): number[] {
    const c = this.sortCol;
    return [...ks].sort((a, b) => (this.nodes[b].values?.[c] ?? 0) - (this.nodes[a].values?.[c] ?? 0));
  }

  render() {
    const t = this.table;
    t.textContent = "";
    const d = this.data;
    if (!d) return;
    const costs = d.costs ?? [];
    const head = el("tr", {}, el("th", {}, d.inverted ? "allocated in, called from" : "function, calling"));
    costs.forEach((c, i) => {
      const th = el("th", { class: i === this.sortCol ? "sort on" : "sort", "data-col": c }, heads[c] ?? c);
      th.addEventListener("click", () => {
        this.sortCol = i;
        this.render();
      });
      head.append(th);
    });
    head.append(el("th", {}, "location"));
    t.append(head);
    if (this.nodes.length === 0) return;
    const root = this.nodes[0];
    const rows: HTMLElement[] = [];
    const walk = (i: number) => {
      for (const k of this.sorted(this.kids[i])) {
        rows.push(this.row(k, root, costs));
        if (this.open.has(this.path(k))) walk(k);
      }
    };
    walk(0);
    t.append(...rows);
    if (rows.length === 0) t.append(el("tr", {}, el("td", { colspan: String(costs.length + 2), class: "dim" }, "nothing in this window")));
    if (d.hidden) t.append(el("tr", {}, el("td", { colspan: String(costs.length + 2), class: "dim" }, `${count(d.hidden)} smaller nodes are not listed (hide under, above)`)));
  }

  private row(i: number, root: TreeNode, costs: string[]): HTMLElement {
    const n = this.nodes[i];
    const p = this.path(i);
    const isOpen = this.open.has(p);
    const hasKids = this.kids[i].length > 0;
    const arrow = el("span", { class: "arrow" }, hasKids ? (isOpen ? "▾" : "▸") : "·");
    const name = el("span", { class: "fn pick" }, n.name);
    const cell = el("td", { class: "tree-name" }, arrow, " ", name);
    cell.style.paddingLeft = `${4 + (n.depth - 1) * 14}px`;
    const tr = el("tr", { "data-path": p, "data-depth": String(n.depth) }, cell);
    if (this.search && n.name.toLowerCase().includes(this.search)) tr.classList.add("match");
    costs.forEach((c, k) => {
      const v = n.values?.[k] ?? 0;
      const tot = root.values?.[k] ?? 0;
      const txt = v === 0 ? "" : `${byteCols.has(c) ? bytes(v) : count(v)} ${pct(v, tot)}`;
      tr.append(el("td", { class: "num", "data-col": c, "data-v": String(v) }, txt));
    });
    tr.append(el("td", { class: "mono dim" }, n.file ? `${n.file.split("/").pop()}:${n.line ?? 0}` : (n.module ?? "").split("/").pop() ?? ""));
    arrow.addEventListener("click", () => {
      if (!hasKids) return;
      if (isOpen) this.open.delete(p);
      else this.open.add(p);
      this.render();
    });
    name.addEventListener("click", () => this.ev.pick(n.name));
    return tr;
  }
}
