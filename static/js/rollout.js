// Attention rollout (Abnar & Zuidema 2020) beside the per-layer maps: each layer's J_l = rownorm(fuse_h A_l + I)
// J_l-1, row q the share of position q's state after layer l traced back to each input position. /api/attention
// computes it (include rollout, options `rollout` {heads: mean | max | min, residual}); this panel asks for every
// layer's J once shown, and draws one heatmap per layer. Where the server refuses (a cross-attention source: the
// keys are another sequence) its 422 says why, shown here with the controls disabled. The panel's one declaration
// (`panel`, read by registry.js) on top of pure helpers.

import { PALETTES, VIRIDIS } from "./colors.js";
import { node } from "./dom.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { act } from "./actions.js";

export const FUSES = ["mean", "max", "min"];
export const ROLLOUT_PX = 300; // each layer's map at most this wide

// The link's form of the setting: "mean.1" (fuse, residual on), "max.0".
export function encodeRollout(v) {
  return `${v.heads}.${v.residual ? 1 : 0}`;
}

export function decodeRollout(raw) {
  const m = /^(mean|max|min)\.([01])$/.exec(raw || "");
  return m ? { heads: m[1], residual: m[2] === "1" } : null;
}

// The /api/attention body: the run on screen (its batch, source, classic bug too) asking only for the rollout of
// every layer, with the panel's options. Sinks are a view of the weights, which this asks none of.
export function rolloutRequest(attention, value) {
  if (!attention || !value) return null;
  const { include: _i, layer: _l, precision: _p, sinks: _k, ...rest } = attention;
  return { ...rest, include: ["rollout"], rollout: { heads: value.heads, residual: value.residual } };
}

// Each layer's J (S x S) from the answer: a batch's item `item`.
export function rolloutMaps(result, item = 0) {
  return result.layers.map((l) => ({
    layer: l.index,
    matrix: result.config?.batch ? l.rollout[Math.min(item, l.rollout.length - 1)] : l.rollout,
  }));
}

// The input position row q draws most from (the largest J_l[q][k]).
export function topSource(row) {
  let best = 0;
  for (let k = 1; k < row.length; k++) if (row[k] > row[best]) best = k;
  return best;
}

const $ = (id) => document.getElementById(id);

function drawLayer(map, tokens, palette) {
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
    `Rollout after layer ${map.layer}: position ${last} draws most (${map.matrix[last][src].toFixed(2)}) from input position ${src}`,
  );
  const cap = node("figcaption");
  cap.append(node("strong", {}, `after L${map.layer}`), node("span", { className: "meta" }, `last ← ${src} (${map.matrix[last][src].toFixed(2)})`));
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(cap, canvas);
  const eligible = map.matrix.map((row) => Array.from(row, () => true));
  const scale = { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: "rollout share" };
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
    const value = s.ui.rollout;
    const refused = slot.status === "error";
    $("rollout-on").checked = !!value;
    $("rollout-fuse").value = value?.heads || "mean";
    $("rollout-resid").checked = value ? value.residual : true;
    // the server's refusal holds for this input: the options cannot change it (turning rollout off can)
    $("rollout-fuse").disabled = !value || refused;
    $("rollout-resid").disabled = !value || refused;
    const reason = $("rollout-reason");
    reason.hidden = !refused;
    reason.textContent = refused ? `The server cannot roll this run out: ${slot.message}` : "";
    $("rollout-status").textContent = slot.status === "loading" ? "rolling out…" : "";
    const grid = $("rollout-grid");
    const r = refused || !value ? null : slot.result;
    grid.dataset.drawn = r ? encodeRollout(value) : "";
    if (!r) {
      grid.replaceChildren();
      return;
    }
    const tokens = r.tokens;
    grid.replaceChildren(...rolloutMaps(r, s.ui.item).map((m) => drawLayer(m, tokens, s.ui.palette)));
  },
  bind(root, { dispatch, getState }) {
    const set = (fields) => {
      const now = getState().ui.rollout || { heads: "mean", residual: true };
      dispatch(act.panelSet("rollout", { ...now, ...fields }));
    };
    $("rollout-on").addEventListener("change", (e) => {
      if (e.target.checked) set({});
      else dispatch(act.panelSet("rollout", null));
    });
    $("rollout-fuse").addEventListener("change", (e) => set({ heads: FUSES.includes(e.target.value) ? e.target.value : "mean" }));
    $("rollout-resid").addEventListener("change", (e) => set({ residual: e.target.checked }));
  },
};
