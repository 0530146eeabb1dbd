// Masks as the page holds them, and the pure helpers that edit them. What a mask means (which cells it excludes) is
// the server's alone: a result carries `eligible` and, per mask, `reasons`; the page never works it out.
// Rows are query positions, columns key positions; true = eligible, the same reading as the API.
// The page keeps padding as a sorted list of padded positions (the API's `masks.padded`), so it survives a change
// of text and needs no token count. `feature` (at the end) is the masks' one declaration (features.js): their
// setting in ui and the link, a model's own masks, the actions of the mask controls (maskcontrols.js), the tokens
// and the grids, their reducer cases and the body's `masks`.

import { pos } from "./positions.js";

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
  const padded = (masks.padded || []).filter((p) => p >= 0 && p < seqLen);
  const blocked = (masks.blocked || []).filter(([q, k]) => q >= 0 && k >= 0 && q < seqLen && k < keyLen);
  // nothing clamped: the same object, so that a run's answer (which settles the masks it was sent) changes no mask
  // of the state (workspaces.js brings the eligibility grid into sight when they change)
  if (masks.padded?.length === padded.length && masks.blocked?.length === blocked.length) return masks;
  return { ...masks, padded, blocked };
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

// ---- the masks as a page feature (features.js) ------------------------------------------------------------------

export function defaultMasks() {
  return { causal: false, window: null, padded: [], blocked: [] };
}

// The masks a model opens with: its /api/models entry's default_masks, else none.
export function modelMasks(info) {
  const dm = info?.default_masks;
  return dm
    ? { causal: !!dm.causal, window: dm.window ?? null, padded: paddedFromFlags(dm.padding), blocked: dm.blocked || [] }
    : defaultMasks();
}

const LINK_KEYS = ["causal", "window", "pad", "block"];

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// The masks of a link's URLSearchParams `p`; null when it sets none (a bare "?m=induction": the model's own apply).
// Values it cannot read are left out.
export function readMasks(p) {
  if (!LINK_KEYS.some((k) => p.has(k))) return null;
  const w = whole(p.get("window"));
  return {
    causal: p.get("causal") === "1",
    window: w != null && w >= 1 ? w : null,
    padded: (p.get("pad") || "")
      .split(",")
      .map(whole)
      .filter((v) => v != null && v >= 0)
      .sort((a, b) => a - b),
    blocked: (p.get("block") || "")
      .split(",")
      .map((c) => c.split("-").map(whole))
      .filter((c) => c.length === 2 && c.every((v) => v != null && v >= 0)),
  };
}

const actions = {
  causalSet: (on) => ({ type: "causalSet", on }),
  windowSet: (on, size) => ({ type: "windowSet", on, size }),
  blockedCleared: () => ({ type: "blockedCleared" }),
  cellToggled: (q, k, where) => ({ type: "cellToggled", q, k, where }), // a grid's cell blocked or open again
  tokenPadded: (i, token) => ({ type: "tokenPadded", i, token }), // a token marked padding or real again
};

const withMasks = (s, fields) => ({ masks: { ...s.ui.masks, ...fields } });

export const feature = {
  ui: { masks: defaultMasks() },
  forModel: (info) => ({ masks: modelMasks(info) }),
  link: {
    write(ui, p) {
      const m = ui.masks;
      p.set("causal", m.causal ? "1" : "0"); // always written: a link without it gets the model's default masks
      if (m.window != null) p.set("window", String(m.window));
      if (m.padded.length) p.set("pad", m.padded.join(","));
      if (m.blocked.length) p.set("block", m.blocked.map(([q, k]) => `${q}-${k}`).join(","));
    },
    read: (p) => ({ masks: readMasks(p) }),
  },
  keep: () => ({}), // the new model's own masks
  actions,
  reduce: {
    causalSet: (s, a, { runWith }) =>
      runWith(s, withMasks(s, { causal: a.on }), `causal ${a.on ? "on" : "off"}`, "mask-causal"),
    windowSet: (s, a, { runWith }) => {
      const window = a.on ? a.size : null;
      return runWith(s, withMasks(s, { window }), a.on ? `window ${window}` : "window off", "mask-window");
    },
    blockedCleared: (s, _a, { runWith }) =>
      runWith(s, withMasks(s, { blocked: [] }), "blocked cells cleared", "blocked-clear"),
    // toggling a cell moves the grid's roving tab stop (the store's cursor) there
    cellToggled: (s, a, { runWith }) => {
      const was = isBlocked(s.ui.masks.blocked, a.q, a.k);
      const blocked = toggleBlocked(s.ui.masks.blocked, a.q, a.k);
      const words = `cell query ${pos(a.q)} → key ${pos(a.k)} ${was ? "unblocked" : "blocked"}`;
      return { ...runWith(s, withMasks(s, { blocked }), words, a.where), cursor: [a.q, a.k] };
    },
    tokenPadded: (s, a, { runWith }) => {
      const padded = togglePadded(s.ui.masks.padded, a.i);
      const on = padded.includes(a.i);
      const words = `position ${pos(a.i)} “${a.token ?? pos(a.i)}” ${on ? "marked padding" : "is a real token again"}`;
      return runWith(s, withMasks(s, { padded }), words, "tokens");
    },
  },
  request: (ui, _info, seqLen) => ({ masks: masksRequest(ui.masks, seqLen) }),
  body: ["masks"],
  reach: "every", // every analysis runs under the masks on screen; they change no answer's size
  errors: { "masks.window": "mask-window", "masks.causal": "mask-causal" },
};
