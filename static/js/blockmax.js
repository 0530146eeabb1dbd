// Block maxima: a matrix reduced to at most side x side blocks by the largest eligible value of each, so that a
// downsampled thumbnail keeps a sharp pattern (previous token, a diagonal) instead of averaging it away. Read by the
// all-layers overview (overview.js), in the page and in a saved standalone page; pure: it reads no page state.

import { halfValues, widenHalf } from "./arrays.js";

// For n source positions drawn on m pixels (m <= n): the pixel each position falls in.
export function blockIndex(n, m) {
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.min(m - 1, Math.floor((i * m) / n));
  return out;
}

// The first position of each pixel and one past the last: bounds[p] .. bounds[p + 1] - 1 fall in pixel p.
export function blockBounds(n, m) {
  const at = blockIndex(n, m);
  const bounds = new Int32Array(m + 1).fill(n);
  for (let i = n - 1; i >= 0; i--) bounds[at[i]] = i;
  return bounds;
}

const fullCache = new WeakMap(); // eligibility matrix -> Uint8Array: 1 where the row has every key eligible

// Which rows of an eligibility matrix have every key eligible: worked out once a result, not once a head.
export function fullRows(eligible) {
  let full = fullCache.get(eligible);
  if (!full) {
    full = new Uint8Array(eligible.length);
    for (let q = 0; q < eligible.length; q++) {
      const row = eligible[q];
      let all = 1;
      for (let k = 0; k < row.length && all; k++) if (!row[k]) all = 0;
      full[q] = all;
    }
    fullCache.set(eligible, full);
  }
  return full;
}

// A (rows x cols) matrix `w` reduced to at most (side x side) blocks by their largest eligible value:
// {rows, cols, values: Float32Array(rows * cols)}, NaN where every cell of the block is masked. `eligible` (same shape
// as w, truthy = eligible) may be null: then every cell counts. Each row is read once, a block's columns in a
// tight loop: 72 heads of 512 x 512 are 19 million cells. Rows of float16 bit patterns (Uint16Array, arrays.js
// halfRows) are compared as integers and only the blocks' maxima are widened: for values that are not negative (a
// weight), the patterns' order is the values' order; a matrix holding a negative value or a NaN is widened whole.
export function blockMax(w, eligible, side) {
  if (w.length && w[0] instanceof Uint16Array) {
    return (
      blockMaxHalf(w, eligible, side) ??
      blockMax(
        w.map((row) => widenHalf(row)),
        eligible,
        side,
      )
    );
  }
  const S = w.length;
  const K = S ? w[0].length : 0;
  const rows = Math.min(S, side);
  const cols = Math.min(K, side);
  const values = new Float32Array(rows * cols).fill(-Infinity);
  const rowAt = blockIndex(S, rows);
  const bounds = blockBounds(K, cols);
  const full = eligible ? fullRows(eligible) : null;
  for (let q = 0; q < S; q++) {
    const row = w[q];
    const ok = eligible && !full[q] ? eligible[q] : null; // a row with every key eligible takes the fast loop
    const base = rowAt[q] * cols;
    for (let j = 0; j < cols; j++) {
      const end = bounds[j + 1];
      let m = -Infinity;
      if (ok) {
        for (let k = bounds[j]; k < end; k++) if (ok[k] && row[k] > m) m = row[k];
      } else {
        for (let k = bounds[j]; k < end; k++) if (row[k] > m) m = row[k];
      }
      if (m > values[base + j]) values[base + j] = m;
    }
  }
  for (let i = 0; i < values.length; i++) if (values[i] === -Infinity) values[i] = Number.NaN; // only masked cells
  return { rows, cols, values };
}

const HALF_INF = 0x7c00; // +Infinity's pattern: above it, NaNs; from 0x8000 (the sign bit), negatives and -0
const SIGNS = 0x80008000; // the sign bit of each of two patterns in a 32-bit word

// The rows as one run of 32-bit words, two patterns to a word, when they lie back to back in one buffer (as the
// arrays form's do), 4-byte aligned and of even length; else null.
function pairWords(w) {
  const K = w[0].length;
  const first = w[0];
  if (K % 2 || first.byteOffset % 4) return null;
  for (let q = 1; q < w.length; q++) {
    if (w[q].buffer !== first.buffer || w[q].byteOffset !== first.byteOffset + q * K * 2) return null;
  }
  return new Uint32Array(first.buffer, first.byteOffset, (w.length * K) >> 1);
}

const anyCache = new WeakMap(); // eligibility matrix -> {"rows x cols": Uint8Array}: blocks holding an eligible cell

// Which blocks of an eligibility matrix hold at least one eligible cell: once a result and block grid, not once a
// head.
function eligibleBlocks(eligible, rowBounds, bounds) {
  const rows = rowBounds.length - 1;
  const cols = bounds.length - 1;
  const key = `${rows}x${cols}`;
  let byGrid = anyCache.get(eligible);
  if (!byGrid) anyCache.set(eligible, (byGrid = {}));
  if (!byGrid[key]) {
    const any = new Uint8Array(rows * cols);
    for (let r = 0; r < rows; r++) {
      for (let q = rowBounds[r]; q < rowBounds[r + 1]; q++) {
        const ok = eligible[q];
        for (let j = 0; j < cols; j++) {
          if (any[r * cols + j]) continue;
          for (let k = bounds[j]; k < bounds[j + 1]; k++) {
            if (ok[k]) {
              any[r * cols + j] = 1;
              break;
            }
          }
        }
      }
    }
    byGrid[key] = any;
  }
  return byGrid[key];
}

const wordMasks = new WeakMap(); // eligibility matrix -> Uint32Array: per pair of keys, 0xffff over each eligible one

// An eligibility matrix (of an even number of keys) as one mask word per pair of keys, the pairs of pairWords: a
// pattern AND-ed with it is itself where eligible, 0 (+0, no larger than any weight) where masked.
function pairMasks(eligible) {
  let masks = wordMasks.get(eligible);
  if (!masks) {
    const K = eligible[0].length;
    const pairs = K >> 1;
    masks = new Uint32Array(eligible.length * pairs);
    const bytes = new Uint16Array(masks.buffer); // the halves in the words' own byte order
    eligible.forEach((ok, q) => {
      for (let k = 0; k < K; k++) if (ok[k]) bytes[q * K + k] = 0xffff;
    });
    wordMasks.set(eligible, masks);
  }
  return masks;
}

// foldWords over the eligible patterns only
function foldMaskedWords(acc, words, masks, at, n) {
  let signs = 0;
  for (let i = 0; i < n; i++) {
    const a = acc[i];
    const b = words[at + i] & masks[at + i];
    signs |= b;
    const ge = (((a | SIGNS) - b) & SIGNS) >>> 15;
    const keep = (ge << 16) - ge;
    acc[i] = (a & keep) | (b & ~keep);
  }
  return signs;
}

// acc[k] = max(acc[k], row[k]) for two patterns a word (both sign bits clear); the patterns OR-ed
function foldWords(acc, words, at, n) {
  let signs = 0;
  for (let i = 0; i < n; i++) {
    const a = acc[i];
    const b = words[at + i];
    signs |= b;
    const ge = (((a | SIGNS) - b) & SIGNS) >>> 15; // bit 0 and bit 16: a's half >= b's half
    const keep = (ge << 16) - ge; // those halves all ones
    acc[i] = (a & keep) | (b & ~keep);
  }
  return signs;
}

// acc[k] = max(acc[k], row[k]) one pattern at a time; the patterns OR-ed
function foldRow(acc, row, n) {
  let signs = 0;
  for (let k = 0; k < n; k++) {
    const v = row[k];
    signs |= v;
    if (v > acc[k]) acc[k] = v;
  }
  return signs;
}

// foldRow over the eligible keys only
function foldEligibleRow(acc, row, ok, n) {
  let signs = 0;
  for (let k = 0; k < n; k++) {
    if (!ok[k]) continue;
    const v = row[k];
    signs |= v;
    if (v > acc[k]) acc[k] = v;
  }
  return signs;
}

// blockMax over float16 bit patterns, or null when an eligible cell holds a pattern above +Infinity's (a negative
// value, -0, a NaN), whose integer order is not its value's. The rows of a block row are folded into one row of
// column maxima, which is then cut into blocks. A row with every key eligible is folded two patterns at a time in
// 32-bit words: with both sign bits clear, ((a | SIGNS) - b) & SIGNS has each pattern's sign bit set where a's
// pattern is the larger or equal, with no borrow from one half into the other (72 heads at 512 tokens: 3x faster).
function blockMaxHalf(w, eligible, side) {
  const S = w.length;
  const K = w[0].length;
  const rows = Math.min(S, side);
  const cols = Math.min(K, side);
  const rowBounds = blockBounds(S, rows);
  const bounds = blockBounds(K, cols);
  const full = eligible ? fullRows(eligible) : null;
  const any = eligible ? eligibleBlocks(eligible, rowBounds, bounds) : null;
  const words = pairWords(w);
  const acc = new Uint16Array(K + (K % 2)); // one block row's column maxima (0 until a larger pattern comes)
  const accWords = new Uint32Array(acc.buffer);
  const pairs = K >> 1;
  let masks = null; // pairMasks(eligible), once a row with a masked key comes (false: no words to mask)
  let signs = 0; // every eligible pattern OR-ed: a sign bit set says one was negative
  let top = 0;
  const best = new Uint16Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    acc.fill(0);
    for (let q = rowBounds[r]; q < rowBounds[r + 1]; q++) {
      if (eligible && !full[q]) {
        masks ??= words && eligible[0].length === K ? pairMasks(eligible) : false;
        if (masks) signs |= foldMaskedWords(accWords, words, masks, q * pairs, pairs);
        else signs |= foldEligibleRow(acc, w[q], eligible[q], K);
      } else if (words) {
        signs |= foldWords(accWords, words, q * pairs, pairs);
      } else {
        signs |= foldRow(acc, w[q], K);
      }
    }
    if (signs & SIGNS) return null;
    for (let j = 0; j < cols; j++) {
      let m = 0;
      for (let k = bounds[j]; k < bounds[j + 1]; k++) if (acc[k] > m) m = acc[k];
      best[r * cols + j] = m;
      if (m > top) top = m;
    }
  }
  if (top > HALF_INF) return null;
  const value = halfValues();
  const values = new Float32Array(rows * cols);
  for (let i = 0; i < values.length; i++) values[i] = any && !any[i] ? Number.NaN : value[best[i]];
  return { rows, cols, values };
}

const reduced = new WeakMap(); // a head's weights -> side -> {eligible, blocks}: a focus or palette change reuses them

// blockMax kept per head and side: the overview's thumbnails and the flow's icons redraw from it without reducing the
// head again. A new eligibility (a mask change) reduces it anew.
export function cachedBlockMax(weights, eligible, side) {
  let bySide = reduced.get(weights);
  if (!bySide) reduced.set(weights, (bySide = new Map()));
  const hit = bySide.get(side);
  if (hit && hit.eligible === eligible) return hit.blocks;
  const blocks = blockMax(weights, eligible, side);
  bySide.set(side, { eligible, blocks });
  return blocks;
}
