// The Vision workspace's every layer at once (vision.js draws it, templates/vision.html holds its root): a grid of
// small thumbnails, one row a layer and one column a head, then a column of the heads averaged, each the image with
// that head's row as veils, as AttentionViz's matrix view and bertviz's model view lay a model out. The row is the
// one the large picture shows: the chosen patch's, or the [CLS]'s; under "rollout" the heads' columns show the
// [CLS]'s row and the last column the rollout. Pressing a thumbnail (a click, a tap, Enter or Space) chooses its
// layer and head for the large picture; the grid is one tab stop, and the arrow keys, Home and End move in it.
//
// Drawn on two canvases laid one over the other, built once for a model's grid and kept: the image in every cell,
// drawn again only when the image changes (from one downscaled copy of it), and the veils, drawn again only when the
// row shown changes (a new answer, patch or map): every thumbnail's veils are one RGBA pixel a patch in one small
// bitmap (veilBytes), put once and scaled into the cells with smoothing off. Choosing a layer or head repaints
// nothing but the chosen cell's frame. The root's data-drawn ("layers x heads"), data-veils and data-image (the
// image's label) are set once each canvas is painted, for the bench and the tests to wait on.

import { node } from "./dom.js";
import { firstPatch, meanRow, moveCursor, veilAlphas } from "./visiongrid.js";
import { VEIL_MAX, pixelsOf } from "./visionpicture.js";

const THUMB = 44; // a thumbnail's longer side, in CSS pixels (at most: a whole number of device pixels a patch)
const PAD = 2; // CSS pixels between a thumbnail and its cell's edge
const KEYS = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End"];

// ---- pure helpers (tests/js/vision.test.mjs) ----

// The rows drawn: for each layer, each head's row of the map shown ("patch": token `query`'s, else the [CLS]'s),
// then the heads averaged ("rollout": the layer's rollout from the [CLS]). `layers` is the answer's layers.
export function layerRows(layers, map, query) {
  const q = map === "patch" ? query : 0;
  return layers.map((layer) => [
    ...layer.heads.map((h) => h.weights[q]),
    map === "rollout" ? layer.rollout[0] : meanRow(layer.heads, q),
  ]);
}

// Every thumbnail's veils as one RGBA bitmap, a pixel a patch: `cells[layer][col]` is that thumbnail's alphas
// (veilAlphas: rows x cols of the grid, row by row), laid at (col * gridCols, layer * gridRows); each pixel is `rgb`
// at VEIL_MAX times its alpha. Returns {width, height, data: Uint8ClampedArray}.
export function veilBytes(cells, [rows, cols], rgb) {
  const width = cells[0].length * cols;
  const height = cells.length * rows;
  const data = new Uint8ClampedArray(width * height * 4);
  cells.forEach((line, layer) =>
    line.forEach((alphas, col) => {
      for (let i = 0; i < alphas.length; i++) {
        const at = ((layer * rows + Math.floor(i / cols)) * width + col * cols + (i % cols)) * 4;
        data[at] = rgb[0];
        data[at + 1] = rgb[1];
        data[at + 2] = rgb[2];
        data[at + 3] = Math.round(255 * VEIL_MAX * alphas[i]);
      }
    }),
  );
  return { width, height, data };
}

// The cell a key moves to from {layer, col} on a grid of `layers` x `cols`, kept on it (Home and End: the row's first
// and last); null for any other key. The one-image view's cursor moves it (visiongrid.js), Home and End on the
// layer's row alone.
export function moveCell({ layer, col }, key, layers, cols) {
  const alongRow = key === "Home" || key === "End";
  const to = alongRow
    ? moveCursor({ row: 0, col }, key, [1, cols])
    : moveCursor({ row: layer, col }, key, [layers, cols]);
  return to && { layer: alongRow ? layer : to.row, col: to.col };
}

// Where the thumbnails lie on the canvases, in device pixels: a whole number of pixels a patch (`s`), the thumbnail
// `w` x `h`, its cell `cw` x `ch` (`pad`, PAD CSS pixels, on every side).
export function cellGeometry([rows, cols], scale) {
  const s = Math.max(1, Math.floor((THUMB * scale) / Math.max(rows, cols)));
  const w = cols * s;
  const h = rows * s;
  const pad = Math.max(1, Math.round(PAD * scale));
  return { s, w, h, cw: w + 2 * pad, ch: h + 2 * pad, pad };
}

// The head a column names: a head's number as text, or "mean" for the last column.
export function headOfColumn(col, heads) {
  return col === heads ? "mean" : String(col);
}

// ---- the grid on the page ----

// The grid's parts for the answer's shape, built once and kept while the grid, its layers and heads stay the same.
function build(lab, key, layers, heads) {
  const root = lab.part("vision-layers");
  const grid = lab.answer.config.patch_grid;
  const geo = cellGeometry(grid, window.devicePixelRatio || 1);
  const scale = window.devicePixelRatio || 1;
  const cols = heads + 1;
  const table = node("div", { className: "vision-layers-grid" });
  table.setAttribute("role", "grid");
  table.setAttribute("aria-label", "Every layer's heads: arrow keys move, Enter chooses the layer and head");
  table.style.gridTemplateColumns = `auto repeat(${cols}, ${geo.cw / scale}px)`;
  table.style.gridTemplateRows = `auto repeat(${layers}, ${geo.ch / scale}px)`;
  const canvas = (className) => {
    const c = node("canvas", { className });
    c.width = cols * geo.cw;
    c.height = layers * geo.ch;
    c.style.width = `${(cols * geo.cw) / scale}px`;
    c.style.gridRow = `2 / span ${layers}`;
    c.style.gridColumn = `2 / span ${cols}`;
    c.setAttribute("aria-hidden", "true");
    return c;
  };
  const base = canvas("vision-layers-image");
  const veils = canvas("vision-layers-veils");
  Object.assign(veils.dataset, { cellW: geo.cw, cellH: geo.ch, pad: geo.pad, patch: geo.s });
  const head = node("div", { className: "vision-layers-row" });
  head.setAttribute("role", "row");
  head.append(node("span"));
  for (let c = 0; c < cols; c++) {
    const h = node("span", { className: "small" }, c === heads ? "mean" : `h${c}`);
    h.setAttribute("role", "columnheader");
    h.title = c === heads ? "the heads averaged" : `head ${c}`;
    head.append(h);
  }
  const cells = [];
  const lines = Array.from({ length: layers }, (_, layer) => {
    const line = node("div", { className: "vision-layers-row" });
    line.setAttribute("role", "row");
    const label = node("span", { className: "small" }, `layer ${layer}`);
    label.setAttribute("role", "rowheader");
    label.style.gridRow = String(layer + 2);
    line.append(label);
    cells.push(
      Array.from({ length: cols }, (_, col) => {
        const cell = node("div", { className: "vision-layers-cell", tabIndex: -1 });
        cell.setAttribute("role", "gridcell");
        cell.setAttribute("aria-selected", "false");
        const which = col === heads ? "heads averaged" : `head ${col}`;
        cell.setAttribute("aria-label", `layer ${layer}, ${which}`);
        Object.assign(cell.dataset, { layer: String(layer), head: headOfColumn(col, heads) });
        cell.style.gridRow = String(layer + 2);
        cell.style.gridColumn = String(col + 2);
        line.append(cell);
        return cell;
      }),
    );
    return line;
  });
  table.append(head, base, veils, ...lines);
  root.replaceChildren(table);
  delete root.dataset.drawn;
  return { key, layers, heads, geo, base, veils, cells, stop: cells[0][0], chosen: null, veilsOf: null, imageOf: null };
}

// The grid for the answer shown: built when its shape changed, its veils painted when the row changed, the image
// when it changed, and the chosen layer and head marked.
export function drawLayers(lab, key) {
  const a = lab.answer;
  const layers = a.layers.length;
  const heads = a.layers[0].heads.length;
  let g = lab.layerGrid;
  if (g?.key !== key || g.layers !== layers || g.heads !== heads) g = lab.layerGrid = build(lab, key, layers, heads);
  const map = lab.part("vision-map").value;
  const shown = { answer: a, map, query: map === "patch" ? lab.query : 0 };
  const v = g.veilsOf;
  if (!v || v.answer !== shown.answer || v.map !== shown.map || v.query !== shown.query) paintVeils(lab, g, shown);
  paintImage(lab, g);
  const col = lab.head === "mean" ? heads : Number(lab.head);
  const chosen = g.cells[lab.layer]?.[col];
  if (g.chosen !== chosen) {
    g.chosen?.setAttribute("aria-selected", "false");
    chosen?.setAttribute("aria-selected", "true");
    g.chosen = chosen;
  }
  // the tab stop follows the choice, unless the keyboard is moving in the grid
  if (chosen && !g.base.parentNode.contains(document.activeElement)) rove(g, chosen, false);
}

function rove(g, cell, focus) {
  if (g.stop !== cell) {
    g.stop.tabIndex = -1;
    cell.tabIndex = 0;
    g.stop = cell;
  }
  if (focus) cell.focus();
}

// The veils of every thumbnail: one bitmap of a pixel a patch, scaled into each cell with smoothing off.
function paintVeils(lab, g, shown) {
  const a = lab.answer;
  const grid = a.config.patch_grid;
  const first = firstPatch(a.tokens);
  const cells = layerRows(a.layers, shown.map, shown.query).map((line) =>
    line.map((row) => veilAlphas(row, grid, first)),
  );
  const bytes = veilBytes(cells, grid, accentOf(lab, g.veils));
  const small = document.createElement("canvas");
  small.width = bytes.width;
  small.height = bytes.height;
  small.getContext("2d").putImageData(new ImageData(bytes.data, bytes.width, bytes.height), 0, 0);
  const ctx = g.veils.getContext("2d");
  ctx.clearRect(0, 0, g.veils.width, g.veils.height);
  ctx.imageSmoothingEnabled = false;
  const [rows, cols] = grid;
  const { w, h, cw, ch, pad } = g.geo;
  for (let layer = 0; layer < g.layers; layer++)
    for (let col = 0; col <= g.heads; col++)
      ctx.drawImage(small, col * cols, layer * rows, cols, rows, col * cw + pad, layer * ch + pad, w, h);
  g.veilsOf = shown;
  const root = lab.part("vision-layers");
  root.dataset.drawn = `${g.layers}x${g.heads}`;
  root.dataset.veils = lab.shown.label;
}

// The image in every cell, from one copy of it at the thumbnail's size; once its pixels are in.
function paintImage(lab, g) {
  const pixels = pixelsOf(lab, "layers", () => lab.layerGrid === g && paintImage(lab, g));
  if (!pixels.ready) return;
  // the same pixels under another name (a file chosen again) are drawn already
  if (g.imageOf === pixels) {
    lab.part("vision-layers").dataset.image = lab.shown.label;
    return;
  }
  const { w, h, cw, ch, pad } = g.geo;
  const one = document.createElement("canvas");
  one.width = w;
  one.height = h;
  const octx = one.getContext("2d");
  // a small image (a digit's 8 x 8) grows into squares, as the large picture draws it; a photograph shrinks smoothly
  octx.imageSmoothingEnabled = pixels.img.naturalWidth > w;
  octx.imageSmoothingQuality = "high";
  octx.drawImage(pixels.img, 0, 0, w, h);
  const ctx = g.base.getContext("2d");
  ctx.clearRect(0, 0, g.base.width, g.base.height);
  for (let layer = 0; layer < g.layers; layer++)
    for (let col = 0; col <= g.heads; col++) ctx.drawImage(one, col * cw + pad, layer * ch + pad);
  g.imageOf = pixels;
  lab.part("vision-layers").dataset.image = lab.shown.label;
}

// The page's --accent as [r, g, b], read once through a one-pixel canvas (any CSS colour the stylesheet names).
function accentOf(lab, canvas) {
  if (lab.accentRgb) return lab.accentRgb;
  const probe = document.createElement("canvas");
  probe.width = probe.height = 1;
  const ctx = probe.getContext("2d");
  ctx.fillStyle = getComputedStyle(canvas).getPropertyValue("--accent").trim() || "#2a5db0";
  ctx.fillRect(0, 0, 1, 1);
  lab.accentRgb = Array.from(ctx.getImageData(0, 0, 1, 1).data.slice(0, 3));
  return lab.accentRgb;
}

// The grid's acts, listened for once on its root: a press chooses the cell's layer and head (`choose(layer, head)`),
// the arrow keys, Home and End move the tab stop.
export function bindLayers(lab, choose) {
  const root = lab.part("vision-layers");
  const press = (cell) => choose(Number(cell.dataset.layer), cell.dataset.head);
  root.addEventListener("click", (e) => {
    const cell = e.target.closest("[role=gridcell]");
    if (!cell || !lab.layerGrid) return;
    rove(lab.layerGrid, cell, true);
    press(cell);
  });
  root.addEventListener("keydown", (e) => {
    const g = lab.layerGrid;
    const cell = e.target.closest("[role=gridcell]");
    if (!g || !cell) return;
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      press(cell);
      return;
    }
    if (!KEYS.includes(e.key)) return;
    const layer = Number(cell.dataset.layer);
    const col = cell.dataset.head === "mean" ? g.heads : Number(cell.dataset.head);
    const to = moveCell({ layer, col }, e.key, g.layers, g.heads + 1);
    e.preventDefault();
    rove(g, g.cells[to.layer][to.col], true);
  });
}
