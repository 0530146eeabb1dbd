// The image's patch grid as the Vision workspace reads it (vision.js): a patch and its token, the veil drawn over
// each patch from a row of weights, the cursor the arrow keys move, and the masks over patches as the [query, key]
// cells that /api/attention's `masks.blocked` takes. The tokens are `[CLS]` (and any other special token) first,
// then `p(row,col)` row by row, counted from 0; `config.patch_grid` is [rows, cols]. Pure: no DOM.

const PATCH = /^p\((\d+),(\d+)\)$/;

// The index of the first patch token (the count of special tokens before it); -1 when there is none.
export function firstPatch(tokens) {
  return tokens.findIndex((t) => PATCH.test(t));
}

// The token of the patch at (row, col) on a grid `cols` wide whose patches start at token `first`.
export function tokenOfPatch(row, col, cols, first) {
  return first + row * cols + col;
}

// The patch {row, col} token `t` is; null for a special token or one past the grid.
export function patchOfToken(t, [rows, cols], first) {
  const i = t - first;
  if (t < first || i >= rows * cols) return null;
  return { row: Math.floor(i / cols), col: i % cols };
}

// The mean over heads of each head's row `q`: `heads` is the layer's heads, each {weights: S x S}.
export function meanRow(heads, q) {
  const n = heads[0].weights[q].length;
  const out = new Array(n).fill(0);
  for (const h of heads) for (let k = 0; k < n; k++) out[k] += h.weights[q][k] / heads.length;
  return out;
}

// The veil over each patch for one row of weights (a query's row, or rollout's): its opacity is 1 - w / max over
// the patches, so that the most attended patch shows the image clear and a patch given nothing is veiled whole.
// A row with no weight on any patch veils them all.
export function veilAlphas(row, [rows, cols], first) {
  const w = Array.from(row.slice(first, first + rows * cols)); // a Float32Array row too, reckoned in doubles
  const max = Math.max(0, ...w);
  return w.map((v) => (max > 0 ? 1 - Math.max(0, v) / max : 1));
}

// The cursor after an arrow key (or Home / End), kept on the grid; null for any other key.
export function moveCursor({ row, col }, key, [rows, cols]) {
  const to = {
    ArrowUp: [row - 1, col],
    ArrowDown: [row + 1, col],
    ArrowLeft: [row, col - 1],
    ArrowRight: [row, col + 1],
    Home: [0, 0],
    End: [rows - 1, cols - 1],
  }[key];
  if (!to) return null;
  return { row: Math.min(rows - 1, Math.max(0, to[0])), col: Math.min(cols - 1, Math.max(0, to[1])) };
}

// A patch blocked as a key: the cell [q, key] for every query q of a sequence of `seqLen` tokens.
export function keyBlocked(key, seqLen) {
  return Array.from({ length: seqLen }, (_, q) => [q, key]);
}

// A 2-D window of `radius` patches: every patch query is blocked from the patch keys more than `radius` rows or
// columns away (a square around it); special tokens see and are seen by every token. The API's own `window` counts
// positions along the sequence, which on a grid read row by row is no square, hence the cells listed one by one.
export function windowBlocked(radius, [rows, cols], first) {
  const out = [];
  for (let q = 0; q < rows * cols; q++) {
    for (let k = 0; k < rows * cols; k++) {
      const far = Math.max(Math.abs(Math.floor(q / cols) - Math.floor(k / cols)), Math.abs((q % cols) - (k % cols)));
      if (far > radius) out.push([first + q, first + k]);
    }
  }
  return out;
}

// The blocked cells of the workspace's masks: each blocked key's column, then the window's cells, each cell once.
export function blockedCells(keys, radius, grid, first, seqLen) {
  const seen = new Set();
  const out = [];
  const cells = [
    ...keys.flatMap((k) => keyBlocked(k, seqLen)),
    ...(radius == null ? [] : windowBlocked(radius, grid, first)),
  ];
  for (const [q, k] of cells) {
    const id = `${q},${k}`;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push([q, k]);
  }
  return out;
}
