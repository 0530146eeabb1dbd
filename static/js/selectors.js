// Selectors: what the views draw and the effects ask, computed from the store's state (store.js) and never stored
// in it. Pure functions of the state; selectView is memoised per state.run and ui.

import { drawnEligibility } from "./bugs.js";
import { matrixKey, maxAbsEligible, quantileAbsEligible, scaleFor } from "./colors.js";
import { clampMasks, paddedFromFlags } from "./masks.js";
import { singleRequest } from "./requests.js";
import { batchOf } from "./sourcebatch.js";
import { pinBody } from "./pin.js";

export function modelInfo(s, name = s.ui.model) {
  return s.models.find((m) => m.name === name) || null;
}

// The body every one-sequence endpoint runs: the current request without a batch, a source or a bug.
export function singleOf(s) {
  return s.run.request ? singleRequest(s.run.request, s.ui.item) : null;
}

// The batch item the claims panel changes: its own choice, else the item the views show; null without a batch.
export function perturbItem(s) {
  const B = s.run.full?.config?.batch;
  if (!B || !s.run.request?.texts) return null;
  return Math.max(0, Math.min(B - 1, s.ui.perturb.item ?? s.ui.item ?? 0));
}

// The side of a cross-attention run the claims panel changes: "query" or "source"; null without a source.
export function perturbSide(s) {
  if (!s.run.request?.source || !s.run.result?.source_tokens) return null;
  return s.ui.perturb.side === "source" ? "source" : "query";
}

// The position the claims panel changes when none is chosen. A query: the retrieval diagram's. A source position:
// the first the source marks padding (every query's cell to it is masked, so source_boundary has queries to
// protect), else 0.
export function defaultPerturbPosition(s) {
  if (perturbSide(s) !== "source") return selectView(s).query;
  return paddedFromFlags(s.run.request.source.padding)[0] ?? 0;
}

// The body "Pin as A" would pin now (pin.js); null before a run.
export function pinRequestOf(s) {
  return s.run.request ? pinBody(singleOf(s)) : null;
}

// Whether the result holds what the controls show: always, except while a streamed run's other layers are on their
// way and the layer shown (the large head's, the Layer menu's, or every layer) is one of them.
export function shownHeld(s) {
  const r = s.run.result;
  if (!r) return false;
  if (!s.run.rest) return true;
  if (s.ui.layer === "all") return r.layers.length === r.config.n_layers;
  const want = s.ui.focus ? s.ui.focus[0] : s.ui.layer;
  return r.layers.some((l) => l.index === want);
}

// What a view of the layer shown draws from (its deps): the result as first drawn, which the other layers of a
// streamed run leave as it is, and the layer objects it shows. So the layers that come after it redraw only the
// views that show them.
export function shownDeps(s) {
  const r = s.run.result;
  if (!r) return [null];
  const ui = s.ui;
  const shown = (l) => ui.layer === "all" || l.index === ui.layer || (ui.focus && l.index === ui.focus[0]);
  return [s.run.base ?? r, ...r.layers.filter(shown)];
}

export function multiLayer(s) {
  return !!s.run.result && s.run.result.config.n_layers > 1;
}

// Masks drawn and explained, from the result: never re-derived on the page.
function resultMasks(r, request) {
  if (r.source_tokens) {
    return { causal: false, window: null, padded: paddedFromFlags(request?.source?.padding), blocked: r.masks.blocked };
  }
  return {
    causal: r.masks.causal,
    window: r.masks.window,
    padded: paddedFromFlags(r.masks.padding),
    blocked: r.masks.blocked,
  };
}

// Tokens a tokenizer adds around the text, by how tokenizers spell them: [CLS] [SEP] [PAD] (BERT), <s> </s> <pad>
// (RoBERTa, LLaMA), <|endoftext|> (GPT-2).
const SPECIAL_TOKEN = /^(\[[A-Z]+\]|<\/?[a-z]+>|<\|[^|]+\|>)$/;

export function isSpecialToken(token) {
  return SPECIAL_TOKEN.test(String(token));
}

// The query the retrieval diagram (and the perturbation, and the large head's hover row) opens on when the person
// has chosen none: the last real query, the position a learner reads first. In a decoder it is the one predicting
// what comes next; in an encoder the text's last word, not the [SEP] after it; never a padding position, a token
// the tokenizer added or a row with no eligible key (all masked). Falls back to the last row with an eligible key,
// then to the last position.
export function defaultQuery(tokens, eligible, padded = []) {
  const pad = new Set(padded);
  const seesAKey = (q) => {
    const row = eligible?.[q];
    if (!row) return true;
    for (let k = 0; k < row.length; k++) if (row[k]) return true;
    return false;
  };
  for (let q = tokens.length - 1; q >= 0; q--) if (!pad.has(q) && !isSpecialToken(tokens[q]) && seesAKey(q)) return q;
  for (let q = tokens.length - 1; q >= 0; q--) if (seesAKey(q)) return q;
  return tokens.length - 1;
}

export const PAGE_SIZE = 24; // heads on a page of the heads grid

// The heads on a page: [{layer, head}] in layer-major order; a page past the last is the last.
export function pageOf(all, page, size = PAGE_SIZE) {
  const pages = Math.max(1, Math.ceil(all.length / size));
  const p = Math.min(Math.max(0, page), pages - 1);
  return { page: p, pages, items: all.slice(p * size, (p + 1) * size) };
}

// The layers of result `r` the views show for ui: every one, or the one chosen (the first, where `r` lacks it).
export function shownLayers(r, ui) {
  const layers = ui.layer === "all" ? r.layers : r.layers.filter((l) => l.index === ui.layer);
  return layers.length ? layers : r.layers.slice(0, 1);
}

// The heads grid's page of ui with result `r`: ui.page, or the last page where fewer heads are shown than it needs.
export function pageIn(r, ui) {
  const heads = shownLayers(r, ui).flatMap((l) => l.heads);
  return pageOf(heads, ui.page).page;
}

const viewCache = new WeakMap(); // state.run -> ui -> view: a pure function's memo, cleared with the state it reads

// Everything the matrix views draw: the heads shown, the large head, the scale, the query. Pure in the state.
export function selectView(s) {
  const r = s.run.result;
  if (!r) return null;
  let byUi = viewCache.get(s.run);
  if (!byUi) {
    byUi = new WeakMap();
    viewCache.set(s.run, byUi);
  }
  const hit = byUi.get(s.ui);
  if (hit) return hit;
  const ui = s.ui;
  const shown = shownLayers(r, ui);
  const heads = shown.flatMap((l) => l.heads.map((head) => ({ layer: l.index, head })));
  // one layer shown: the eligibility it attended under (a local layer's own window narrows the answer's grid)
  const eligible = (shown.length === 1 && shown[0].eligible) || r.eligible;
  const allHeads = heads.map((h) => h.head);
  // the scores' range: only the scores view has a use for it (a scan of every head's scores, widened)
  // the moved view until its value norms arrive (a result asked for before it was chosen has none) draws weights
  const shownView = ui.view === "moved" && allHeads[0]?.value_norms == null ? "weights" : ui.view;
  const maxAbs = shownView === "weights" ? 0 : maxAbsEligible(allHeads, eligible, matrixKey(shownView));
  const wanted = ui.focus && r.layers.find((l) => l.index === ui.focus[0]);
  const focus = wanted ? ui.focus : [heads[0].layer, heads[0].head.index];
  const focusLayer = wanted || shown[0];
  const diff = s.run.diff && s.run.diff.comparable ? s.run.diff : null;
  const cross = !!r.source_tokens;
  const masks = resultMasks(r, s.run.request);
  const view = {
    tokens: r.tokens,
    keyTokens: cross ? r.source_tokens : null,
    item: r.item ?? 0,
    eligible: drawnEligibility(eligible, r.demo_bug?.name),
    reasons: r.reasons || null,
    masks,
    blocked: r.masks.blocked,
    view: shownView,
    palette: ui.palette,
    scoreScale: ui.scoreScale,
    multiLayer: r.config.n_layers > 1,
    heads,
    page: ui.page,
    nHeads: r.config.n_heads,
    kvGroups: r.config.n_kv_heads,
    config: r.config,
    maxAbs,
    clipAbs: ui.view === "scores" && ui.scoreScale === "clip" ? quantileAbsEligible(allHeads, eligible) : maxAbs,
    scale: scaleFor(shownView, ui.palette, maxAbs),
    weightScale: scaleFor("weights", ui.palette, maxAbs),
    changed: diff ? [...diff.newlyMasked, ...diff.newlyEligible] : [],
    focus,
    // a cross-attention source's padding is of keys, not of these queries
    query: ui.query ?? defaultQuery(r.tokens, eligible, cross ? [] : masks.padded),
    focusLayer,
    focusHead: focusLayer.heads[focus[1]] || focusLayer.heads[0],
    layer: focusLayer,
    pair: ui.pair,
    ablate: ui.ablate,
    bug: r.demo_bug?.name,
    hidden: r.sinks ? Array.from(r.sinks.hidden) : [], // the key columns the sinks view hides (0 in weights)
    renormalised: r.sinks ? r.sinks.renormalised : true, // whether each row's weight was spread over the keys left
  };
  byUi.set(s.ui, view);
  return view;
}

// The padding positions the token chips show: the result's for a batch item, else what the person set.
export function tokenMasks(s) {
  const v = selectView(s);
  if (!v) return { padded: [] };
  if (s.run.result.config.batch) return v.masks;
  if (v.keyTokens) return { padded: [] };
  return s.ui.masks;
}

// Masks clamped to a sequence of S positions (and K source positions) before they are sent.
export function clampedMasks(ui, S, K = S) {
  return S > 0 ? clampMasks(ui.masks, S, K) : ui.masks;
}

export function sameInput(s) {
  const r = s.run.result;
  const req = s.run.request;
  if (!r || !req) return false;
  return (
    r.model === s.ui.model && (req.text ?? null) === (s.ui.text ?? null) && !batchOf(s.ui, modelInfo(s)) && !req.texts
  );
}
