// The request bodies the page sends, built from its state: /api/attention, and the one-sequence bodies of every
// analysis (head types, top heads, perturb, intervene, compare, decode). Pure: no DOM, no fetch. A batch's and a
// cross-attention run's perturb bodies are perturbbodies.js's.

import { SMALL_MODEL_VALUES } from "./state.js";
import { bodyExtent, bodyFields, featureBody, oneSequence, replacedBody, reshapedBody, without } from "./features.js";

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
  const own = replacedBody(req, s, info); // a page feature's body instead (features.js): nothing reshapes it
  if (own) return own;
  return reshapedBody(req, s, info, seqLen); // a page feature's reshaping (features.js: a batch, a source)
}

// The attention request as one plain sequence (a page feature's `alone`, features.js: a batch becomes its item
// `which` on its own, a cross-attention run self-attention over its text), without the fields only /api/attention
// reads (a page feature's of reach "attention": every analysis computes without them), and with the view's classic
// bug (demo_bug), so that an analysis runs the code on screen.
export function singleRequest(attention, which = 0) {
  return oneSequence(without(attention, bodyFields("attention")), which);
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
export function asRun(attention) {
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
  const words = (t) =>
    String(t || "")
      .split(/\s+/)
      .filter(Boolean).length + 2; // a word a token, and two more
  const extent = bodyExtent(req, words); // a page feature's queries, keys and items (features.js)
  const S = seqLen || extent.queries || words(req.text);
  const K = extent.keys ?? S;
  const heads = req.options?.heads ?? info?.heads ?? 1;
  const layers = req.layer != null ? 1 : (info?.layers ?? 1);
  const kinds = (req.include || []).filter((k) => k === "scores" || k === "weights" || k === "value_norms").length;
  return layers * heads * S * K * kinds * (extent.items ?? 1);
}
