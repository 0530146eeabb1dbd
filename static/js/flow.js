// The multi-head flow for one layer: input -> per-head Q, K, V and weights -> contexts -> concatenate -> W_O -> output,
// with the shape of every tensor. Many heads are elided in the middle so 12 or 64 heads still fit.

import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";

export const SHOWN_HEADS = 6; // beyond this many heads the middle ones collapse into "…"

export function shape(dims) {
  return dims.join(" × ");
}

// Which head indices to draw: all when few, else the first and last few around an ellipsis (null).
export function visibleHeads(n, max = SHOWN_HEADS) {
  if (n <= max) return Array.from({ length: n }, (_, i) => i);
  const head = Math.ceil((max - 1) / 2);
  const tail = max - 1 - head;
  return [...Array.from({ length: head }, (_, i) => i), null, ...Array.from({ length: tail }, (_, i) => n - tail + i)];
}

function box(cls, title, dims, note) {
  const d = document.createElement("div");
  d.className = `flow-box ${cls}`;
  const t = document.createElement("div");
  t.className = "flow-title";
  t.textContent = title;
  const s = document.createElement("div");
  s.className = "flow-shape";
  s.textContent = dims;
  d.append(t, s);
  if (note) {
    const n = document.createElement("div");
    n.className = "flow-note";
    n.textContent = note;
    d.append(n);
  }
  return d;
}

function arrow() {
  const a = document.createElement("div");
  a.className = "flow-arrow";
  a.setAttribute("aria-hidden", "true");
  a.textContent = "→";
  return a;
}

export function renderFlow(root, caption, view, layer, onOpen) {
  root.replaceChildren();
  const c = view.config;
  const S = view.tokens.length;
  const H = layer.heads.length;
  const scaleNote = c.scale ? `÷ √d_k (× ${c.scale_factor.toFixed(3)})` : "unscaled";
  caption.textContent = `Each head: A = softmax(Q·Kᵀ ${scaleNote} + mask), context = A·V. Click a head to open it large.`;
  root.append(box("flow-input", view.multiLayer ? `Layer ${layer.index} input` : "Input X", shape([S, c.d_model])));
  root.append(arrow());
  const col = document.createElement("div");
  col.className = "flow-heads";
  for (const h of visibleHeads(H)) {
    if (h === null) {
      const e = document.createElement("div");
      e.className = "flow-ellipsis";
      e.textContent = `… ${H - SHOWN_HEADS + 1} more heads …`;
      col.append(e);
      continue;
    }
    const head = layer.heads[h];
    const b = document.createElement("button");
    b.type = "button";
    b.className = "flow-head";
    b.setAttribute("aria-label", `Open head ${h} large`);
    const label = document.createElement("div");
    label.className = "flow-title";
    label.textContent = `head ${h}${c.n_kv_heads < c.n_heads ? ` (kv ${head.kv_group})` : ""}`;
    const parts = document.createElement("div");
    parts.className = "flow-shape";
    parts.textContent = `Q, K ${shape([S, c.d_head])} · V ${shape([S, c.d_v])} → A ${shape([S, S])} → A·V ${shape([S, c.d_v])}`;
    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-hidden", "true");
    const L = layoutFor(S, { cell: Math.max(1, Math.min(6, Math.floor(36 / S))), labels: false });
    drawHeatmap(sizeCanvas(canvas, L), {
      matrix: head.weights, eligible: view.eligible, tokens: view.tokens, scale: view.weightScale, layout: L,
    });
    b.append(canvas, label, parts);
    b.addEventListener("click", () => onOpen(layer.index, h));
    col.append(b);
  }
  root.append(col, arrow());
  root.append(box("flow-concat", "Concatenate", shape([S, H * c.d_v]), `${H} head${H === 1 ? "" : "s"} × d_v ${c.d_v}`));
  root.append(arrow());
  if (c.has_w_o) {
    root.append(box("flow-wo", "× W_O", shape([H * c.d_v, c.d_out])));
    root.append(arrow());
  } else {
    root.append(box("flow-wo flow-none", "no W_O", "identity", "output = concatenation"));
    root.append(arrow());
  }
  root.append(box("flow-output", "Output", shape([S, c.d_out])));
}
