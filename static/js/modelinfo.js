// What the page says of a model in the picker, from its GET /api/models entry: its label (name, family, size) and,
// for a checkpoint, how closely it matched transformers at load. Pure.

// Worse than this, a checkpoint's match to transformers is no match: float32's rounding over a few layers stays well
// under it, a weight mapped wrong (a norm, a bias, a rotary half) lands far over it.
export const MATCHES_WITHIN = 1e-4;

// The line beside a checkpoint: how closely attnlab's forward pass matched transformers' at load (its entry's
// `reference`), "matches transformers 5.24.0 to 3e-7"; why it was not compared when it was not; "" for a model
// nobody compared (the built-in ones).
export function referenceLine(info) {
  const r = info?.reference;
  if (!r) return "";
  if (!r.library || !r.max_abs_diff) return r.reason ? `Not compared with transformers: ${r.reason}` : "";
  const diffs = [r.max_abs_diff.weights, r.max_abs_diff.output].filter((d) => d != null);
  if (!diffs.length) return "";
  const worst = Math.max(...diffs);
  const size = worst === 0 ? "0" : worst.toExponential(0).replace("e+", "e");
  return worst <= MATCHES_WITHIN ? `matches ${r.library} to ${size}` : `differs from ${r.library} by up to ${size}`;
}

// "random · 8 heads"; a model of another family than its name says which, and its width: "mine · llama, 2 layers
// × 4 heads, width 64".
export function modelLabel(m, ui) {
  const heads = m.name === ui.model && ui.options?.heads ? ui.options.heads : m.heads;
  const size = `${m.layers > 1 ? `${m.layers} layers × ` : ""}${heads} head${heads === 1 ? "" : "s"}`;
  const other = m.family && m.family !== m.name;
  return `${m.name} · ${other ? `${m.family}, ` : ""}${size}${other && m.d_model ? `, width ${m.d_model}` : ""}`;
}

// The line that says each layer's kind, from its entry's `layer_kinds`: "L0 local 512 · L1 global", each layer's
// rotary theta added where the layers differ in it ("L0 local 512 (theta 10000) · L5 global (theta 1e+6)"); "" for
// a model whose layers are all global with one theta (every layer attends under the request's masks alone). A layer
// without rotary among layers with it (SmolLM3's) says "(no rotary)".
export function layerKindsLine(info) {
  const kinds = info?.layer_kinds || [];
  const thetas = new Set(kinds.map((k) => k.rope_theta));
  if (!kinds.some((k) => k.kind === "local") && thetas.size < 2) return "";
  const number = (t) => t.toPrecision(6).replace(/\.?0+(e|$)/, "$1");
  const theta = (k) => {
    if (thetas.size < 2 || k.kind === "no_positions") return ""; // one theta, or a layer that says it has none
    return k.rope_theta != null ? ` (theta ${number(k.rope_theta)})` : " (no rotary)";
  };
  const name = (k) => (k.kind === "no_positions" ? "no positions" : k.kind);
  return kinds.map((k) => `L${k.index} ${name(k)}${k.kind === "local" ? ` ${k.window}` : ""}${theta(k)}`).join(" · ");
}
