// Activation patching (POST /api/patch): corrupt one token, then run the corrupted input once per cell with one
// activation taken from the clean run, and draw the share of the clean-corrupted difference each cell recovers.
// Residual, attention-out and MLP-out hooks give a layer x position grid, z and pattern a layer x head grid. The
// metric, for a model that predicts tokens: the clean tokens' mean next-token loss, or the logit difference at a
// position chosen on the page (the correct token's logit minus the wrong one's); else the output's distance from the
// clean output. Each cell prints the metric with that one activation patched; its colour is the share recovered.
// The panel's one declaration (`panel`, read by registry.js) on top of pure helpers.

import { act } from "./actions.js";
import { can } from "./capabilities.js";
import { plotlyTheme } from "./colors.js";
import { node, within } from "./dom.js";
import { plotlyText } from "./focuscells.js";
import { pieceQuote, pieceText } from "./piece.js";
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

// The link's form of the setting: position, hook and the replacement token ("2.z.moon"), a logit-difference metric
// as ",ld,POSITION,CORRECT,WRONG" ("2.z.moon,ld,7,river,frog"), and the grid's cell opened as "@LAYER.COLUMN"
// ("2.z.moon@1.3"). Tokens are URI-encoded, so they hold no "," or "@".
export function encodePatch(v) {
  const m = v.metric;
  const metric = m ? `,ld,${m.position},${encodeURIComponent(m.correct)},${encodeURIComponent(m.wrong)}` : "";
  const cell = v.cell ? `@${v.cell[0]}.${v.cell[1]}` : "";
  return `${v.position}.${v.hook}.${encodeURIComponent(v.token)}${metric}${cell}`;
}

export function decodePatch(raw) {
  const m = /^(\d+)\.([a-z_]+)\.([^@,]*)(?:,ld,(\d+),([^@,]+),([^@,]+))?(?:@(\d+)\.(\d+))?$/.exec(raw || "");
  if (!m || !(m[2] in HOOKS)) return null;
  let tokens;
  try {
    tokens = [m[3], m[5], m[6]].map((t) => (t == null ? t : decodeURIComponent(t)));
  } catch {
    return null;
  }
  const out = { position: Number(m[1]), hook: m[2], token: tokens[0] };
  if (m[4] != null) out.metric = { kind: "logit_diff", position: Number(m[4]), correct: tokens[1], wrong: tokens[2] };
  if (m[7] != null) out.cell = [Number(m[7]), Number(m[8])];
  return out;
}

// The body's metric for the setting's `metric` (null: the default), on a model that predicts tokens or not: the
// logit difference only where the model predicts tokens and its position is one of the text's.
export function patchMetric(metric, predicts, length) {
  if (predicts && metric && metric.position < length && metric.correct && metric.wrong) {
    return { kind: "logit_diff", position: metric.position, correct: metric.correct, wrong: metric.wrong };
  }
  return { kind: predicts ? "loss" : "output_distance" };
}

// The body: the run on screen as tokens (clean), the same tokens with one replaced (corrupted), the hook and the
// metric (patchMetric) the model can be scored by. null when there is nothing to patch (no run, a position past
// the end).
export function patchRequest(attention, tokens, value, predicts) {
  if (!attention || !tokens || !value || value.position >= tokens.length || !value.token) return null;
  const { text: _t, tokens: _k, x: _x, ...rest } = headTypesRequest(attention);
  const corrupted = tokens.slice();
  corrupted[value.position] = value.token;
  return {
    clean: { ...rest, tokens: tokens.slice() },
    corrupted: { ...rest, tokens: corrupted },
    hook: value.hook,
    metric: patchMetric(value.metric, predicts, tokens.length),
  };
}

// The cell that recovers most: the largest recovered share, signed ({layer, column, value}; null when no cell has
// one). A share below 0 is a patch that takes the output further from the clean run: it never outranks one that
// brings the output back.
export function bestCell(r) {
  let best = null;
  r.recovered.forEach((row, layer) =>
    row.forEach((v, c) => {
      if (v != null && (!best || v > best.value)) best = { layer, column: c, value: v };
    }),
  );
  return best;
}

// The cell whose patch takes the output furthest from the clean run: the most negative recovered share, or null when
// no share is below 0.
export function mostNegativeCell(r) {
  let worst = null;
  r.recovered.forEach((row, layer) =>
    row.forEach((v, c) => {
      if (v != null && v < 0 && (!worst || v < worst.value)) worst = { layer, column: c, value: v };
    }),
  );
  return worst;
}

export function columnLabel(r, c) {
  return BY_POSITION.includes(r.hook) ? `${pos(c)} ${pieceText(r.tokens[c])}` : `H${c}`;
}

// The metric in words, from the body's `metric` (patchMetric).
export function metricWords(m, tokens = []) {
  if (m?.kind === "logit_diff") {
    return `logit difference at position ${pos(m.position)} ${pieceQuote(tokens[m.position] ?? "")} (${pieceQuote(m.correct)} − ${pieceQuote(m.wrong)})`;
  }
  return m?.kind === "loss" ? "next-token loss" : "distance of the output from the clean one";
}

// The metric's short name, for a cell's value.
export function metricName(m) {
  return m?.kind === "logit_diff" ? "logit difference" : m?.kind === "loss" ? "next-token loss" : "output distance";
}

// A cell's printed value: the metric with that one activation patched.
export function cellText(v) {
  if (v == null || !Number.isFinite(v)) return "";
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2);
}

// A cell named in the summary: "L1 H2" or "L0 position 3 king".
function cellName(r, cell) {
  return `L${cell.layer} ${BY_POSITION.includes(r.hook) ? "position " : ""}${columnLabel(r, cell.column)}`;
}

// The best cell in words: the one that recovers most, or, when no cell recovers any of the difference, that.
export function bestWords(r) {
  const b = bestCell(r);
  if (!b) return "Most recovered by one cell: none (–).";
  if (b.value > 0) return `Most recovered by one cell: ${cellName(r, b)} (${b.value.toFixed(3)}).`;
  return `No one cell recovers any of the difference; the largest share is ${cellName(r, b)} (${b.value.toFixed(3)}).`;
}

// The most negative cell in words ("" when no share is below 0): named apart from the best, as the harm it does.
export function mostNegativeWords(r) {
  const w = mostNegativeCell(r);
  return w
    ? `Most negative: ${cellName(r, w)} (${w.value.toFixed(3)}), a patch that takes the output further from the clean run.`
    : "";
}

export function patchSummary(r) {
  const metric = metricWords(r.metric, r.tokens);
  const worst = mostNegativeWords(r);
  return (
    `Clean ${metric} ${r.clean_metric.toFixed(3)}, corrupted ${r.corrupted_metric.toFixed(3)}. ` +
    `${bestWords(r)} ${worst ? `${worst} ` : ""}` +
    `${r.rows * r.columns} cells, ${r.forwards} forward passes in one request. Each cell prints the ${metricName(r.metric)} ` +
    "with that one activation patched; its colour is the share of the difference recovered."
  );
}

export function patchFigure(r) {
  const x = Array.from({ length: r.columns }, (_, c) => columnLabel(r, c));
  const y = Array.from({ length: r.rows }, (_, l) => `L${l}`);
  const z = r.recovered.map((row) => row.map((v) => (v == null ? null : v)));
  const text = r.metric_grid.map((row) => row.map(cellText));
  const trace = {
    type: "heatmap",
    x,
    y,
    z,
    zmin: -1,
    zmax: 1,
    zmid: 0,
    text,
    texttemplate: "%{text}",
    textfont: { size: 10 },
    colorscale: [
      [0, "#b2182b"],
      [0.5, "#f7f7f7"],
      [1, "#2166ac"],
    ],
    colorbar: { title: { text: "recovered" }, thickness: 12 },
    hovertemplate: `%{y} %{x}: ${plotlyText(metricName(r.metric))} %{text}, recovered %{z:.3f}<extra>${plotlyText(r.hook)}</extra>`,
    xgap: 1,
    ygap: 1,
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

// The "score by" controls: shown for a model that predicts tokens; the logit difference's position and tokens
// while it is chosen (the setting's, else the last position).
function renderScoring(part, s, tokens, value) {
  const predicts = can(modelInfo(s), "predicts_tokens");
  part("patch-scoring").hidden = !predicts;
  const m = value?.metric;
  if (document.activeElement !== part("patch-metric") && value) part("patch-metric").value = m ? "logit_diff" : "loss";
  part("patch-ld").hidden = part("patch-metric").value !== "logit_diff";
  if (tokens.length) fillPositions(part("patch-ld-position"), tokens, m ? m.position : tokens.length - 1);
  if (m && document.activeElement !== part("patch-ld-correct")) part("patch-ld-correct").value = m.correct;
  if (m && document.activeElement !== part("patch-ld-wrong")) part("patch-ld-wrong").value = m.wrong;
}

// The metric the form asks for: null (the default) or the logit difference at its position; undefined when its
// tokens are missing.
function formMetric(part) {
  if (part("patch-scoring").hidden || part("patch-metric").value !== "logit_diff") return null;
  const correct = part("patch-ld-correct").value;
  const wrong = part("patch-ld-wrong").value;
  if (!correct.trim() || !wrong.trim()) return undefined;
  return { kind: "logit_diff", position: Number.parseInt(part("patch-ld-position").value, 10) || 0, correct, wrong };
}

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
  request: (s, value) =>
    bodyOf(s, value && { position: value.position, hook: value.hook, token: value.token, metric: value.metric }),
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
    const part = within(root);
    const tokens = s.run.result?.tokens || [];
    const value = s.ui.patch;
    const readsTokens = !!s.run.request && !s.run.request.x && !s.run.request.weights && tokens.length > 0;
    part("patch-form").hidden = !readsTokens;
    part("patch-none").hidden = readsTokens;
    if (readsTokens) fillPositions(part("patch-position"), tokens, value ? value.position : 0);
    if (value && document.activeElement !== part("patch-token")) part("patch-token").value = value.token;
    if (value && document.activeElement !== part("patch-hook")) part("patch-hook").value = value.hook;
    renderScoring(part, s, tokens, value);
    const status = part("patch-status");
    status.textContent = slot.status === "loading" ? "patching…" : slot.status === "error" ? slot.message : "";
    status.classList.toggle("bad", slot.status === "error");
    const grid = part("patch-grid");
    const r = slot.status === "error" ? null : slot.result;
    const body = part("patch-body");
    if (!r || !value) {
      body.replaceChildren();
      if (window.Plotly && grid.dataset.drawn) window.Plotly.purge(grid);
      grid.dataset.drawn = "";
      grid.dataset.best = "";
      grid.dataset.bestValue = "";
      grid.dataset.mostNegative = "";
      grid.dataset.cursor = "";
      grid.tabIndex = -1;
      renderCell(part("patch-cell"), null);
      return;
    }
    const shown = { ...r, metric: patchMetric(value.metric, can(modelInfo(s), "predicts_tokens"), r.tokens.length) };
    const b = bestCell(r);
    body.replaceChildren(
      tokenRow("clean", r.tokens, r.changed_positions),
      tokenRow("corrupted", r.corrupted_tokens, r.changed_positions),
      node("p", { className: "small", id: "patch-summary" }, patchSummary(shown)),
    );
    grid.dataset.hook = r.hook;
    grid.dataset.best = b ? `${b.layer}.${b.column}` : "";
    grid.dataset.bestValue = b ? String(b.value) : "";
    const w = mostNegativeCell(r);
    grid.dataset.mostNegative = w ? `${w.layer}.${w.column}` : "";
    grid.dataset.recovered = JSON.stringify(r.recovered);
    grid.dataset.metric = shown.metric?.kind ?? "";
    grid.setAttribute(
      "aria-label",
      `Activation patching, ${HOOKS[r.hook]}. ${patchSummary(shown)} Arrow keys move over the cells; Enter opens one.`,
    );
    grid.tabIndex = 0;
    const open = value.cell && value.cell[0] < r.rows && value.cell[1] < r.columns ? value.cell : null;
    renderCell(
      part("patch-cell"),
      r,
      open ? value : null,
      s.panels["patch.cell"],
      s,
      linkTo(s, value),
      s.panels["patch.run"],
    );
    if (!window.Plotly) return;
    const { traces, layout } = patchFigure(shown);
    if (!grid.dataset.cursor && open) grid.dataset.cursor = open.join(".");
    const cursor = grid.dataset.cursor ? grid.dataset.cursor.split(".").map(Number) : null;
    window.Plotly.react(grid, traces, { ...layout, shapes: cursorShape(cursor) }, PLOT_CONFIG);
    if (!grid.dataset.drawn) grid.on("plotly_click", (e) => openCell?.(e.points?.[0]?.pointNumber));
    grid.dataset.drawn = "1";
  },
  bind(root, store) {
    const part = within(root);
    const { dispatch, getState } = store;
    const open = bindGrid(part("patch-grid"), (text) => (part("patch-cursor").textContent = text), store);
    // a click on a heatmap cell: plotly's point number is [row, column]
    openCell = (at) => {
      if (!Array.isArray(at)) return;
      part("patch-grid").dataset.cursor = at.join(".");
      open([at[0], at[1]]);
    };
    part("patch-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const s = getState();
      const position = Number.parseInt(part("patch-position").value, 10) || 0;
      const token = part("patch-token").value.trim();
      const metric = formMetric(part);
      if (metric === undefined) {
        part("patch-status").textContent = "Type the two tokens whose logits to compare.";
        return;
      }
      if (!token || !s.run.result) return;
      part("patch-grid").dataset.cursor = ""; // a new grid: its cursor starts again
      const value = { position, token, hook: part("patch-hook").value };
      dispatch(act.panelSet("patch", metric ? { ...value, metric } : value));
    });
    part("patch-metric").addEventListener("change", () => {
      part("patch-ld").hidden = part("patch-metric").value !== "logit_diff";
    });
  },
};
