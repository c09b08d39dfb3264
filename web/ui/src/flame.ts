// The flame graph, drawn on a canvas so that thousands of nodes stay
// smooth: icicle (root on top) or flame (root at the bottom), click a node
// to zoom into it, a search that highlights the matches drawn (their share
// is the server's: /api/search).

import { FlameAnswer, FlameNode } from "./api";
import { sizeCanvas } from "./canvas";
import { pct } from "./format";

const rowH = 18;

export interface FlameEvents {
  focus(path: string[]): void; // zoom to the node at this path of names ([]: the root)
}

interface Box {
  i: number; // node index
  x0: number;
  x1: number;
  depth: number; // row
}

export class FlameView {
  private data: FlameAnswer | null = null;
  private nodes: FlameNode[] = [];
  private boxes: Box[] = [];
  private focus = 0;
  private search = "";
  private flameUp = false;
  private ctx: CanvasRenderingContext2D;
  private kids: number[][] = [];
  private unit = "bytes";

  constructor(
    private canvas: HTMLCanvasElement,
    private tip: HTMLElement,
    private ev: FlameEvents,
  ) {
    this.ctx = canvas.getContext("2d")!;
    canvas.addEventListener("click", (e) => {
      const b = this.hit(e);
      if (b) this.ev.focus(this.path(b.i));
    });
    canvas.addEventListener("mousemove", (e) => {
      const b = this.hit(e);
      if (!b || !this.data) {
        this.tip.hidden = true;
        return;
      }
      const n = this.nodes[b.i];
      const loc = n.file ? `${n.file}:${n.line ?? 0}` : "";
      this.tip.hidden = false;
      this.tip.textContent = "";
      const lines = [
        n.name,
        loc,
        n.module ?? "",
        `${this.fmt(n.value)} (${pct(n.value, this.data.total)} of all, ${pct(n.value, this.nodes[this.focus].value)} of the zoomed node); self ${this.fmt(n.self)}`,
      ];
      for (const l of lines) {
        if (l) {
          const d = document.createElement("div");
          d.textContent = l;
          this.tip.append(d);
        }
      }
      this.tip.style.left = `${e.pageX + 12}px`;
      this.tip.style.top = `${e.pageY + 12}px`;
    });
    canvas.addEventListener("mouseleave", () => (this.tip.hidden = true));
    window.addEventListener("resize", () => this.draw());
  }

  // set draws f zoomed to the node at focusPath.
  set(f: FlameAnswer, focusPath: string[], search: string, flameUp: boolean, fmt: (v: number) => string, unit: string) {
    this.data = f;
    this.nodes = f.nodes ?? [];
    this.fmt = fmt;
    this.unit = unit;
    this.search = search.toLowerCase();
    this.flameUp = flameUp;
    this.kids = this.nodes.map(() => []);
    this.nodes.forEach((n, i) => {
      if (n.parent >= 0) this.kids[n.parent].push(i);
    });
    this.focus = this.find(focusPath);
    this.draw();
  }

  fmt: (v: number) => string = (v) => String(v);

  // find returns the node at path, or the deepest found on the way.
  private find(path: string[]): number {
    let cur = 0;
    for (const name of path) {
      const k = this.kids[cur].find((i) => this.nodes[i].name === name);
      if (k === undefined) break;
      cur = k;
    }
    return cur;
  }

  path(i: number): string[] {
    const out: string[] = [];
    const ns = this.nodes;
    while (i > 0) {
      out.push(ns[i].name);
      i = ns[i].parent;
    }
    return out.reverse();
  }

  // crumbs is the path to the zoomed node, for the breadcrumb.
  crumbs(): { name: string; path: string[] }[] {
    const p = this.data ? this.path(this.focus) : [];
    const out = [{ name: "all", path: [] as string[] }];
    p.forEach((name, i) => out.push({ name, path: p.slice(0, i + 1) }));
    return out;
  }

  private matches(n: FlameNode): boolean {
    return this.search !== "" && n.name.toLowerCase().includes(this.search);
  }

  private hit(e: MouseEvent): Box | null {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const y = e.clientY - r.top;
    for (const b of this.boxes) {
      const top = this.rowTop(b.depth, r.height);
      if (x >= b.x0 && x < b.x1 && y >= top && y < top + rowH) return b;
    }
    return null;
  }

  private rowTop(depth: number, height: number): number {
    return this.flameUp ? height - (depth + 1) * rowH : depth * rowH;
  }

  private layout(width: number): Box[] {
    const ns = this.nodes;
    const boxes: Box[] = [];
    // The focus's ancestors, full width.
    const anc: number[] = [];
    for (let i = ns[this.focus].parent; i >= 0; i = ns[i].parent) anc.unshift(i);
    anc.forEach((i, d) => boxes.push({ i, x0: 0, x1: width, depth: d }));
    const scale = width / Math.max(1, ns[this.focus].value);
    const walk = (i: number, x0: number, depth: number) => {
      const w = ns[i].value * scale;
      boxes.push({ i, x0, x1: x0 + w, depth });
      let x = x0;
      for (const k of this.kids[i]) {
        const kw = ns[k].value * scale;
        if (kw >= 0.5) walk(k, x, depth + 1);
        x += kw;
      }
    };
    walk(this.focus, 0, anc.length);
    return boxes;
  }

  draw() {
    const c = this.canvas;
    if (!this.data) return;
    const width = c.getBoundingClientRect().width;
    this.boxes = this.layout(width);
    let rows = 1;
    for (const b of this.boxes) rows = Math.max(rows, b.depth + 1);
    const height = rows * rowH;
    c.style.height = `${height}px`;
    sizeCanvas(c, this.ctx, width, height);
    const g = this.ctx;
    g.font = "12px sans-serif";
    g.textBaseline = "middle";
    const ns = this.nodes;
    const searching = this.search !== "";
    for (const b of this.boxes) {
      const n = ns[b.i];
      const w = b.x1 - b.x0;
      const y = this.rowTop(b.depth, height);
      g.fillStyle = searching ? (this.matches(n) ? "#d63ad6" : "#d9d9d9") : color(n.name, b.i === 0);
      g.fillRect(b.x0, y, Math.max(w - 1, 0.5), rowH - 1);
      if (w > 30) {
        g.fillStyle = "#111";
        const label = fit(g, n.name, w - 6);
        if (label) g.fillText(label, b.x0 + 3, y + rowH / 2);
      }
    }
  }
}

// color is a warm colour fixed by the name, so that a function keeps its
// colour across views.
function color(name: string, root: boolean): string {
  if (root) return "#c8c8c8";
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  const hue = 10 + (h % 45);
  const light = 55 + ((h >> 8) % 15);
  return `hsl(${hue}, 85%, ${light}%)`;
}

function fit(g: CanvasRenderingContext2D, s: string, w: number): string {
  if (g.measureText(s).width <= w) return s;
  let lo = 0;
  let hi = s.length;
  while (lo < hi) {
    const m = (lo + hi + 1) >> 1;
    if (g.measureText(s.slice(0, m) + "…").width <= w) lo = m;
    else hi = m - 1;
  }
  return lo > 2 ? s.slice(0, lo) + "…" : "";
}
