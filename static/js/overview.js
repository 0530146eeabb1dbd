// The all-layers overview (data-view="overview"): every head of every layer as one small thumbnail of its attention
// weights, rows = layers, columns = heads (bertviz's model view, at 512 tokens). A long sequence is downsampled: each
// pixel of a thumbnail is the largest eligible weight in its block of cells (a block of masked cells only is drawn
// as masked), so a sharp pattern (previous token, a diagonal) stays visible instead of averaging away. Pressing a
// thumbnail (click, or Enter/Space; the arrow keys move between them) opens that head large; the open head is
// outlined. A run that holds one layer of several shows that layer's heads.
//
// `drawOverview` is pure of the page: it draws into the element it is given and imports nothing that reads the
// page's store, so a saved standalone page can import it too. Weights may be nested arrays or arrays of
// Float32Array rows: only `w[q][k]` and lengths are read.

import { act } from "./actions.js";
import { halfRows } from "./arrays.js";
import { cachedBlockMax } from "./blockmax.js";
import { MASK_FILL, PALETTES, VIRIDIS, colorAt, hexToRgb } from "./colors.js";
import { node } from "./dom.js";

export const THUMB_PX = 64; // a thumbnail's longest side: at most this many CSS px, and this many pixels of the matrix
export const LUT_SIZE = 256; // colours precomputed along the palette, so a pixel costs a lookup

// ---- pure helpers ----------------------------------------------------------------------------------------------

// `palette`: a palette's name ("viridis", "cividis") or its stops; anything else is viridis.
export function stopsOf(palette) {
  if (Array.isArray(palette) && palette.length >= 2) return palette;
  return PALETTES[palette] || VIRIDIS;
}

const luts = new WeakMap(); // stops -> Uint8ClampedArray(LUT_SIZE * 3)

// The palette's colours at LUT_SIZE even steps of 0..1, as r, g, b bytes.
export function paletteLut(stops) {
  let lut = luts.get(stops);
  if (!lut) {
    lut = new Uint8ClampedArray(LUT_SIZE * 3);
    for (let i = 0; i < LUT_SIZE; i++) lut.set(colorAt(stops, i / (LUT_SIZE - 1)).map(Math.round), i * 3);
    luts.set(stops, lut);
  }
  return lut;
}

// Block values (weights, 0..1) as RGBA bytes on the palette; NaN (all masked) takes the masked fill.
export function paintBlocks(blocks, stops, out = new Uint8ClampedArray(blocks.values.length * 4)) {
  const lut = paletteLut(stops);
  const mask = hexToRgb(MASK_FILL);
  const { values } = blocks;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    const o = i * 4;
    if (v !== v) {
      out[o] = mask[0];
      out[o + 1] = mask[1];
      out[o + 2] = mask[2];
    } else {
      const j = Math.round(Math.min(1, Math.max(0, v)) * (LUT_SIZE - 1)) * 3;
      out[o] = lut[j];
      out[o + 1] = lut[j + 1];
      out[o + 2] = lut[j + 2];
    }
    out[o + 3] = 255;
  }
  return out;
}

// CSS size of a thumbnail for a block grid: the longest side at most THUMB_PX, a whole number of px per pixel.
export function thumbSize(rows, cols, side = THUMB_PX) {
  const f = Math.max(1, Math.floor(side / Math.max(rows, cols, 1)));
  return { width: cols * f, height: rows * f };
}

const blocksOf = (weights, eligible) => cachedBlockMax(weights, eligible, THUMB_PX);

// ---- drawing ---------------------------------------------------------------------------------------------------

// Build the grid of thumbnails into `container` (its old content goes) from `layers` (a result's layers:
// [{index, heads: [{index, weights}]}]). Options: palette (a name or stops), selected ([layer, head] outlined, or
// null), onPick(layer, head) (a thumbnail pressed: click, Enter or Space), eligible (the result's eligibility matrix:
// masked blocks drawn as masked; optional). Returns {buttons, select([layer, head] | null)}: select moves the outline
// (and the keyboard's tab stop) without drawing again. Touches nothing outside `container`.
export function drawOverview(
  container,
  layers,
  { palette = "viridis", selected = null, onPick = null, eligible = null } = {},
) {
  const stops = stopsOf(palette);
  const nHeads = Math.max(0, ...layers.map((l) => l.heads.length));
  const grid = node("div", { className: "ov-grid" });
  grid.setAttribute("role", "group");
  grid.setAttribute("aria-label", "Every head of every layer: arrow keys move, Enter opens a head");
  grid.style.gridTemplateColumns = `auto repeat(${nHeads}, max-content)`;
  const corner = node("span", { className: "ov-corner" });
  grid.append(corner);
  for (let h = 0; h < nHeads; h++) {
    const label = node("span", { className: "ov-col" }, `H${h}`);
    label.setAttribute("aria-hidden", "true");
    grid.append(label);
  }
  const buttons = []; // [[button]] by row (layer) and column (head)
  for (const layer of layers) {
    const rowLabel = node("span", { className: "ov-row" }, `L${layer.index}`);
    rowLabel.setAttribute("aria-hidden", "true");
    grid.append(rowLabel);
    const row = [];
    for (let h = 0; h < nHeads; h++) {
      const head = layer.heads[h];
      if (!head) {
        grid.append(node("span", { className: "ov-empty" }));
        continue;
      }
      const b = thumbButton(layer.index, head, stops, eligible);
      b.addEventListener("click", () => onPick && onPick(layer.index, head.index));
      b.addEventListener("keydown", (e) => move(e, buttons, b));
      grid.append(b);
      row.push(b);
    }
    buttons.push(row);
  }
  container.replaceChildren(grid);
  const select = (sel) => {
    let stop = null;
    for (const row of buttons) {
      for (const b of row) {
        const on = !!sel && Number(b.dataset.layer) === sel[0] && Number(b.dataset.head) === sel[1];
        b.setAttribute("aria-pressed", on ? "true" : "false");
        b.tabIndex = -1;
        if (on) stop = b;
      }
    }
    stop = stop || buttons.find((r) => r.length)?.[0] || null;
    if (stop) stop.tabIndex = 0;
  };
  select(selected);
  return { buttons, select };
}

function thumbButton(layer, head, stops, eligible) {
  const b = node("button", { type: "button", className: "ov-thumb" });
  b.id = `overview-${layer}-${head.index}`;
  b.setAttribute("data-testid", "overview-head");
  b.dataset.layer = String(layer);
  b.dataset.head = String(head.index);
  b.setAttribute("aria-label", `Layer ${layer} head ${head.index}`);
  b.title = `Layer ${layer} · head ${head.index}: press to open it large`;
  const canvas = document.createElement("canvas");
  canvas.setAttribute("aria-hidden", "true");
  const w = halfRows(head, "weights") ?? head.weights; // a float16 answer's bit patterns: nothing widened
  if (w && w.length && w[0].length) {
    const blocks = blocksOf(w, eligible && eligible.length === w.length ? eligible : null);
    canvas.width = blocks.cols;
    canvas.height = blocks.rows;
    const size = thumbSize(blocks.rows, blocks.cols);
    canvas.style.width = `${size.width}px`;
    canvas.style.height = `${size.height}px`;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(blocks.cols, blocks.rows);
    paintBlocks(blocks, stops, img.data);
    ctx.putImageData(img, 0, 0);
    b.dataset.rows = String(blocks.rows);
    b.dataset.cols = String(blocks.cols);
  }
  b.append(canvas);
  return b;
}

// Arrow keys move between thumbnails (left/right: heads, up/down: layers; Home/End: the row's ends), taking the tab
// stop along; Enter and Space are the button's own.
function move(e, buttons, from) {
  const r = buttons.findIndex((row) => row.includes(from));
  if (r < 0) return;
  const c = buttons[r].indexOf(from);
  const at = (rr, cc) => buttons[rr] && buttons[rr][Math.min(cc, buttons[rr].length - 1)];
  const target = {
    ArrowLeft: () => at(r, Math.max(0, c - 1)),
    ArrowRight: () => at(r, c + 1),
    ArrowUp: () => at(Math.max(0, r - 1), c),
    ArrowDown: () => at(Math.min(buttons.length - 1, r + 1), c),
    Home: () => at(r, 0),
    End: () => at(r, buttons[r].length - 1),
  }[e.key];
  if (!target) return;
  e.preventDefault();
  const to = target();
  if (!to || to === from) return;
  from.tabIndex = -1;
  to.tabIndex = 0;
  to.focus();
}

// ---- the page's view -------------------------------------------------------------------------------------------

const drawn = new WeakMap(); // root -> {result, palette, handle}: what was last painted, to move only the outline

export function deps(s) {
  return [s.run.result, s.run.rest, s.ui.palette, s.ui.focus, s.ui.layer];
}

// The head the large view shows: the one opened, else the first head of the layer shown (as store.js selectView).
export function focusedHead(result, ui) {
  const f = ui.focus;
  if (f && result.layers.some((l) => l.index === f[0] && f[1] < l.heads.length)) return f;
  const shown = result.layers.find((l) => l.index === ui.layer) || result.layers[0];
  return shown ? [shown.index, 0] : null;
}

export function render(root, s, dispatch) {
  const r = s.run.result;
  const multi = !!r && r.config.n_layers > 1 && r.layers.length > 0;
  // a one-layer model's heads are all in the heads grid already
  root.hidden = !multi;
  if (!multi) {
    drawn.delete(root);
    return;
  }
  const grid = root.querySelector("[data-role=grid]");
  const note = root.querySelector("[data-role=partial]");
  if (s.run.rest) {
    // a streamed run's other layers are on their way: every layer is drawn once they are in, not one row now and
    // the grid again in a moment (the first draw is the layer shown, in the views above)
    drawn.delete(root);
    grid.replaceChildren();
    note.hidden = false;
    note.textContent = `Every layer's heads are drawn here once the other ${r.config.n_layers - r.layers.length} layers are in.`;
    return;
  }
  const selected = focusedHead(r, s.ui);
  const last = drawn.get(root);
  if (last && last.result === r && last.palette === s.ui.palette) {
    last.handle.select(selected);
    return;
  }
  // a run that holds some layers only (one chosen, or every layer over the server's limit): those, said so
  const partial = r.layers.length < r.config.n_layers;
  note.hidden = !partial;
  const held = r.layers.map((l) => l.index);
  const these = `layer${held.length === 1 ? "" : "s"} ${held.join(", ")}`;
  note.textContent = partial ? `This run holds ${these} of ${r.config.n_layers} only; the Layer menu picks which.` : "";
  const handle = drawOverview(grid, r.layers, {
    palette: s.ui.palette,
    selected,
    eligible: r.eligible,
    onPick: (layer, head) => dispatch(act.headOpened(layer, head, null, `overview-${layer}-${head}`)),
  });
  root.dataset.layers = String(r.layers.length);
  root.dataset.heads = String(r.config.n_heads);
  drawn.set(root, { result: r, palette: s.ui.palette, handle });
}
