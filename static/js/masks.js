// Masks as the page holds them, and the pure helpers that edit them. What a mask means (which cells it excludes) is
// the server's alone: a result carries `eligible` and, per mask, `reasons`; the page never works it out.
// Rows are query positions, columns key positions; true = eligible, the same reading as the API.
// The page keeps padding as a sorted list of padded positions (the API's `masks.padded`), so it survives a change
// of text and needs no token count.

export const REASONS = ["causal", "window", "padding", "blocked"];

// Whitespace tokens, the way the textbook and random models split text.
export function splitTokens(text) {
  const t = (text || "").trim();
  return t ? t.split(/\s+/) : [];
}

// Which masks exclude query q from key k, read from a result's `reasons` (one S x S grid per mask in force);
// ["masked"] for a masked cell of a result without them (a batch, a source). Empty = eligible.
export function cellReasons(view, q, k) {
  if (!view.reasons) return view.eligible[q][k] ? [] : ["masked"];
  const found = REASONS.filter((name) => view.reasons[name]?.[q]?.[k]);
  return found.length || view.eligible[q][k] ? found : [LAYER_WINDOW];
}

// Why a cell none of the request's masks excludes is masked all the same: the window of the local layer drawn (its
// own eligibility, the answer's grid narrowed by it).
export const LAYER_WINDOW = "layer window";

// Query rows with no eligible key.
export function emptyRows(eligible) {
  return eligible.flatMap((row, q) => (row.some(Boolean) ? [] : [q]));
}

export function isBlocked(blocked, q, k) {
  return blocked.some(([bq, bk]) => bq === q && bk === k);
}

// Block the cell if it is open, unblock it if blocked; returns a new sorted list.
export function toggleBlocked(blocked, q, k) {
  const next = isBlocked(blocked, q, k) ? blocked.filter(([bq, bk]) => !(bq === q && bk === k)) : [...blocked, [q, k]];
  return next.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
}

// Mark position i as padding, or as a real token again; returns a new sorted list.
export function togglePadded(padded, i) {
  const next = padded.includes(i) ? padded.filter((p) => p !== i) : [...padded, i];
  return next.sort((a, b) => a - b);
}

// The API's padding field: one flag per position, true = real token; null when nothing is padded.
export function paddingFlags(padded, seqLen) {
  const inRange = padded.filter((p) => p >= 0 && p < seqLen);
  if (inRange.length === 0) return null;
  return Array.from({ length: seqLen }, (_, i) => !inRange.includes(i));
}

// The page's padded list from the API's padding flags.
export function paddedFromFlags(flags) {
  return (flags || []).flatMap((real, i) => (real ? [] : [i]));
}

// Drop padding and blocked cells that fall outside a sequence of seqLen positions (keyLen key columns: a
// cross-attention source can be longer or shorter than the queries).
export function clampMasks(masks, seqLen, keyLen = seqLen) {
  return {
    ...masks,
    padded: (masks.padded || []).filter((p) => p >= 0 && p < seqLen),
    blocked: (masks.blocked || []).filter(([q, k]) => q >= 0 && k >= 0 && q < seqLen && k < keyLen),
  };
}

// The API's masks object for the page's masks, clamped to seqLen positions when the page knows it (0: it does not,
// and the server checks the positions).
export function masksRequest(masks, seqLen) {
  const m = seqLen > 0 ? clampMasks(masks, seqLen) : masks;
  const out = { causal: !!m.causal, window: m.window == null ? null : m.window, blocked: m.blocked || [] };
  // an empty list would still put a padding mask in force (the checks would name it): none is sent instead
  if (m.padded && m.padded.length) out.padded = [...m.padded];
  return out;
}

// What a recompute changed, for the status line and the outlines drawn on changed cells:
// cells that became masked or eligible, and the largest weight change over all heads of one layer.
export function diffResults(prev, next, layerIndex) {
  const none = { comparable: false, newlyMasked: [], newlyEligible: [], maxDelta: 0, where: null };
  if (!prev || !next || prev.model !== next.model) return none;
  if (prev.tokens.length !== next.tokens.length || prev.tokens.some((t, i) => t !== next.tokens[i])) return none;
  if (JSON.stringify(prev.source_tokens ?? null) !== JSON.stringify(next.source_tokens ?? null)) return none;
  const out = { ...none, comparable: true };
  const S = next.tokens.length;
  const K = next.eligible[0]?.length ?? S; // key columns: S, or S_k with cross-attention
  for (let q = 0; q < S; q++) {
    for (let k = 0; k < K; k++) {
      if (prev.eligible[q][k] && !next.eligible[q][k]) out.newlyMasked.push([q, k]);
      if (!prev.eligible[q][k] && next.eligible[q][k]) out.newlyEligible.push([q, k]);
    }
  }
  const pl = prev.layers.find((l) => l.index === layerIndex);
  const nl = next.layers.find((l) => l.index === layerIndex);
  if (!pl || !nl || pl.heads.length !== nl.heads.length) return out;
  nl.heads.forEach((h, hi) => {
    const a = pl.heads[hi].weights;
    const b = h.weights;
    if (!a || !b) return;
    for (let q = 0; q < S; q++) {
      for (let k = 0; k < K; k++) {
        const d = Math.abs(b[q][k] - a[q][k]);
        if (d > out.maxDelta) {
          out.maxDelta = d;
          out.where = { head: h.index, q, k };
        }
      }
    }
  });
  return out;
}

// The result's `pairs` ({total, causal?, window?, padding?, blocked?, eligible}) as lines: how many (query, key)
// pairs each mask in force leaves eligible on its own, then all of them together ("causal: 21 of 36 pairs").
export const PAIR_NAMES = ["causal", "window", "padding", "blocked"];
export function pairLines(pairs) {
  if (!pairs) return [];
  const lines = PAIR_NAMES.filter((n) => pairs[n] != null).map((n) => ({
    name: n,
    count: pairs[n],
    total: pairs.total,
    text: `${n}: ${pairs[n]} of ${pairs.total} pairs`,
  }));
  lines.push({
    name: "eligible",
    count: pairs.eligible,
    total: pairs.total,
    text: `${lines.length ? "all together" : "no mask"}: ${pairs.eligible} of ${pairs.total} pairs eligible`,
  });
  return lines;
}
