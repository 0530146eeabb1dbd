// Colour scales for attnlab's heatmaps: colour-blind-safe sequential scales for weights,
// a diverging scale for scores, and the one look every view uses for a masked cell.

// 11 evenly spaced stops of matplotlib's viridis and cividis (perceptually uniform, colour-blind safe).
export const VIRIDIS = [
  "#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
  "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725",
];
export const CIVIDIS = [
  "#00224e", "#0f326c", "#35456c", "#4f576c", "#666970", "#7d7c78",
  "#948f78", "#aea371", "#c8b866", "#e5cf52", "#fee838",
];
// ColorBrewer RdBu, negative (blue) to positive (red); distinguishable under the common colour-vision deficiencies.
export const RDBU = [
  "#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
  "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f",
];
export const PALETTES = { viridis: VIRIDIS, cividis: CIVIDIS };

// A masked cell: a light grey ground with dark grey diagonal hatching; neither colour is on any scale above.
export const MASK_FILL = "#e4e4e4";
export const MASK_HATCH = "#8c8c8c";
export const BLOCKED_MARK = "#202020";

export function hexToRgb(hex) {
  const h = hex.replace("#", "");
  return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
}

export function rgbString([r, g, b]) {
  return `rgb(${Math.round(r)},${Math.round(g)},${Math.round(b)})`;
}

// The colour at t in [0, 1] along evenly spaced stops, linearly interpolated; t outside is clamped.
export function colorAt(stops, t) {
  const x = Number.isFinite(t) ? Math.min(1, Math.max(0, t)) : 0;
  const pos = x * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(pos));
  const f = pos - i;
  const a = hexToRgb(stops[i]);
  const b = hexToRgb(stops[i + 1]);
  return [0, 1, 2].map((c) => a[c] + (b[c] - a[c]) * f);
}

// Plotly's colorscale form: [[0, "#..."], ..., [1, "#..."]].
export function plotlyScale(stops) {
  return stops.map((c, i) => [i / (stops.length - 1), c]);
}

// The scale a view uses: weights run 0..1 on a sequential palette; scores are centred on 0 on RdBu,
// symmetric over the largest |eligible score| so that equal magnitudes look equally strong.
export function scaleFor(view, palette, maxAbsScore) {
  if (view === "scores") {
    const m = maxAbsScore > 0 ? maxAbsScore : 1;
    return { stops: RDBU, min: -m, max: m, label: "score (scaled QKᵀ)" };
  }
  return { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: "attention weight" };
}

export function normalise(value, scale) {
  return (value - scale.min) / (scale.max - scale.min);
}

// The largest |score| over eligible cells of the given heads (0 when nothing is eligible).
export function maxAbsEligible(heads, eligible) {
  let m = 0;
  for (const head of heads) {
    const s = head.scores;
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
