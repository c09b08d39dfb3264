// The timeline: live heap bytes (filled: each bucket's largest, so no peak
// is lost) and blocks (line) over time, the processes' resident memory
// (RSS, as the session sampled it) on the same axis, the allocation and
// free rates below, the peak marked, and a selected window. Hovering shows
// the figures under the pointer; drag to select a window, click to pick an
// instant, wheel to zoom (not in a static report).

import { MemoryAnswer, ResidentPoint, Timeline, TimelinePoint } from "./api";
import { bytes, count, dur, rate } from "./format";

export interface TimelineEvents {
  select(from: number, to: number): void; // a window, ns from the trace's start
  instant(at: number): void;
  view(from: number, to: number): void; // zoom
}

const rateH = 36; // px of the rates strip
const pad = { l: 64, r: 56, t: 10, b: 18 };
const rssColor = "#2e8b57";

export class TimelineView {
  private data: Timeline | null = null;
  private mem: ResidentPoint[] = [];
  private sel: [number, number] | null = null;
  private at = 0;
  private drag: { x0: number; x1: number } | null = null;
  private ctx: CanvasRenderingContext2D;

  constructor(
    private canvas: HTMLCanvasElement,
    private readout: HTMLElement,
    private ev: TimelineEvents,
    interactive: boolean,
  ) {
    this.ctx = canvas.getContext("2d")!;
    canvas.addEventListener("mousemove", (e) => this.hover(e));
    canvas.addEventListener("mouseleave", () => (this.readout.hidden = true));
    window.addEventListener("resize", () => this.draw());
    if (!interactive) {
      canvas.style.cursor = "default";
      return;
    }
    canvas.addEventListener("mousedown", (e) => {
      const x = this.x(e);
      this.drag = { x0: x, x1: x };
    });
    window.addEventListener("mousemove", (e) => {
      if (this.drag) {
        this.drag.x1 = this.x(e);
        this.draw();
      }
    });
    window.addEventListener("mouseup", () => {
      const d = this.drag;
      this.drag = null;
      if (!d || !this.data) return;
      if (Math.abs(d.x1 - d.x0) < 4) {
        this.ev.instant(Math.round(this.t(d.x0)));
        return;
      }
      const a = this.t(Math.min(d.x0, d.x1));
      const b = this.t(Math.max(d.x0, d.x1));
      this.ev.select(Math.round(a), Math.round(b));
    });
    canvas.addEventListener(
      "wheel",
      (e) => {
        if (!this.data) return;
        e.preventDefault();
        const t = this.t(this.x(e));
        const f = e.deltaY > 0 ? 1.5 : 1 / 1.5;
        const from = t - (t - this.data.from_ns) * f;
        const to = t + (this.data.to_ns - t) * f;
        this.ev.view(Math.round(from), Math.round(to));
      },
      { passive: false },
    );
  }

  set(data: Timeline, sel: [number, number] | null, at: number) {
    this.data = data;
    this.sel = sel;
    this.at = at;
    // What the drawing says, for the tests: the peak, and its largest point.
    this.canvas.setAttribute("data-peak", String(data.peak.bytes));
    this.canvas.setAttribute("data-top", String((data.points ?? []).reduce((a, p) => Math.max(a, p.max_bytes), 0)));
    this.canvas.setAttribute("data-estimated", data.estimated ?? "");
    this.draw();
  }

  // setMemory sets the resident memory drawn beside the heap.
  setMemory(m: MemoryAnswer | null) {
    this.mem = m?.points ?? [];
    document.getElementById("legend-rss")!.hidden = this.mem.length === 0;
    this.draw();
  }

  private points(): TimelinePoint[] {
    return this.data?.points ?? [];
  }

  private x(e: MouseEvent): number {
    const r = this.canvas.getBoundingClientRect();
    return Math.min(Math.max(e.clientX - r.left, pad.l), r.width - pad.r);
  }

  private width(): number {
    return this.canvas.getBoundingClientRect().width - pad.l - pad.r;
  }

  // t is the time at x px.
  private t(x: number): number {
    const d = this.data!;
    return d.from_ns + ((x - pad.l) / this.width()) * (d.to_ns - d.from_ns);
  }

  private px(t: number): number {
    const d = this.data!;
    return pad.l + ((t - d.from_ns) / Math.max(1, d.to_ns - d.from_ns)) * this.width();
  }

  // rssAt is the resident memory at t: the latest sample at or before it.
  rssAt(t: number): ResidentPoint | null {
    let found: ResidentPoint | null = null;
    for (const m of this.mem) {
      if (m.t_ns > t) break;
      found = m;
    }
    return found;
  }

  // hover shows the bucket under the pointer: its time, the heap (its
  // largest), blocks, the rates, and the resident memory then.
  private hover(e: MouseEvent) {
    const ps = this.points();
    if (!this.data || ps.length === 0 || this.drag) {
      this.readout.hidden = true;
      return;
    }
    const t = this.t(this.x(e));
    let p = ps[0];
    for (const q of ps) {
      if (q.t_ns <= t) p = q;
    }
    const rss = this.rssAt(p.t_ns + p.width);
    const o = this.readout;
    o.hidden = false;
    o.setAttribute("data-t", String(p.t_ns));
    o.setAttribute("data-bytes", String(p.max_bytes));
    o.setAttribute("data-blocks", String(p.max_blocks));
    o.textContent = "";
    const coarse = this.data.coarse ?? false;
    const lines = [
      `${dur(p.t_ns)} – ${dur(p.t_ns + p.width)}`,
      `live ${bytes(p.max_bytes)} in ${count(p.max_blocks)} blocks (largest)`,
      coarse ? "rates: when the index is built" : `allocs ${rate(p.allocs, p.width)} · frees ${rate(p.frees, p.width)}`,
    ];
    if (rss) lines.push(`resident ${bytes(rss.rss)} (anonymous ${bytes(rss.anon)})`);
    for (const l of lines) {
      const d = document.createElement("div");
      d.textContent = l;
      o.append(d);
    }
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    o.style.left = `${x > r.width / 2 ? x - o.offsetWidth - 12 : x + 12}px`;
  }

  draw() {
    const c = this.canvas;
    const r = c.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(r.width * dpr);
    c.height = Math.round(r.height * dpr);
    const g = this.ctx;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, r.width, r.height);
    const d = this.data;
    const ps = this.points();
    if (!d || ps.length === 0) {
      g.fillStyle = "#666";
      g.fillText("no events", pad.l, 20);
      return;
    }
    const h = r.height - pad.t - pad.b - rateH - 6;
    const base = pad.t + h;
    let maxB = 1;
    let maxBlocks = 1;
    let maxRate = 1;
    for (const p of ps) {
      maxB = Math.max(maxB, p.max_bytes);
      maxBlocks = Math.max(maxBlocks, p.max_blocks);
      maxRate = Math.max(maxRate, p.allocs, p.frees);
    }
    const mem = this.mem.filter((m) => m.t_ns < d.to_ns);
    for (const m of mem) maxB = Math.max(maxB, m.rss);
    const y = (v: number) => base - (v / maxB) * h;
    const yb = (v: number) => base - (v / maxBlocks) * h;

    // Grid and axes.
    g.strokeStyle = "#e3e3e3";
    g.fillStyle = "#555";
    g.font = "11px sans-serif";
    g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (maxB * i) / 4;
      const yy = Math.round(y(v)) + 0.5;
      g.beginPath();
      g.moveTo(pad.l, yy);
      g.lineTo(r.width - pad.r, yy);
      g.stroke();
      g.textAlign = "right";
      g.fillText(bytes(Math.round(v)), pad.l - 4, yy + 4);
      g.textAlign = "left";
      g.fillText(count(Math.round((maxBlocks * i) / 4)), r.width - pad.r + 4, yy + 4);
    }
    g.textAlign = "center";
    for (let i = 0; i <= 6; i++) {
      const t = d.from_ns + ((d.to_ns - d.from_ns) * i) / 6;
      g.fillText(dur(Math.round(t)), this.px(t), r.height - 4);
    }

    // Live bytes: each bucket's largest.
    g.fillStyle = "rgba(52, 120, 198, 0.55)";
    g.strokeStyle = "#2a64a8";
    g.beginPath();
    g.moveTo(this.px(ps[0].t_ns), base);
    for (const p of ps) {
      g.lineTo(this.px(p.t_ns), y(p.max_bytes));
      g.lineTo(this.px(p.t_ns + p.width), y(Math.max(p.end_bytes, 0)));
    }
    const last = ps[ps.length - 1];
    g.lineTo(this.px(last.t_ns + last.width), base);
    g.closePath();
    g.fill();

    // Resident memory: a step from each sample to the next.
    if (mem.length > 0) {
      g.strokeStyle = rssColor;
      g.lineWidth = 1.5;
      g.beginPath();
      let prevY = -1;
      mem.forEach((m, i) => {
        const xx = Math.max(pad.l, this.px(m.t_ns));
        const yy = y(m.rss);
        if (i === 0) g.moveTo(xx, yy);
        else {
          g.lineTo(xx, prevY);
          g.lineTo(xx, yy);
        }
        prevY = yy;
      });
      g.lineTo(this.px(Math.min(d.to_ns, last.t_ns + last.width)), prevY);
      g.stroke();
      g.lineWidth = 1;
    }

    // Live blocks.
    g.strokeStyle = "#d07a12";
    g.setLineDash([4, 3]);
    g.beginPath();
    ps.forEach((p, i) => {
      const xx = this.px(p.t_ns + p.width / 2);
      if (i === 0) g.moveTo(xx, yb(p.max_blocks));
      else g.lineTo(xx, yb(p.max_blocks));
    });
    g.stroke();
    g.setLineDash([]);

    // Rates: allocations up, frees down.
    const mid = base + 6 + rateH / 2;
    for (const p of ps) {
      const x0 = this.px(p.t_ns);
      const w = Math.max(1, this.px(p.t_ns + p.width) - x0 - 0.5);
      g.fillStyle = "#3a9a4a";
      g.fillRect(x0, mid - (p.allocs / maxRate) * (rateH / 2), w, (p.allocs / maxRate) * (rateH / 2));
      g.fillStyle = "#b84a3a";
      g.fillRect(x0, mid, w, (p.frees / maxRate) * (rateH / 2));
    }
    g.fillStyle = "#555";
    g.textAlign = "right";
    g.fillText("allocs", pad.l - 4, mid - 4);
    g.fillText("frees", pad.l - 4, mid + 12);

    // The peak.
    if (d.peak.bytes > 0) {
      const xp = Math.round(this.px(d.peak.t_ns)) + 0.5;
      g.strokeStyle = "#c0262d";
      g.beginPath();
      g.moveTo(xp, pad.t);
      g.lineTo(xp, base);
      g.stroke();
      g.fillStyle = "#c0262d";
      g.textAlign = xp > r.width / 2 ? "right" : "left";
      g.fillText(`peak ${bytes(d.peak.bytes)} at ${dur(d.peak.t_ns)}`, xp + (xp > r.width / 2 ? -4 : 4), pad.t + 10);
    }

    // The instant.
    if (this.at > 0) {
      const xa = Math.round(this.px(this.at)) + 0.5;
      g.strokeStyle = "#7a3cc0";
      g.setLineDash([2, 2]);
      g.beginPath();
      g.moveTo(xa, pad.t);
      g.lineTo(xa, base);
      g.stroke();
      g.setLineDash([]);
    }

    // The window, or the one being dragged.
    let s: [number, number] | null = this.sel;
    if (this.drag) {
      s = [this.t(Math.min(this.drag.x0, this.drag.x1)), this.t(Math.max(this.drag.x0, this.drag.x1))];
    }
    if (s) {
      const a = Math.max(pad.l, this.px(s[0]));
      const b = Math.min(r.width - pad.r, this.px(s[1]));
      g.fillStyle = "rgba(0,0,0,0.12)";
      g.fillRect(pad.l, pad.t, Math.max(0, a - pad.l), base - pad.t);
      g.fillRect(b, pad.t, Math.max(0, r.width - pad.r - b), base - pad.t);
      g.strokeStyle = "#222";
      g.strokeRect(a + 0.5, pad.t + 0.5, Math.max(0, b - a), base - pad.t);
    }
  }
}
