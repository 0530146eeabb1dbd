// Colour scales for attnlab's heatmaps: colour-blind-safe sequential scales for weights,
// a diverging scale for scores, and the one look every view uses for a masked cell.

// 11 evenly spaced stops of matplotlib's viridis and cividis (perceptually uniform, colour-blind safe).
export const VIRIDIS = [
  "#440154",
  "#482475",
  "#414487",
  "#355f8d",
  "#2a788e",
  "#21918c",
  "#22a884",
  "#44bf70",
  "#7ad151",
  "#bddf26",
  "#fde725",
];
export const CIVIDIS = [
  "#00224e",
  "#0f326c",
  "#35456c",
  "#4f576c",
  "#666970",
  "#7d7c78",
  "#948f78",
  "#aea371",
  "#c8b866",
  "#e5cf52",
  "#fee838",
];
// ColorBrewer RdBu, negative (blue) to positive (red); distinguishable under the common colour-vision deficiencies.
export const RDBU = [
  "#053061",
  "#2166ac",
  "#4393c3",
  "#92c5de",
  "#d1e5f0",
  "#f7f7f7",
  "#fddbc7",
  "#f4a582",
  "#d6604d",
  "#b2182b",
  "#67001f",
];
export const PALETTES = { viridis: VIRIDIS, cividis: CIVIDIS };

// A masked cell: a dark neutral ground with light diagonal hatching. No value colour is a dark unsaturated grey
// (viridis and cividis start at navy and purple, RdBu's dark ends are navy and maroon, its light centre is near
// white), so a masked cell cannot be read as a value, hatched or, in a small thumbnail, flat.
export const MASK_FILL = "#3a3a3a";
export const MASK_HATCH = "#bdbdbd";
export const BLOCKED_MARK = "#ffffff";
export const CLIP_PERCENTILE = 0.98; // the clipped scores scale ends at this quantile of |eligible score|

export function hexToRgb(hex) {
  const h = hex.replace("#", "");
  return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
}

export function rgbString([r, g, b]) {
  return `rgb(${Math.round(r)},${Math.round(g)},${Math.round(b)})`;
}

// Each palette's stops as [r, g, b], parsed once: colorAt runs for every cell of every head (3.1 million times
// for MiniLM's 12 heads at 512 tokens), and parsing the hex there took 2.6 s of a 7.9 s first draw.
const parsedStops = new WeakMap();

export function rgbStops(stops) {
  let rgb = parsedStops.get(stops);
  if (rgb === undefined) {
    rgb = stops.map(hexToRgb);
    parsedStops.set(stops, rgb);
  }
  return rgb;
}

// The colour at t in [0, 1] along evenly spaced stops, linearly interpolated; t outside is clamped.
export function colorAt(stops, t) {
  const x = Number.isFinite(t) ? Math.min(1, Math.max(0, t)) : 0;
  const pos = x * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(pos));
  const f = pos - i;
  const rgb = rgbStops(stops);
  const a = rgb[i];
  const b = rgb[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

// Plotly's colorscale form: [[0, "#..."], ..., [1, "#..."]].
export function plotlyScale(stops) {
  return stops.map((c, i) => [i / (stops.length - 1), c]);
}

// The scale a view uses: weights run 0..1 on a sequential palette; scores are centred on 0 on RdBu,
// symmetric over the largest |eligible score| so that equal magnitudes look equally strong.
// The matrix a view draws from a head: its weights, its scores, or what each key moves into the query (value_norms,
// |a_ij v_j W_O^h|, asked for with include value_norms).
export function matrixKey(view) {
  return view === "scores" ? "scores" : view === "moved" ? "value_norms" : "weights";
}

export function scaleFor(view, palette, maxAbsScore) {
  if (view === "moved") {
    const m = maxAbsScore > 0 ? maxAbsScore : 1;
    return { stops: PALETTES[palette] || VIRIDIS, min: 0, max: m, label: "moved: weight × |v·W_O|" };
  }
  if (view === "scores") {
    const m = maxAbsScore > 0 ? maxAbsScore : 1;
    return { stops: RDBU, min: -m, max: m, label: "score (scaled QKᵀ)" };
  }
  return { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: "attention weight" };
}

export function normalise(value, scale) {
  return (value - scale.min) / (scale.max - scale.min);
}

// The scale one head's matrix is drawn on. Weights: 0..1. Scores: `mode` "head" (its own symmetric range),
// "clip" (one range over every head, clipped at CLIP_PERCENTILE of |score|: `clipAbs`) or "shared" (`maxAbs`).
export function headScale(view, head) {
  if (view.view !== "scores") return view.scale;
  if (view.scoreScale === "head") {
    return {
      ...scaleFor("scores", view.palette, maxAbsEligible([head], view.eligible)),
      label: "score (this head's range)",
    };
  }
  if (view.scoreScale === "clip") {
    return {
      ...scaleFor("scores", view.palette, view.clipAbs),
      label: `score (clipped at ±${view.clipAbs.toFixed(2)})`,
      clipped: true,
    };
  }
  return view.scale;
}

// The q-quantile of |score| over the eligible cells of the given heads (0 when nothing is eligible).
export function quantileAbsEligible(heads, eligible, q = CLIP_PERCENTILE) {
  const values = [];
  for (const head of heads) {
    const s = head.scores;
    if (!s) continue;
    for (let i = 0; i < s.length; i++)
      for (let k = 0; k < s[i].length; k++) if (eligible[i][k]) values.push(Math.abs(s[i][k]));
  }
  if (!values.length) return 0;
  values.sort((a, b) => a - b);
  return values[Math.min(values.length - 1, Math.floor(q * (values.length - 1)))];
}

// Numbers along a legend: min, the middle and max (five ticks for a diverging scale).
export function legendTicks(scale) {
  const n = scale.min < 0 ? 5 : 3;
  return Array.from({ length: n }, (_, i) => scale.min + ((scale.max - scale.min) * i) / (n - 1));
}

// The largest |score| over eligible cells of the given heads (0 when nothing is eligible).
export function maxAbsEligible(heads, eligible, key = "scores") {
  let m = 0;
  for (const head of heads) {
    const s = head[key];
    if (!s) continue;
    for (let q = 0; q < s.length; q++) {
      for (let k = 0; k < s[q].length; k++) {
        if (eligible[q][k] && Math.abs(s[q][k]) > m) m = Math.abs(s[q][k]);
      }
    }
  }
  return m;
}

// Black or white, whichever reads better on this background.
export function inkOn([r, g, b]) {
  const lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  return lum > 0.55 ? "#111" : "#fff";
}

// The page's theme for what JS paints itself (canvases, Plotly): the CSS custom properties of attnlab.css, read once
// per theme (the light values where there is no document: the exported viewer's tests, node). Every chart takes its
// ground, ink, rules and empty slots from here, so the dark theme reaches them too.
export const LIGHT_THEME = {
  panel: "#fff",
  ink: "#1d2330",
  muted: "#5d6575",
  line: "#dde1e8",
  field: "#fff",
  fieldLine: "#b9c0cc",
  soft: "#f3f5f9",
};
const THEME_VARS = {
  panel: "--panel",
  ink: "--ink",
  muted: "--muted",
  line: "--line",
  field: "--field",
  fieldLine: "--field-line",
  soft: "--soft",
};
let themeRead = null; // {dark, theme}

export function isDark() {
  return typeof matchMedia === "function" && matchMedia("(prefers-color-scheme: dark)").matches;
}

export function chartTheme() {
  const dark = isDark();
  if (themeRead && themeRead.dark === dark) return themeRead.theme;
  if (typeof document === "undefined" || typeof getComputedStyle !== "function") return LIGHT_THEME;
  const css = getComputedStyle(document.documentElement);
  const theme = Object.fromEntries(
    Object.entries(THEME_VARS).map(([k, name]) => [k, css.getPropertyValue(name).trim() || LIGHT_THEME[k]]),
  );
  themeRead = { dark, theme };
  return theme;
}

// What every Plotly layout of the page shares: the panel's ground and ink, rules in the theme's line colour, a
// hover label and a mode bar (its icons) that read on that ground. Spread it into a layout before its own keys.
export function plotlyTheme(t = chartTheme()) {
  const axis = { gridcolor: t.line, linecolor: t.fieldLine, zerolinecolor: t.fieldLine, tickcolor: t.fieldLine };
  return {
    paper_bgcolor: t.panel,
    plot_bgcolor: t.panel,
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: t.ink },
    hoverlabel: { bgcolor: t.field, bordercolor: t.fieldLine, font: { color: t.ink } },
    modebar: { orientation: "h", bgcolor: "rgba(0,0,0,0)", color: t.muted, activecolor: t.ink },
    template: { layout: { xaxis: axis, yaxis: axis, legend: { font: { color: t.ink } } } },
  };
}
