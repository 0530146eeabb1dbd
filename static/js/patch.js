// Activation patching (POST /api/patch): corrupt one token, then run the corrupted input once per cell with one
// activation taken from the clean run, and draw the share of the clean-corrupted difference each cell recovers.
// Residual, attention-out and MLP-out hooks give a layer x position grid, z and pattern a layer x head grid. The
// metric is the clean tokens' next-token loss for a model that predicts tokens, else the output's distance from
// the clean output. The panel's one declaration (`panel`, read by registry.js) on top of pure helpers.

import { act } from "./actions.js";
import { can } from "./capabilities.js";
import { plotlyTheme } from "./colors.js";
import { node } from "./dom.js";
import { plotlyText } from "./focuscells.js";
import { pieceText } from "./piece.js";
import { PLOT_CONFIG } from "./plotly.js";
import { BY_POSITION, bindGrid, cellCompareRequest, cellRunRequest, cursorShape, renderCell } from "./patchcell.js";
import { encodeState } from "./state.js";
import { headTypesRequest } from "./requests.js";
import { modelInfo, singleOf } from "./selectors.js";
import { pos } from "./positions.js";

export const HOOKS = {
  resid_pre: "residual stream entering the layer (layer × position)",
  attn_out: "attention output (layer × position)",
  mlp_out: "feed-forward output (layer × position)",
  z: "each head's contexts, z (layer × head)",
  pattern: "each head's weights, the pattern (layer × head)",
};
export { BY_POSITION };

// The link's form of the setting: position, hook and the replacement token ("2.z.moon"), and the grid's cell opened
// as "@LAYER.COLUMN" ("2.z.moon@1.3"; the token is URI-encoded, so it holds no "@").
export function encodePatch(v) {
  const cell = v.cell ? `@${v.cell[0]}.${v.cell[1]}` : "";
  return `${v.position}.${v.hook}.${encodeURIComponent(v.token)}${cell}`;
}

export function decodePatch(raw) {
  const m = /^(\d+)\.([a-z_]+)\.([^@]*)(?:@(\d+)\.(\d+))?$/.exec(raw || "");
  if (!m || !(m[2] in HOOKS)) return null;
  let token = m[3];
  try {
    token = decodeURIComponent(token);
  } catch {
    return null;
  }
  const out = { position: Number(m[1]), hook: m[2], token };
  if (m[4] != null) out.cell = [Number(m[4]), Number(m[5])];
  return out;
}

// The body: the run on screen as tokens (clean), the same tokens with one replaced (corrupted), the hook and the
// metric the model can be scored by. null when there is nothing to patch (no run, a position past the end).
export function patchRequest(attention, tokens, value, predicts) {
  if (!attention || !tokens || !value || value.position >= tokens.length || !value.token) return null;
  const { text: _t, tokens: _k, x: _x, ...rest } = headTypesRequest(attention);
  const corrupted = tokens.slice();
  corrupted[value.position] = value.token;
  return {
    clean: { ...rest, tokens: tokens.slice() },
    corrupted: { ...rest, tokens: corrupted },
    hook: value.hook,
    metric: { kind: predicts ? "loss" : "output_distance" },
  };
}

// The cell that recovers most, and a one-line reading of the grid.
export function bestCell(r) {
  let best = null;
  r.recovered.forEach((row, layer) =>
    row.forEach((v, c) => {
      if (v != null && (!best || Math.abs(v) > Math.abs(best.value))) best = { layer, column: c, value: v };
    }),
  );
  return best;
}

export function columnLabel(r, c) {
  return BY_POSITION.includes(r.hook) ? `${pos(c)} ${pieceText(r.tokens[c])}` : `H${c}`;
}

export function patchSummary(r) {
  const b = bestCell(r);
  const metric = r.metricKind === "loss" ? "next-token loss" : "distance of the output from the clean one";
  const cell = b ? `L${b.layer} ${BY_POSITION.includes(r.hook) ? "position " : ""}${columnLabel(r, b.column)}` : "none";
  return (
    `Clean ${metric} ${r.clean_metric.toFixed(3)}, corrupted ${r.corrupted_metric.toFixed(3)}. ` +
    `Most recovered by one cell: ${cell} (${b ? b.value.toFixed(3) : "–"}). ` +
    `${r.rows * r.columns} cells, ${r.forwards} forward passes in one request.`
  );
}

export function patchFigure(r) {
  const x = Array.from({ length: r.columns }, (_, c) => columnLabel(r, c));
  const y = Array.from({ length: r.rows }, (_, l) => `L${l}`);
  const z = r.recovered.map((row) => row.map((v) => (v == null ? null : v)));
  const trace = {
    type: "heatmap", x, y, z, zmin: -1, zmax: 1, zmid: 0,
    colorscale: [[0, "#b2182b"], [0.5, "#f7f7f7"], [1, "#2166ac"]],
    colorbar: { title: { text: "recovered" }, thickness: 12 },
    hovertemplate: `%{y} %{x}: recovered %{z:.3f}<extra>${plotlyText(r.hook)}</extra>`,
    xgap: 1, ygap: 1,
  };
  const layout = {
    height: Math.max(180, 60 + 34 * r.rows),
    margin: { l: 44, r: 16, t: 10, b: 70 },
    xaxis: { tickangle: -45, automargin: true },
    yaxis: { autorange: "reversed" },
    ...plotlyTheme(),
  };
  return { traces: [trace], layout };
}

function tokenRow(label, tokens, changed) {
  const row = node("p", { className: "patch-tokens small" });
  row.append(node("strong", {}, `${label}: `));
  tokens.forEach((t, i) => {
    const chip = node("span", { className: `chip${changed.includes(i) ? " changed" : ""}` }, pieceText(t));
    chip.dataset.index = String(i);
    row.append(chip, " ");
  });
  return row;
}

const $ = (id) => document.getElementById(id);

// The body for the state's setting (null: nothing to patch).
function bodyOf(s, value) {
  const tokens = s.run.result?.tokens;
  const attention = singleOf(s);
  if (!attention || attention.x || attention.weights) return null;
  return patchRequest(attention, tokens, value, can(modelInfo(s), "predicts_tokens"));
}

let openCell = null; // a click on the grid opens that cell (bind sets it)

// The link of the page with `value` as the patch setting.
function linkTo(s, value) {
  return `?${encodeState({ ...s.ui, patch: value })}`;
}

function fillPositions(select, tokens, position) {
  const want = tokens.map((t, i) => `${pos(i)} ${pieceText(t)}`);
  const have = [...select.options].map((o) => o.textContent);
  if (want.join("\u0000") !== have.join("\u0000")) {
    select.replaceChildren(...want.map((text, i) => node("option", { value: String(i) }, text)));
  }
  if (document.activeElement !== select) select.value = String(Math.min(position, Math.max(tokens.length - 1, 0)));
}

export const panel = {
  analysis: "patch",
  words: "activation patching",
  setting: { key: "patch", encode: encodePatch, decode: decodePatch },
  request: (s, value) => bodyOf(s, value && { position: value.position, hook: value.hook, token: value.token }),
  // the cell opened: the clean and corrupted inputs' maps of its layer, side by side (patchcell.js)
  parts: {
    cell: {
      analysis: "compare",
      words: "the patched cell's maps",
      request: (s, value) => (value?.cell ? cellCompareRequest(bodyOf(s, value), value.cell[0]) : null),
    },
    run: {
      analysis: "patch/run",
      words: "the patched run",
      request: (s, value) => (value?.cell ? cellRunRequest(bodyOf(s, value), value.cell) : null),
    },
  },
  keep: false,
  needsPlotly: true,
  deps: (s) => [s.run.result],
  render(root, slot, s) {
    const tokens = s.run.result?.tokens || [];
    const value = s.ui.patch;
    const readsTokens = !!s.run.request && !s.run.request.x && !s.run.request.weights && tokens.length > 0;
    $("patch-form").hidden = !readsTokens;
    $("patch-none").hidden = readsTokens;
    if (readsTokens) fillPositions($("patch-position"), tokens, value ? value.position : 0);
    if (value && document.activeElement !== $("patch-token")) $("patch-token").value = value.token;
    if (value && document.activeElement !== $("patch-hook")) $("patch-hook").value = value.hook;
    const status = $("patch-status");
    status.textContent = slot.status === "loading" ? "patching…" : slot.status === "error" ? slot.message : "";
    status.classList.toggle("bad", slot.status === "error");
    const grid = $("patch-grid");
    const r = slot.status === "error" ? null : slot.result;
    const body = $("patch-body");
    if (!r || !value) {
      body.replaceChildren();
      if (window.Plotly && grid.dataset.drawn) window.Plotly.purge(grid);
      grid.dataset.drawn = "";
      grid.dataset.best = "";
      grid.dataset.cursor = "";
      grid.tabIndex = -1;
      renderCell($("patch-cell"), null);
      return;
    }
    const shown = { ...r, metricKind: can(modelInfo(s), "predicts_tokens") ? "loss" : "output" };
    const b = bestCell(r);
    body.replaceChildren(
      tokenRow("clean", r.tokens, r.changed_positions),
      tokenRow("corrupted", r.corrupted_tokens, r.changed_positions),
      node("p", { className: "small", id: "patch-summary" }, patchSummary(shown)),
    );
    grid.dataset.hook = r.hook;
    grid.dataset.best = b ? `${b.layer}.${b.column}` : "";
    grid.dataset.bestValue = b ? String(b.value) : "";
    grid.dataset.recovered = JSON.stringify(r.recovered);
    grid.setAttribute(
      "aria-label",
      `Activation patching, ${HOOKS[r.hook]}. ${patchSummary(shown)} Arrow keys move over the cells; Enter opens one.`,
    );
    grid.tabIndex = 0;
    const open = value.cell && value.cell[0] < r.rows && value.cell[1] < r.columns ? value.cell : null;
    renderCell($("patch-cell"), r, open ? value : null, s.panels["patch.cell"], s, linkTo(s, value), s.panels["patch.run"]);
    if (!window.Plotly) return;
    const { traces, layout } = patchFigure(r);
    if (!grid.dataset.cursor && open) grid.dataset.cursor = open.join(".");
    const cursor = grid.dataset.cursor ? grid.dataset.cursor.split(".").map(Number) : null;
    window.Plotly.react(grid, traces, { ...layout, shapes: cursorShape(cursor) }, PLOT_CONFIG);
    if (!grid.dataset.drawn) grid.on("plotly_click", (e) => openCell?.(e.points?.[0]?.pointNumber));
    grid.dataset.drawn = "1";
  },
  bind(root, store) {
    const { dispatch, getState } = store;
    const open = bindGrid($("patch-grid"), (text) => ($("patch-cursor").textContent = text), store);
    // a click on a heatmap cell: plotly's point number is [row, column]
    openCell = (at) => {
      if (!Array.isArray(at)) return;
      $("patch-grid").dataset.cursor = at.join(".");
      open([at[0], at[1]]);
    };
    $("patch-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const s = getState();
      const position = Number.parseInt($("patch-position").value, 10) || 0;
      const token = $("patch-token").value.trim();
      if (!token || !s.run.result) return;
      $("patch-grid").dataset.cursor = ""; // a new grid: its cursor starts again
      dispatch(act.panelSet("patch", { position, token, hook: $("patch-hook").value }));
    });
  },
};
