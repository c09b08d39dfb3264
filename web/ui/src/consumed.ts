// The heap over time by function, as heaptrack's "Consumed" chart: the
// functions that held the most at the window's peak, stacked, the rest on
// top, each bucket at its largest heap. Hovering shows each function's
// bytes then.

import { ConsumedAnswer } from "./api";
import { axes, fitCanvas, placeReadout } from "./canvas";
import { bytes, dur, el } from "./format";

const pad = { l: 64, r: 16, t: 10, b: 18 };
const palette = ["#3478c6", "#e0812b", "#3a9a4a", "#c0392b", "#8e5fc0", "#8c5a3c", "#d45fa8", "#7f7f7f", "#b5b52a", "#2bb5c5"];

export function seriesColor(i: number, other: boolean): string {
  return other ? "#c8c8c8" : palette[i % palette.length];
}

export class ConsumedView {
  private data: ConsumedAnswer | null = null;
  private ctx: CanvasRenderingContext2D;

  constructor(
    private canvas: HTMLCanvasElement,
    private legend: HTMLTableElement,
    private readout: HTMLElement,
  ) {
    this.ctx = canvas.getContext("2d")!;
    canvas.addEventListener("mousemove", (e) => this.hover(e));
    canvas.addEventListener("mouseleave", () => (this.readout.hidden = true));
    window.addEventListener("resize", () => this.draw());
  }

  set(c: ConsumedAnswer) {
    this.data = c;
    const t = this.legend;
    t.textContent = "";
    t.append(el("tr", {}, el("th", {}, ""), el("th", {}, "function"), el("th", {}, "at the peak")));
    (c.series ?? []).forEach((s, i) => {
      const sw = el("span", { class: "sw" });
      sw.style.background = seriesColor(i, s.other ?? false);
      t.append(el("tr", { "data-name": s.name, "data-peak": String(s.peak) }, el("td", {}, sw), el("td", { class: "fn" }, s.name), el("td", { class: "num" }, bytes(s.peak))));
    });
    this.draw();
  }

  private index(e: MouseEvent): number {
    const d = this.data!;
    const r = this.canvas.getBoundingClientRect();
    const n = (d.total ?? []).length;
    const x = e.clientX - r.left - pad.l;
    return Math.min(n - 1, Math.max(0, Math.floor((x / (r.width - pad.l - pad.r)) * n)));
  }

  private hover(e: MouseEvent) {
    const d = this.data;
    if (!d || (d.total ?? []).length === 0) return;
    const b = this.index(e);
    const o = this.readout;
    o.hidden = false;
    o.textContent = "";
    const t0 = (d.t_ns ?? [])[b] ?? 0;
    o.append(el("div", {}, `${dur(t0)} – ${dur(t0 + d.width_ns)}: ${bytes((d.total ?? [])[b] ?? 0)}`));
    const rows = (d.series ?? []).map((s, i) => ({ s, i, v: (s.values ?? [])[b] ?? 0 })).filter((r) => r.v > 0);
    rows.sort((a, c) => c.v - a.v);
    for (const r of rows.slice(0, 12)) {
      const sw = el("span", { class: "sw" });
      sw.style.background = seriesColor(r.i, r.s.other ?? false);
      o.append(el("div", {}, sw, ` ${r.s.name}: ${bytes(r.v)}`));
    }
    placeReadout(o, this.canvas, e);
  }

  draw() {
    const r = fitCanvas(this.canvas, this.ctx);
    const g = this.ctx;
    const d = this.data;
    const total = d?.total ?? [];
    if (!d || total.length === 0) {
      g.fillStyle = "#666";
      g.fillText("nothing live in this window", pad.l, 20);
      return;
    }
    const n = total.length;
    const w = r.width - pad.l - pad.r;
    const h = r.height - pad.t - pad.b;
    const maxV = Math.max(1, ...total);
    const x = (i: number) => pad.l + (i / n) * w;
    const y = (v: number) => pad.t + h - (v / maxV) * h;
    axes(g, r, pad, maxV, y, d.from_ns, d.to_ns, (i) => pad.l + (w * i) / 6);
    // Stack the series from the largest up, the rest on top.
    const below = new Array<number>(n).fill(0);
    (d.series ?? []).forEach((s, si) => {
      const vs = s.values ?? [];
      g.fillStyle = seriesColor(si, s.other ?? false);
      g.beginPath();
      g.moveTo(x(0), y(below[0]));
      for (let i = 0; i < n; i++) {
        const top = below[i] + (vs[i] ?? 0);
        g.lineTo(x(i), y(top));
        g.lineTo(x(i + 1), y(top));
      }
      for (let i = n - 1; i >= 0; i--) {
        g.lineTo(x(i + 1), y(below[i]));
        g.lineTo(x(i), y(below[i]));
      }
      g.closePath();
      g.fill();
      for (let i = 0; i < n; i++) below[i] += vs[i] ?? 0;
    });
  }
}
