// A chart's canvas at the screen's pixel density, and its readout beside
// the pointer.

// sizeCanvas sizes c to width × height CSS pixels at the device's pixel
// ratio and clears it: g then draws in CSS pixels.
export function sizeCanvas(c: HTMLCanvasElement, g: CanvasRenderingContext2D, width: number, height: number): void {
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.round(width * dpr);
  c.height = Math.round(height * dpr);
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, height);
}

// placeReadout puts the readout o beside the pointer of e over c, on the
// side with room for it.
export function placeReadout(o: HTMLElement, c: HTMLCanvasElement, e: MouseEvent): void {
  const r = c.getBoundingClientRect();
  const x = e.clientX - r.left;
  o.style.left = `${x > r.width / 2 ? x - o.offsetWidth - 12 : x + 12}px`;
}
