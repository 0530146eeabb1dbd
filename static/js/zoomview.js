// The deep-zoom canvas of one head of a long run: the whole S x S matrix down to single weights. It asks only for
// the tiles of the level that matches the zoom that meet the view (longrun.js tilesInView), draws each as it
// arrives (one ImageData per tile, painted once and kept in a small LRU), aborts the ones that leave the view, and
// draws the head's summary under them meanwhile. Wheel zooms about the pointer, two pointers pinch, one drags, and
// the keys + and − zoom, Shift and an arrow pan, 0 fits the whole matrix. The arrows (and Home, End, Page Up, Page
// Down) move a cell cursor a block of the level in view at a time, the view following it; Enter picks its query
// row. Every frame is one requestAnimationFrame.

import { MASK_FILL, colorAt, hexToRgb } from "./colors.js";
import { Lru, TILE, cellOf, levelFor, tilesInView } from "./longrun.js";
import { followCursor, moveCursor } from "./zoomaxes.js";

export const KEEP_TILES = 48; // tiles kept painted (each a 256 x 256 canvas and its weights)
export const MAX_SCALE = 24; // CSS pixels per position at the deepest zoom
const STEP = 2; // one + or − zooms this much
const WHEEL = 0.002; // zoom per wheel delta unit: exp(-deltaY * WHEEL)
const CLICK_PX = 4; // a press that moves less than this is a click (it picks its query row)
const CURSOR_PX = 5; // the cell cursor's outline is at least this wide, however small its block is on screen

// The colour lookup of a palette: 256 RGB triples, then the masked cells' grey (a weight of exactly 0).
export function makeLut(stops) {
  const lut = new Uint8ClampedArray(257 * 3);
  for (let i = 0; i < 256; i++) lut.set(colorAt(stops, i / 255).map(Math.round), i * 3);
  lut.set(hexToRgb(MASK_FILL), 256 * 3);
  return lut;
}

// Where a weight sits on the scale, 0..1: log from `lo` to `hi` (a long row's weights are near 1/S), or linear.
export function scaleT(w, scale) {
  if (!(w > 0)) return 0;
  if (scale.log) return Math.min(1, Math.max(0, Math.log(w / scale.lo) / Math.log(scale.hi / scale.lo)));
  return Math.min(1, w / scale.hi);
}

// A matrix of weights (rows of numbers) as an ImageData, one pixel per cell.
export function paint(rows, scale, lut) {
  const h = rows.length;
  const w = h ? rows[0].length : 0;
  const img = new ImageData(Math.max(1, w), Math.max(1, h));
  const d = img.data;
  for (let r = 0; r < h; r++) {
    const row = rows[r];
    for (let c = 0; c < w; c++) {
      const v = row[c];
      const i = (v > 0 ? Math.min(255, Math.floor(scaleT(v, scale) * 256)) : 256) * 3;
      const o = (r * w + c) * 4;
      d[o] = lut[i];
      d[o + 1] = lut[i + 1];
      d[o + 2] = lut[i + 2];
      d[o + 3] = 255;
    }
  }
  return img;
}

export function imageCanvas(img) {
  const c = document.createElement("canvas");
  c.width = img.width;
  c.height = img.height;
  c.getContext("2d").putImageData(img, 0, 0);
  return c;
}

// The part of a coarser tile `parent` ({canvas, k0, q0, cell}: one canvas pixel a block of cell x cell positions)
// under the tile (x, y) of a finer level whose tiles span `span` positions: {sx, sy, sw, sh} in the parent's pixels
// (cut at the parent's edge, where the matrix ends), or null when the parent holds none of it.
export function parentPart(x, y, span, parent) {
  const sx = (x * span - parent.k0) / parent.cell;
  const sy = (y * span - parent.q0) / parent.cell;
  const sw = Math.min(span / parent.cell, parent.canvas.width - sx);
  const sh = Math.min(span / parent.cell, parent.canvas.height - sy);
  return sx >= 0 && sy >= 0 && sw > 0 && sh > 0 ? { sx, sy, sw, sh } : null;
}

export class ZoomView {
  // hooks: fetchTile(z, x, y, signal) -> tile, onCell(cell | null, [px, py] on the canvas), onCursor(cell, [px, py]:
  // the far corner of the cursor's block, each frame), onPick(query), onView(state and its standIns: the tiles on
  // their way drawn from a coarser one, tiles in flight)
  constructor(canvas, hooks) {
    this.canvas = canvas;
    this.hooks = hooks;
    this.cache = new Lru(KEEP_TILES);
    this.inflight = new Map(); // key -> AbortController
    this.head = null;
    this.frame = 0;
    this.pointers = new Map();
    this.cursor = null; // {query, key}: the keyboard's cell, at the first position of its block
    this.bind();
  }

  // A head to show: {id, seqLen, levels, scale, lut, backdrop (canvas of the summary), covers (positions it spans)};
  // `keep`: the same matrix seen from where the view is (in new colours, or its blocks summed up the other way).
  setHead(head, keep = false) {
    for (const c of this.inflight.values()) c.abort();
    this.inflight.clear();
    this.cache.clear();
    this.head = head;
    if (!keep) this.cursor = null;
    if (keep) this.schedule();
    else this.fit();
  }

  // Tiles of this run are gone (the server posted it again): ask again for those in view.
  refetch() {
    for (const c of this.inflight.values()) c.abort();
    this.inflight.clear();
    this.cache.clear();
    this.schedule();
  }

  size() {
    const w = this.canvas.clientWidth || 512;
    return { w, h: this.canvas.clientHeight || w };
  }

  fit() {
    const { w, h } = this.size();
    const s = this.head ? this.head.seqLen : 1;
    this.scale = Math.min(w, h) / s;
    this.ox = 0;
    this.oy = 0;
    this.schedule();
  }

  minScale() {
    const { w, h } = this.size();
    return Math.min(w, h) / (this.head ? this.head.seqLen : 1);
  }

  zoomAt(factor, px, py) {
    if (!this.head) return;
    const k = this.ox + px / this.scale;
    const q = this.oy + py / this.scale;
    this.scale = Math.max(this.minScale(), Math.min(MAX_SCALE, this.scale * factor));
    this.ox = k - px / this.scale;
    this.oy = q - py / this.scale;
    this.clampView();
    this.schedule();
  }

  pan(dx, dy) {
    this.ox -= dx / this.scale;
    this.oy -= dy / this.scale;
    this.clampView();
    this.schedule();
  }

  // The view moved (not zoomed) to have its top-left at positions (ox, oy), kept inside the matrix.
  moveTo(ox, oy) {
    if (!this.head) return;
    this.ox = ox;
    this.oy = oy;
    this.clampView();
    this.schedule();
  }

  // The view moved (not zoomed) to have query row `q` across its middle.
  showQuery(q) {
    if (!this.head) return;
    this.oy = q + 0.5 - this.size().h / 2 / this.scale;
    this.clampView();
    this.schedule();
  }

  clampView() {
    const { w, h } = this.size();
    const s = this.head.seqLen;
    this.ox = Math.max(Math.min(0, s - w / this.scale), Math.min(this.ox, Math.max(0, s - w / this.scale)));
    this.oy = Math.max(Math.min(0, s - h / this.scale), Math.min(this.oy, Math.max(0, s - h / this.scale)));
  }

  // The positions at the view's edges, its level, and the tiles it needs.
  state() {
    const { w, h } = this.size();
    const view = { k0: this.ox, q0: this.oy, k1: this.ox + w / this.scale, q1: this.oy + h / this.scale };
    if (!this.head) return { view, z: 0, tiles: [] };
    const z = levelFor(this.scale, this.head.levels, window.devicePixelRatio || 1);
    return { view, z, scale: this.scale, tiles: tilesInView(view, z, this.head.levels, this.head.seqLen) };
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.draw());
  }

  draw() {
    this.frame = 0;
    const head = this.head;
    const { w, h } = this.size();
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(w * dpr)) this.canvas.width = Math.round(w * dpr);
    if (this.canvas.height !== Math.round(h * dpr)) this.canvas.height = Math.round(h * dpr);
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, w, h);
    if (!head) return;
    const at = (pos, o) => (pos - o) * this.scale;
    ctx.drawImage(head.backdrop, at(0, this.ox), at(0, this.oy), head.covers * this.scale, head.covers * this.scale);
    const st = this.state();
    const span = TILE * cellOf(st.z, head.levels);
    const wanted = new Set();
    let standIns = 0;
    for (const { x, y } of st.tiles) {
      const key = `${head.id}/${st.z}/${x}/${y}`;
      wanted.add(key);
      const got = this.cache.get(key);
      if (got) {
        const c = got.canvas;
        ctx.drawImage(
          c,
          at(x * span, this.ox),
          at(y * span, this.oy),
          c.width * got.cell * this.scale,
          c.height * got.cell * this.scale,
        );
        continue;
      }
      if (!this.inflight.has(key)) this.request(key, st.z, x, y);
      standIns += this.drawCoarser(ctx, st.z, x, y, span, at);
    }
    for (const [key, c] of this.inflight) {
      if (!wanted.has(key)) {
        c.abort();
        this.inflight.delete(key);
      }
    }
    ctx.strokeStyle = "rgba(255,255,255,0.5)";
    ctx.strokeRect(at(0, this.ox), at(0, this.oy), head.seqLen * this.scale, head.seqLen * this.scale);
    if (this.cursor) this.drawCursor(ctx, st.z, at);
    this.hooks.onView?.({ ...st, standIns }, this.inflight.size);
  }

  // While tile (z, x, y) is on its way, its part of the nearest coarser level kept (the map convention: a tile
  // zoomed into shows its parent's blocks, not the summary's); 1 when one was drawn, else 0.
  drawCoarser(ctx, z, x, y, span, at) {
    for (let d = 1; d <= z; d++) {
      const got = this.cache.get(`${this.head.id}/${z - d}/${x >> d}/${y >> d}`);
      if (!got) continue;
      const part = parentPart(x, y, span, got);
      if (!part) return 0;
      const { sx, sy, sw, sh } = part;
      ctx.drawImage(
        got.canvas,
        sx,
        sy,
        sw,
        sh,
        at(x * span, this.ox),
        at(y * span, this.oy),
        sw * got.cell * this.scale,
        sh * got.cell * this.scale,
      );
      return 1;
    }
    return 0;
  }

  // The cursor's block outlined (white over black, seen on any colour), and told with where its corner is drawn.
  drawCursor(ctx, z, at) {
    const now = this.cellOfPos(this.cursor.query, this.cursor.key);
    const side = Math.max(CURSOR_PX, now.cell * this.scale);
    const [x, y] = [at(now.k0, this.ox), at(now.q0, this.oy)];
    ctx.lineWidth = 3;
    ctx.strokeStyle = "#000";
    ctx.strokeRect(x - 1, y - 1, side + 2, side + 2);
    ctx.lineWidth = 1;
    ctx.strokeStyle = "#fff";
    ctx.strokeRect(x - 1, y - 1, side + 2, side + 2);
    this.hooks.onCursor?.(now, [x + side, y + side]);
  }

  request(key, z, x, y) {
    const ctrl = new AbortController();
    this.inflight.set(key, ctrl);
    const head = this.head;
    this.hooks.fetchTile(z, x, y, ctrl.signal).then(
      (tile) => {
        if (this.inflight.get(key) !== ctrl) return;
        this.inflight.delete(key);
        if (head !== this.head) return;
        const canvas = imageCanvas(paint(tile.weights, head.scale, head.lut));
        this.cache.set(key, { canvas, cell: tile.cell, q0: tile.q0, k0: tile.k0, weights: tile.weights });
        this.schedule();
      },
      (err) => {
        if (this.inflight.get(key) === ctrl) this.inflight.delete(key);
        if (err?.name !== "AbortError") this.hooks.onError?.(err);
      },
    );
  }

  // What is under a point of the canvas: {query, key, weight, exact, cell} (weight: from a painted tile of the
  // level in view, else null), or null outside the matrix.
  cellAt(px, py) {
    if (!this.head) return null;
    const key = Math.floor(this.ox + px / this.scale);
    const query = Math.floor(this.oy + py / this.scale);
    if (key < 0 || query < 0 || key >= this.head.seqLen || query >= this.head.seqLen) return null;
    return this.cellOfPos(query, key);
  }

  // The same for the cell (query, key) of the matrix, at the level in view.
  cellOfPos(query, key) {
    const z = this.state().z;
    const cell = cellOf(z, this.head.levels);
    const span = TILE * cell;
    const got = this.cache.get(`${this.head.id}/${z}/${Math.floor(key / span)}/${Math.floor(query / span)}`);
    let weight = null;
    if (got) {
      const row = got.weights[Math.floor((query - got.q0) / cell)];
      weight = row ? row[Math.floor((key - got.k0) / cell)] : null;
    }
    return {
      query,
      key,
      weight: weight ?? null,
      exact: z === this.head.levels,
      cell,
      q0: query - (query % cell),
      k0: key - (key % cell),
    };
  }

  bind() {
    const cv = this.canvas;
    const local = (e) => {
      const r = cv.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    cv.addEventListener(
      "wheel",
      (e) => {
        if (!this.head) return;
        e.preventDefault();
        const [px, py] = local(e);
        this.zoomAt(Math.exp(-e.deltaY * WHEEL), px, py);
      },
      { passive: false },
    );
    cv.addEventListener("pointerdown", (e) => {
      try {
        cv.setPointerCapture(e.pointerId); // a drag that leaves the canvas still pans
      } catch {
        // a pointer the browser no longer tracks: the drag ends at the canvas's edge
      }
      this.pointers.set(e.pointerId, { at: local(e), start: local(e) });
    });
    cv.addEventListener("pointermove", (e) => {
      const p = this.pointers.get(e.pointerId);
      const now = local(e);
      if (!p) {
        this.hooks.onCell?.(this.cellAt(...now), now);
        return;
      }
      if (this.pointers.size === 2) {
        const other = [...this.pointers.entries()].find(([id]) => id !== e.pointerId)[1].at;
        const before = Math.hypot(p.at[0] - other[0], p.at[1] - other[1]);
        const after = Math.hypot(now[0] - other[0], now[1] - other[1]);
        if (before > 0) this.zoomAt(after / before, (now[0] + other[0]) / 2, (now[1] + other[1]) / 2);
      } else {
        this.pan(now[0] - p.at[0], now[1] - p.at[1]);
      }
      p.at = now;
    });
    const up = (e) => {
      const p = this.pointers.get(e.pointerId);
      this.pointers.delete(e.pointerId);
      if (p && e.type === "pointerup" && Math.hypot(p.at[0] - p.start[0], p.at[1] - p.start[1]) < CLICK_PX) {
        const cell = this.cellAt(...local(e));
        if (cell) this.hooks.onPick?.(cell.query);
      }
    };
    cv.addEventListener("pointerup", up);
    cv.addEventListener("pointercancel", up);
    cv.addEventListener("pointerleave", () => this.pointers.size || this.hooks.onCell?.(null));
    cv.addEventListener("keydown", (e) => this.key(e));
    cv.addEventListener("focus", () => this.head && this.placeCursor());
    new ResizeObserver(() => this.head && this.schedule()).observe(cv);
  }

  // The cursor where it was, else on the cell at the view's middle (within the matrix); the next frame tells it.
  placeCursor() {
    if (!this.cursor) {
      const st = this.state();
      const cell = cellOf(st.z, this.head.levels);
      const mid = (a, b) => {
        const at = Math.floor((Math.max(0, a) + Math.min(this.head.seqLen, b)) / 2);
        return at - (at % cell);
      };
      this.cursor = { query: mid(st.view.q0, st.view.q1), key: mid(st.view.k0, st.view.k1) };
    }
    this.schedule();
  }

  // Move the cursor by `key` (an arrow, Home, End, Page Up, Page Down); false for a key that does not move it.
  moveCursor(key) {
    if (!this.head) return false;
    if (!this.cursor) this.placeCursor();
    const { z } = this.state();
    const cell = cellOf(z, this.head.levels);
    const next = moveCursor(this.cursor, key, cell, this.head.seqLen);
    if (!next) return false;
    this.cursor = next;
    const { w, h } = this.size();
    const view = { k0: this.ox, q0: this.oy };
    const to = followCursor(view, next, cell, { k: w / this.scale, q: h / this.scale });
    this.moveTo(to.ox, to.oy);
    return true;
  }

  key(e) {
    const { w, h } = this.size();
    const pan = { ArrowLeft: [w / 4, 0], ArrowRight: [-w / 4, 0], ArrowUp: [0, h / 4], ArrowDown: [0, -h / 4] }[e.key];
    if (e.key === "+" || e.key === "=") this.zoomAt(STEP, w / 2, h / 2);
    else if (e.key === "-" || e.key === "_") this.zoomAt(1 / STEP, w / 2, h / 2);
    else if (e.key === "0") this.fit();
    else if (pan && e.shiftKey) this.pan(...pan);
    else if (e.key === "Enter" && this.cursor) this.hooks.onPick?.(this.cursor.query);
    else if (!this.moveCursor(e.key)) return;
    e.preventDefault();
  }
}
