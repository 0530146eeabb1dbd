// The request bodies the page sends, built from its state: /api/attention, and the one-sequence bodies of every
// analysis (head types, top heads, perturb, intervene, compare, decode). Pure: no DOM, no fetch.

import { can } from "./capabilities.js";
import { paddingFlags, splitTokens } from "./masks.js";
import { SMALL_MODEL_VALUES } from "./state.js";
import { bodyFields, featureBody, replacedBody, without } from "./features.js";

// The batch textarea's lines that hold text: one item each.
export function batchTexts(raw) {
  return (raw || "")
    .split("\n")
    .map((t) => t.trim())
    .filter(Boolean);
}

// The POST /api/attention body for this state over seqLen positions.
export function buildRequest(s, info, seqLen) {
  const req = {
    model: s.model,
    text: s.text,
    include: ["scores", "weights", "stats", "output"],
  };
  const opts = Object.fromEntries(Object.entries(s.options || {}).filter(([, v]) => v !== null && v !== undefined));
  if (Object.keys(opts).length) req.options = opts;
  if (info && info.layers > 1 && s.layer !== "all") req.layer = s.layer;
  const width = s.options?.d_model ?? info?.d_model ?? 0;
  if (seqLen * width <= SMALL_MODEL_VALUES && (info?.layers ?? 1) === 1) {
    // contexts and each head's Q, K, V, for checking by hand
    req.include.push("contexts", "qkv");
  }
  // the moved view: what each key moves (value_norms) and what each head adds to the output per query
  if (s.view === "moved") req.include.push("value_norms", "head_contributions");
  Object.assign(req, featureBody(s, info, seqLen)); // the page features' fields (features.js): singleRequest and
  // claimRequest drop them by their reach
  const own = replacedBody(req, s, info); // a page feature's body instead (features.js): no batch, no source
  if (own) return own;
  const texts = batchOf(s, info);
  const source = sourceOf(s, info);
  if (texts) {
    // a batch replaces the text; each item's padding comes from its length
    delete req.text;
    req.texts = texts;
    const { padded: _padded, ...rest } = req.masks;
    req.masks = rest;
  } else if (source) {
    // keys and values from the source: only blocked cells and the source's own padding apply
    const keys = splitTokens(source).length;
    req.source = { text: source };
    const flags = paddingFlags(s.sourcePadded || [], keys);
    if (flags) req.source.padding = flags;
    req.masks = { blocked: (s.masks.blocked || []).filter(([q, k]) => q < seqLen && k < keys) };
  }
  return req;
}

// The batch's texts when this state runs one (a line or more on a model whose /api/models entry `info` says it
// batches), else null.
export function batchOf(s, info) {
  const texts = batchTexts(s.batch);
  return texts.length && can(info, "batches") ? texts : null;
}

// The cross-attention source text when this state runs one (on a model whose entry says cross_attention), else
// null. A batch wins over a source.
export function sourceOf(s, info) {
  const t = (s.source || "").trim();
  return t && can(info, "cross_attention") && !batchOf(s, info) ? t : null;
}

// The attention request as one plain sequence: without a batch or a cross-attention source, nor the fields only
// /api/attention reads (a page feature's of reach "attention", features.js: every analysis computes without them),
// and with the view's classic bug (demo_bug), so that an analysis runs the code on screen. A batch becomes its item
// `item` on its own; a cross-attention run becomes self-attention over its text.
export function singleRequest(attention, item = 0) {
  const { texts: _texts, source: _source, ...out } = without(attention, bodyFields("attention"));
  if (attention.texts) out.text = attention.texts[Math.min(item, attention.texts.length - 1)];
  if (attention.source || attention.texts) {
    const { padding: _p, padded: _d, ...masks } = attention.masks || {};
    out.masks = { causal: false, window: null, blocked: [], ...masks };
    if (attention.source) out.masks.blocked = [];
  }
  return out;
}

// The attention request as the claims run it (perturb, the pinned side of a comparison): one sequence with its
// classic bug, without what only shapes an answer of matrices (include, layer; a page feature's fields of reach
// "weights", a view of the weights).
export function claimRequest(attention) {
  const { include: _include, layer: _layer, ...rest } = singleRequest(attention);
  return without(rest, bodyFields("weights"));
}

// The whole attention request without what only its own answer's matrices read (include, layer, a page feature's
// fields: features.js): the run a perturbation of a batch or a source repeats.
function asRun(attention) {
  const { include: _i, layer: _l, ...rest } = attention;
  return without(rest, [...bodyFields("attention"), ...bodyFields("weights")]);
}

// The POST /api/heads body: the claims' body without the fields of reach "claims" (features.js: the classic bug).
// Head types, top heads, decode, QK attribution and patching run the correct code whatever the view shows: their
// endpoints take none, and each panel says so on screen while the view runs one (bugs.js correctCodeNote).
export function headTypesRequest(attention) {
  return without(claimRequest(attention), bodyFields("claims"));
}

// The POST /api/decode body: the sequence, masks and options, decoded one position at a time; with `gen`
// ({tokens, sampling, seed}), that many tokens generated after it (the seed only for sampling).
export function decodeRequest(attention, gen = null) {
  const body = headTypesRequest(attention);
  if (!gen) return body;
  const generate = {
    tokens: gen.tokens,
    sampling: gen.sampling,
    ...(gen.sampling === "sample" ? { seed: gen.seed } : {}),
  };
  return { ...body, generate };
}

// The POST /api/heads/top body: the same, plus the pair.
export function topHeadsRequest(attention, pair, k) {
  return { ...headTypesRequest(attention), query: pair[0], key: pair[1], k };
}

// The POST /api/perturb body: what to run (the attention request without include or layer, which it refuses),
// the position, and the change; with the view's demo_bug, so the claim is tested on the code the view shows.
export function perturbRequest(attention, position, perturb) {
  return { ...claimRequest(attention), position, change: changeOf(perturb) };
}

// The POST /api/perturb body for a batch: the batch as run (texts, its masks, its classic bug: each item's padding
// is the server's), `item` the item whose `position` changes; the answer adds the checks `batch` (every other item
// exactly unchanged) and `padding_invariance` (the item batched equals it alone).
export function perturbBatchRequest(attention, item, position, perturb) {
  const { source: _s, text: _t, ...rest } = asRun(attention);
  return { ...rest, item, position, change: changeOf(perturb) };
}

// The POST /api/perturb body for a cross-attention run: the run as sent (its source, the source's padding, its
// blocked cells, its classic bug), `side` "query" (position is a query) or "source" (a source position); the answer
// checks `source_boundary`.
export function perturbSourceRequest(attention, side, position, perturb) {
  const { texts: _t, ...rest } = asRun(attention);
  const onSource = side === "source";
  // the query side has no value vector of its own (the menu shows direction there): send what the menu shows
  const shown = !onSource && perturb.kind === "value" ? { ...perturb, kind: "direction" } : perturb;
  return { ...rest, side: onSource ? "source" : "query", position, change: changeOf(shown) };
}

// The perturbation as the body's `change`.
export function changeOf(perturb) {
  return perturb.kind === "token"
    ? { kind: "token", token: perturb.token }
    : perturb.kind === "shift"
      ? { kind: "shift", amount: perturb.amount }
      : perturb.kind === "value"
        ? { kind: "value", norm: perturb.amount > 0 ? perturb.amount : 1 }
        : { kind: "direction", norm: perturb.amount > 0 ? perturb.amount : 1 };
}

// The POST /api/intervene body: the attention request (its include and layer shape before/after) plus the
// interventions, with the view's classic bug.
export function interveneRequest(attention, ablate, edits, topK = 5) {
  const req = { ...singleRequest(attention), top_k: topK };
  if (ablate.length) req.ablate = ablate.map(({ layer, head, mode }) => ({ layer, head, mode }));
  if (edits.length)
    req.edit = edits.map(({ layer, head, query, key, weight }) => ({ layer, head, query, key, weight }));
  return req;
}

// The body pinned as A: what was run (its classic bug too), without what only shapes the answer.
export function pinRequest(attention) {
  return claimRequest(attention);
}

// The POST /api/compare body: A (pinned) and B (now), both asked for weights only, over `layer` when one is shown.
export function compareRequest(a, attention, layer) {
  const shape = (body) => {
    const { include: _i, layer: _l, ...rest } = singleRequest(body);
    const out = { ...rest, include: ["weights"] };
    if (layer != null) out.layer = layer;
    return out;
  };
  return { a: shape(a), b: shape(attention) };
}

// What sets the size of an /api/attention result: the request without its layer and include, nor a page feature's
// fields that change no answer's size (features.js: those of reach "weights", "claims" and "every": the masks among
// them). Two requests with the same key have the same tokens, heads and layers.
export function sizeKey(req) {
  const { layer: _l, include: _i, precision: _p, ...rest } = req;
  return JSON.stringify(without(rest, ["weights", "claims", "every"].flatMap(bodyFields)));
}

// About how many matrix values (scores and weights) the result of `req` holds: layers asked x heads x S x S_k x
// items. `seqLen` is the page's count of positions, 0 when it does not know (a new text on a WordPiece model):
// then one token a word and two more, which is at most the real count.
export function resultValues(req, info, seqLen) {
  const words = (t) => splitTokens(t || "").length + 2;
  const S = seqLen || (req.texts ? Math.max(...req.texts.map(words)) : req.x ? req.x.length : words(req.text));
  const K = req.source ? splitTokens(req.source.text || "").length : S;
  const heads = req.options?.heads ?? info?.heads ?? 1;
  const layers = req.layer != null ? 1 : (info?.layers ?? 1);
  const kinds = (req.include || []).filter((k) => k === "scores" || k === "weights" || k === "value_norms").length;
  return layers * heads * S * K * kinds * (req.texts ? req.texts.length : 1);
}
