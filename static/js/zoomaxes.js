// The pure geometry around the deep-zoom canvas (zoomview.js), which a test calls without a page: the position axes'
// ticks (every position with its token once a token fits, else round steps), the minimap's rectangle for a view and
// the view a minimap click asks for, and the keyboard cell cursor's moves. A view is {k0, q0, k1, q1}: the positions
// at the canvas's edges (keys across, queries down), `scale` CSS pixels per position.

export const TOKEN_PX = 14; // a position this wide on screen is labelled with its token
export const TICK_GAP_PX = 56; // numbered ticks at least this far apart
const STEPS = [1, 2, 5]; // round steps: 1, 2, 5, 10, 20, 50, ...

// The smallest round step (1, 2 or 5 times a power of ten) of positions at least `gapPx` apart at `scale`.
export function tickStep(scale, gapPx = TICK_GAP_PX) {
  const want = gapPx / scale;
  for (let p = 1; ; p *= 10) {
    for (const s of STEPS) if (s * p >= want) return s * p;
  }
}

// The ticks of one axis from position `p0` to `p1` at `scale`, inside 0..seqLen: [{at, px}], `px` the CSS pixel of
// the middle of position `at` from the axis's start; `tokens`: true when each position is labelled with its token
// (then every position in view has a tick).
export function axisTicks(p0, p1, scale, seqLen) {
  const tokens = scale >= TOKEN_PX;
  const step = tokens ? 1 : tickStep(scale);
  const first = Math.max(0, Math.ceil((p0 - 0.5) / step) * step);
  const last = Math.min(seqLen - 1, Math.floor(p1 - 0.5));
  const ticks = [];
  for (let at = first; at <= last; at += step) ticks.push({ at, px: (at + 0.5 - p0) * scale });
  return { tokens, step, ticks };
}

// The view's rectangle on a minimap of `size` x `size` CSS pixels showing the whole S x S matrix: {x, y, w, h}, cut
// at the matrix's edges (a view wider than the matrix shows the whole of it).
export function minimapRect(view, seqLen, size) {
  const f = size / seqLen;
  const cut = (v) => Math.max(0, Math.min(seqLen, v));
  const x0 = cut(view.k0);
  const y0 = cut(view.q0);
  return { x: x0 * f, y: y0 * f, w: (cut(view.k1) - x0) * f, h: (cut(view.q1) - y0) * f };
}

// The view's top-left position {ox, oy} that puts the minimap point (mx, my) at the view's middle, for a view
// `span` positions wide and high ({k, q}); the zoom keeps it inside the matrix.
export function minimapTarget(mx, my, size, seqLen, span) {
  const f = seqLen / size;
  return { ox: mx * f - span.k / 2, oy: my * f - span.q / 2 };
}

const MOVES = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };

// The cell cursor {query, key} after `key` (an arrow, Home, End, PageUp, PageDown), `cell` positions a step (one
// block of the level in view), `page` cells a page step; null for a key that does not move it. It stays in the
// matrix, on the first position of its block.
export function moveCursor(cursor, key, cell, seqLen, page = 16) {
  const snap = (v) => Math.max(0, Math.min(seqLen - 1, v)) - (Math.max(0, Math.min(seqLen - 1, v)) % cell);
  let { query, key: k } = cursor;
  if (key in MOVES) {
    query += MOVES[key][0] * cell;
    k += MOVES[key][1] * cell;
  } else if (key === "Home") k = 0;
  else if (key === "End") k = seqLen - 1;
  else if (key === "PageUp") query -= page * cell;
  else if (key === "PageDown") query += page * cell;
  else return null;
  return { query: snap(query), key: snap(k) };
}

// The smallest move {ox, oy} of a view's top-left that brings the block of `cell` positions at the cursor inside a
// view `span` positions wide and high ({k, q}); the view as it is when the block is already in it.
export function followCursor(view, cursor, cell, span) {
  const along = (o, at, len) => (at < o ? at : at + cell > o + len ? at + cell - len : o);
  return { ox: along(view.k0, cursor.key, span.k), oy: along(view.q0, cursor.query, span.q) };
}
