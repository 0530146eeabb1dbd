// Attention rollout and attention flow (Abnar & Zuidema 2020) beside the per-layer maps. Rollout: each layer's
// J_l = rownorm(fuse_h A_l + I) J_l-1, row q the share of position q's state after layer l traced back to each
// input position (every path, multiplied along the way and added up). Flow: the same fused maps as pipes, F_l[q, k]
// the maximum flow from q after layer l down to input k, rows normalised (held to the narrowest pipe on the way).
// /api/attention computes either (include rollout or attention_flow, options `rollout` {heads: mean | max | min,
// residual}); this panel asks for every layer's map once shown, and draws one heatmap per layer. Where the server
// refuses (a cross-attention source; flow past its positions or its work limit) its 422 says why, shown here; the
// method stays choosable, so a refused flow can go back to rollout. The panel's one declaration (`panel`, read by
// registry.js) on top of pure helpers.

import { PALETTES, VIRIDIS } from "./colors.js";
import { node, within } from "./dom.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { act } from "./actions.js";
import { pos } from "./positions.js";

export const FUSES = ["mean", "max", "min"];
export const METHODS = ["rollout", "flow"];
// method -> the include that asks for it and the layer field its maps come back in
export const METHOD_FIELD = { rollout: "rollout", flow: "attention_flow" };
export const ROLLOUT_PX = 300; // each layer's map at most this wide

// The link's form of the setting: "mean.1" (fuse, residual on: rollout), "max.0", "mean.1.flow" (attention flow).
// A link without the method (every link before flow) is rollout; rollout is written without it.
export function encodeRollout(v) {
  return `${v.heads}.${v.residual ? 1 : 0}${methodOf(v) === "flow" ? ".flow" : ""}`;
}

export function decodeRollout(raw) {
  const m = /^(mean|max|min)\.([01])(?:\.(rollout|flow))?$/.exec(raw || "");
  return m ? { heads: m[1], residual: m[2] === "1", method: m[3] || "rollout" } : null;
}

export function methodOf(v) {
  return v?.method === "flow" ? "flow" : "rollout";
}

// The /api/attention body: the run on screen (its batch, source, classic bug too) asking only for the rollout (or
// the attention flow) of every layer, with the panel's options. Sinks are a view of the weights, which this asks
// none of.
export function rolloutRequest(attention, value) {
  if (!attention || !value) return null;
  const { include: _i, layer: _l, precision: _p, sinks: _k, ...rest } = attention;
  return {
    ...rest,
    include: [METHOD_FIELD[methodOf(value)]],
    rollout: { heads: value.heads, residual: value.residual },
  };
}

// Each layer's J (or F) (S x S) from the answer: a batch's item `item`. `method` names the field read.
export function rolloutMaps(result, item = 0, method = "rollout") {
  const field = METHOD_FIELD[method] || "rollout";
  return result.layers.map((l) => {
    const m = l[field];
    return { layer: l.index, matrix: result.config?.batch ? m[Math.min(item, m.length - 1)] : m };
  });
}

// The input position row q draws most from (the largest J_l[q][k]).
export function topSource(row) {
  let best = 0;
  for (let k = 1; k < row.length; k++) if (row[k] > row[best]) best = k;
  return best;
}

const WORDS = {
  rollout: { name: "Rollout", share: "rollout share", verb: "roll this run out" },
  flow: { name: "Attention flow", share: "flow share", verb: "compute attention flow for this run" },
};

function drawLayer(map, tokens, palette, method) {
  const words = WORDS[method];
  const S = map.matrix.length;
  const cell = Math.max(1, Math.min(22, Math.floor(ROLLOUT_PX / Math.max(S, 1))));
  const L = layoutFor(S, { cell, labels: cell >= 7, maxLabel: 6 });
  const fig = node("figure", { className: "head-card rollout-card", tabIndex: 0 });
  fig.setAttribute("data-testid", "rollout-map");
  fig.dataset.layer = String(map.layer);
  const last = S - 1;
  const src = topSource(map.matrix[last]);
  fig.setAttribute(
    "aria-label",
    `${words.name} after layer ${map.layer}: position ${pos(last)} draws most (${map.matrix[last][src].toFixed(2)}) from input position ${pos(src)}`,
  );
  const cap = node("figcaption");
  cap.append(
    node("strong", {}, `after L${map.layer}`),
    node("span", { className: "meta" }, `last ← ${pos(src)} (${map.matrix[last][src].toFixed(2)})`),
  );
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(cap, canvas);
  const eligible = map.matrix.map((row) => Array.from(row, () => true));
  const scale = { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: words.share };
  drawHeatmap(sizeCanvas(canvas, L), { matrix: map.matrix, eligible, tokens, scale, layout: L });
  fig.drawn = map.matrix.map((row) => Array.from(row)); // what the image shows, for tests
  return fig;
}

export const panel = {
  analysis: "attention",
  words: "attention rollout",
  setting: { key: "rollout", encode: encodeRollout, decode: decodeRollout },
  request: (s, value) => rolloutRequest(s.run.request, value),
  keep: true,
  deps: (s) => [s.run.result, s.ui.palette, s.ui.item],
  render(root, slot, s) {
    const part = within(root);
    const value = s.ui.rollout;
    const method = methodOf(value);
    const refused = slot.status === "error";
    part("rollout-on").checked = !!value;
    part("rollout-method").value = method;
    part("rollout-fuse").value = value?.heads || "mean";
    part("rollout-resid").checked = value ? value.residual : true;
    // the server's refusal holds for this input: the options cannot change it (turning the panel off can, and so can
    // the method: a flow refused for its length or its work leaves rollout to choose)
    part("rollout-method").disabled = !value;
    part("rollout-fuse").disabled = !value || refused;
    part("rollout-resid").disabled = !value || refused;
    const reason = part("rollout-reason");
    reason.hidden = !refused;
    reason.textContent = refused ? `The server cannot ${WORDS[method].verb}: ${slot.message}` : "";
    reason.dataset.method = refused ? method : "";
    part("rollout-status").textContent =
      slot.status === "loading" ? (method === "flow" ? "computing the flow…" : "rolling out…") : "";
    const grid = part("rollout-grid");
    const r = refused || !value ? null : slot.result;
    if (!r) {
      grid.dataset.drawn = "";
      grid.replaceChildren();
      return;
    }
    // the answer kept while the next loads may be the other method's: its maps stay until this method's arrive
    if (!r.layers.every((l) => l[METHOD_FIELD[method]] != null)) return;
    grid.dataset.drawn = encodeRollout(value);
    const tokens = r.tokens;
    grid.replaceChildren(...rolloutMaps(r, s.ui.item, method).map((m) => drawLayer(m, tokens, s.ui.palette, method)));
  },
  bind(root, { dispatch, getState }) {
    const part = within(root);
    const set = (fields) => {
      const now = getState().ui.rollout || { heads: "mean", residual: true, method: "rollout" };
      dispatch(act.panelSet("rollout", { ...now, ...fields }));
    };
    part("rollout-on").addEventListener("change", (e) => {
      if (e.target.checked) set({});
      else dispatch(act.panelSet("rollout", null));
    });
    part("rollout-method").addEventListener("change", (e) =>
      set({ method: METHODS.includes(e.target.value) ? e.target.value : "rollout" }),
    );
    part("rollout-fuse").addEventListener("change", (e) =>
      set({ heads: FUSES.includes(e.target.value) ? e.target.value : "mean" }),
    );
    part("rollout-resid").addEventListener("change", (e) => set({ residual: e.target.checked }));
  },
};
