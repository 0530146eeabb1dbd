// The multi-head flow for one layer: input -> per-head Q, K, V and weights -> contexts -> concatenate -> W_O -> output,
// with the shape of every tensor. Many heads are elided in the middle so 12 or 64 heads still fit. A batch adds its
// leading B to every shape (B x H x S x S weights); cross-attention takes K and V from the source's S_k positions.

import { halfRows } from "./arrays.js";
import { cachedBlockMax } from "./blockmax.js";
import { act } from "./actions.js";
import { selectView, shownDeps } from "./selectors.js";
import { renderNumbers } from "./matrices.js";
import { paintBlocks } from "./overview.js";
import { within } from "./dom.js";

export const SHOWN_HEADS = 6; // beyond this many heads the middle ones collapse into "…"
// A head's icon: its weights in a box this many CSS px on its longer side at any length. Past ICON_PX positions each
// pixel is the largest eligible weight of its block of cells (blockmax.js, as the overview's thumbnails are), so a
// previous-token diagonal stays sharp and the panel is as tall at 8 tokens as at 512.
export const ICON_PX = 36;

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

// The icon's CSS size for a rows x cols block grid: the longer side ICON_PX, the other in proportion (cross-attention).
export function iconSize(rows, cols, side = ICON_PX) {
  const long = Math.max(rows, cols, 1);
  return {
    width: Math.max(1, Math.round((side * cols) / long)),
    height: Math.max(1, Math.round((side * rows) / long)),
  };
}

const blocksOf = (weights, eligible) => cachedBlockMax(weights, eligible, ICON_PX);

// One head's icon: its (at most ICON_PX x ICON_PX) blocks painted one pixel each, then scaled up without smoothing
// onto a canvas of the icon's size in device pixels, so every block is a crisp square whatever the length.
function drawIcon(canvas, weights, eligible, stops) {
  const blocks = blocksOf(weights, eligible && eligible.length === weights.length ? eligible : null);
  const src = document.createElement("canvas");
  src.width = blocks.cols;
  src.height = blocks.rows;
  const sctx = src.getContext("2d");
  const img = sctx.createImageData(blocks.cols, blocks.rows);
  paintBlocks(blocks, stops, img.data);
  sctx.putImageData(img, 0, 0);
  const size = iconSize(blocks.rows, blocks.cols);
  const r = window.devicePixelRatio || 1;
  canvas.width = Math.round(size.width * r);
  canvas.height = Math.round(size.height * r);
  canvas.style.width = `${size.width}px`;
  canvas.style.height = `${size.height}px`;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(src, 0, 0, canvas.width, canvas.height);
  canvas.dataset.rows = String(blocks.rows);
  canvas.dataset.cols = String(blocks.cols);
}

// Shapes with the batch's leading B when there is one: [S, D] -> "B × S × D".
export function batched(dims, batch) {
  return shape(batch ? [batch, ...dims] : dims);
}

export function renderFlow(root, caption, view, layer, onOpen) {
  root.replaceChildren();
  const c = view.config;
  const S = view.tokens.length;
  const Sk = (view.keyTokens || view.tokens).length;
  const H = layer.heads.length;
  const B = c.batch || null;
  const dims = (d) => batched(d, B);
  const scaleNote = c.scale ? `÷ √d_k (× ${c.scale_factor.toFixed(3)})` : "unscaled";
  caption.textContent =
    `Each head: A = softmax(Q·Kᵀ ${scaleNote} + mask), context = A·V. Click a head to open it large.` +
    (B
      ? ` A batch of ${B}: every tensor has a leading B; weights are ${shape([B, H, S, S])} over the layer's heads; the heads below show item ${view.item ?? 0}.`
      : "") +
    (view.keyTokens ? ` Cross-attention: Q from the text (${S} positions), K and V from the source (${Sk}).` : "");
  const input = box("flow-input", view.multiLayer ? `Layer ${layer.index} input` : "Input X", dims([S, c.d_model]));
  if (view.keyTokens) {
    const col = document.createElement("div");
    col.className = "flow-inputs";
    col.append(input, box("flow-input", "Source (keys, values)", dims([Sk, c.d_model])));
    root.append(col);
  } else {
    root.append(input);
  }
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
    parts.textContent = view.keyTokens
      ? `Q ${dims([S, c.d_head])} · K ${dims([Sk, c.d_head])} · V ${dims([Sk, c.d_v])} → A ${dims([S, Sk])} → A·V ${dims([S, c.d_v])}`
      : `Q, K ${dims([S, c.d_head])} · V ${dims([S, c.d_v])} → A ${dims([S, S])} → A·V ${dims([S, c.d_v])}`;
    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-hidden", "true");
    canvas.className = "flow-icon";
    // a float16 answer's bit patterns: nothing widened
    drawIcon(canvas, halfRows(head, "weights") ?? head.weights, view.eligible, view.weightScale.stops);
    b.append(canvas, label, parts);
    b.addEventListener("click", () => onOpen(layer.index, h));
    col.append(b);
  }
  root.append(col, arrow());
  root.append(box("flow-concat", "Concatenate", dims([S, H * c.d_v]), `${H} head${H === 1 ? "" : "s"} × d_v ${c.d_v}`));
  root.append(arrow());
  if (c.has_w_o) {
    root.append(box("flow-wo", "× W_O", shape([H * c.d_v, c.d_out])));
    root.append(arrow());
  } else {
    root.append(box("flow-wo flow-none", "no W_O", "identity", "output = concatenation"));
    root.append(arrow());
  }
  root.append(box("flow-output", "Output", dims([S, c.d_out])));
}

// ---- the view (data-view="flow"): the flow of the large head's layer, and the numbers behind the large head ----

export function deps(s) {
  return [...shownDeps(s), s.ui.focus, s.ui.layer, s.ui.palette];
}

export function render(root, s, dispatch) {
  const view = selectView(s);
  if (!view) return;
  const part = within(root);
  part("flow-title").textContent = view.multiLayer ? `Multi-head flow · layer ${view.layer.index}` : "Multi-head flow";
  renderFlow(part("flow"), part("flow-caption"), view, view.layer, (layer, head) =>
    dispatch(act.headOpened(layer, head, null, "flow")),
  );
  renderNumbersPanel(part, view);
}

function renderNumbersPanel(part, view) {
  const d = part("numbers");
  const h = view.focusHead;
  if (!h.q && !h.contexts) {
    d.hidden = true;
    return;
  }
  d.hidden = false;
  renderNumbers(part("numbers-body"), view.tokens, [
    [`Q (head ${h.index})`, h.q],
    [`K (kv group ${h.kv_group})`, h.k],
    [`V (kv group ${h.kv_group})`, h.v],
    [`context = weights · V (head ${h.index})`, h.contexts],
    ["output", view.layer.output],
  ]);
}
