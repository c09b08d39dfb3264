// A chart's canvas at the screen's pixel density, and its readout beside
// the pointer.

import { bytes, dur } from "./format";

// sizeCanvas sizes c to width × height CSS pixels at the device's pixel
// ratio and clears it: g then draws in CSS pixels.
export function sizeCanvas(c: HTMLCanvasElement, g: CanvasRenderingContext2D, width: number, height: number): void {
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.round(width * dpr);
  c.height = Math.round(height * dpr);
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, height);
}

// fitCanvas is sizeCanvas to c's own box, which it returns.
export function fitCanvas(c: HTMLCanvasElement, g: CanvasRenderingContext2D): DOMRect {
  const r = c.getBoundingClientRect();
  sizeCanvas(c, g, r.width, r.height);
  return r;
}

// placeReadout puts the readout o beside the pointer of e over c, on the
// side with room for it.
export function placeReadout(o: HTMLElement, c: HTMLCanvasElement, e: MouseEvent): void {
  const r = c.getBoundingClientRect();
  const x = e.clientX - r.left;
  o.style.left = `${x > r.width / 2 ? x - o.offsetWidth - 12 : x + 12}px`;
}

// Pad is a chart's margins around its plot, in CSS pixels.
export interface Pad {
  l: number;
  r: number;
  t: number;
  b: number;
}

// axes draws a chart's grid and axes on g over the canvas box r: five
// lines from 0 to maxV bytes, at y(v), labelled on the left (and with
// right(i) on the right when given), and seven times from from to to
// under the plot, the i-th at x(i, t).
export function axes(
  g: CanvasRenderingContext2D,
  r: DOMRect,
  pad: Pad,
  maxV: number,
  y: (v: number) => number,
  from: number,
  to: number,
  x: (i: number, t: number) => number,
  right?: (i: number) => string,
): void {
  g.strokeStyle = "#e3e3e3";
  g.fillStyle = "#555";
  g.font = "11px sans-serif";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (maxV * i) / 4;
    const yy = Math.round(y(v)) + 0.5;
    g.beginPath();
    g.moveTo(pad.l, yy);
    g.lineTo(r.width - pad.r, yy);
    g.stroke();
    g.textAlign = "right";
    g.fillText(bytes(Math.round(v)), pad.l - 4, yy + 4);
    if (right) {
      g.textAlign = "left";
      g.fillText(right(i), r.width - pad.r + 4, yy + 4);
    }
  }
  g.textAlign = "center";
  for (let i = 0; i <= 6; i++) {
    const t = from + ((to - from) * i) / 6;
    g.fillText(dur(Math.round(t)), x(i, t), r.height - 4);
  }
}
