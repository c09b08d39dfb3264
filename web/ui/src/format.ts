// Numbers for people, as the text report writes them: human units beside
// the exact count.

const units = ["B", "KiB", "MiB", "GiB", "TiB"];

export function bytes(n: number): string {
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  if (u === 0) {
    return `${n} B`;
  }
  return `${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${units[u]}`;
}

// exact writes n with thin groups of three digits: 1 234 567.
export function exact(n: number): string {
  const s = Math.abs(n).toString();
  let out = "";
  for (let i = 0; i < s.length; i++) {
    if (i > 0 && (s.length - i) % 3 === 0) {
      out += "\u202f";
    }
    out += s[i];
  }
  return (n < 0 ? "-" : "") + out;
}

export function bytesExact(n: number): string {
  return n < 1024 ? `${n} B` : `${bytes(n)} (${exact(n)} B)`;
}

export function count(n: number): string {
  return exact(n);
}

export function dur(ns: number): string {
  const a = Math.abs(ns);
  if (a < 1e3) return `${ns} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(a < 1e4 ? 2 : 1)} µs`;
  if (a < 1e9) return `${(ns / 1e6).toFixed(a < 1e7 ? 2 : 1)} ms`;
  return `${(ns / 1e9).toFixed(a < 1e10 ? 3 : 2)} s`;
}

export function pct(a: number, b: number): string {
  if (b === 0) return "–";
  return `${((100 * a) / b).toFixed(1)}%`;
}

// el makes an element with text or children.
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...kids: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    e.setAttribute(k, v);
  }
  for (const k of kids) {
    e.append(k);
  }
  return e;
}

// frameName is a frame in one word, as the server's symbolize.Frame.Name
// writes it: its function, else its module's base name and offset, else its
// address.
export function frameName(f: { function?: string; module?: string; offset?: string; address?: string }): string {
  if (f.function) return f.function;
  if (f.module) return `${f.module.split("/").pop()}+${f.offset ?? "0x0"}`;
  return f.address ?? "?";
}

// siteName is how a site is named: by the server (its name, the first frame
// that is not an allocator wrapper) when the answer names it, else by its
// innermost frame, as the server's tables did before they named sites.
export function siteName(s: { name?: string; stack: { function?: string; module?: string; offset?: string; address?: string }[] | null }): string {
  if (s.name) return s.name;
  const st = s.stack ?? [];
  return st.length ? frameName(st[0]) : "[no stack]";
}

export function frameText(f: { function?: string; file?: string; line?: number; module?: string; offset?: string; address?: string }): string {
  let s = frameName(f);
  if (f.file) {
    s += ` ${f.file.split("/").pop()}:${f.line ?? 0}`;
  }
  if (f.module) {
    s += ` [${f.module.split("/").pop()}]`;
  }
  return s;
}

// rate is a count per second over ns.
export function rate(n: number, ns: number): string {
  if (ns <= 0) return "–";
  const r = (n * 1e9) / ns;
  return `${r >= 100 ? Math.round(r).toLocaleString("en") : r.toFixed(r >= 10 ? 1 : 2)}/s`;
}
