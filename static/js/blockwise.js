// The flash / blockwise lesson (templates/blockwise.html): the online softmax of one query row, a block of B keys at
// a time, next to the dense softmax the server computed. The row is the open head's scores at the chosen query
// (the /api/attention answer on screen); each step takes one block and updates the running maximum m, the rescale
// factor exp(m_old − m_new) that the sum so far is multiplied by when the maximum grows, and the running sum l;
// the last step divides exp(s − m) by l and lays the result beside the server's dense weights, with their largest
// difference. Masked keys take no part (their weight is exactly 0 in both). The step and B are this view's own
// (its root's dataset and its input), reset when the row changes; pure helpers a test can call.

import { node, within } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { pos } from "./positions.js";
import { selectView, shownDeps } from "./selectors.js";

export const DEFAULT_BLOCK = 2;
const fmt = (v) => (v === -Infinity ? "−∞" : Number.isFinite(v) ? v.toFixed(4) : "–");

// The online softmax of `scores` (a row) over the keys `eligible` allows, in blocks of `block` keys: each block's
// {k0, k1, max, mOld, mNew, rescale (null on the first block that has a key: nothing to rescale), blockSum (of
// exp(s − mNew) over its keys), lOld, l}; then the row's m, l and weights exp(s − m) / l (0 on masked keys; all 0
// when no key is eligible).
export function onlineSoftmax(scores, eligible, block) {
  const n = scores.length;
  const ok = (k) => !eligible || !!eligible[k];
  let m = -Infinity;
  let l = 0;
  const steps = [];
  for (let k0 = 0; k0 < n; k0 += block) {
    const k1 = Math.min(n, k0 + block);
    let max = -Infinity;
    for (let k = k0; k < k1; k++) if (ok(k)) max = Math.max(max, scores[k]);
    const mNew = Math.max(m, max);
    const rescale = m === -Infinity ? null : Math.exp(m - mNew);
    let blockSum = 0;
    for (let k = k0; k < k1; k++) if (ok(k)) blockSum += Math.exp(scores[k] - mNew);
    const lOld = l;
    l = (rescale ?? 0) * l + blockSum;
    steps.push({ k0, k1, max, mOld: m, mNew, rescale, blockSum, lOld, l });
    m = mNew;
  }
  const weights = Array.from(scores, (s, k) => (ok(k) && l > 0 ? Math.exp(s - m) / l : 0));
  return { steps, m, l, weights };
}

// The largest |a_k − b_k| of two rows.
export function maxAbsDiff(a, b) {
  let d = 0;
  for (let k = 0; k < a.length; k++) d = Math.max(d, Math.abs(a[k] - b[k]));
  return d;
}

// The row the lesson works on, from the state: {layer, head, query, tokens, scores, eligible, dense} or null (no
// run, or a run without scores or weights).
export function lessonRow(s) {
  const v = selectView(s);
  if (!v) return null;
  const head = v.focusHead;
  const q = v.query;
  if (!head?.scores?.[q] || !head?.weights?.[q]) return null;
  return {
    layer: v.focus[0],
    head: head.index ?? v.focus[1],
    query: q,
    tokens: v.keyTokens || v.tokens,
    queryToken: v.tokens[q],
    scores: Array.from(head.scores[q]),
    eligible: s.run.result.eligible?.[q] ? Array.from(s.run.result.eligible[q], Boolean) : null,
    dense: Array.from(head.weights[q]),
  };
}

export function deps(s) {
  return [...shownDeps(s), s.ui.focus, s.ui.query, s.ui.layer];
}

function blockOf(part) {
  const b = Number.parseInt(part("blockwise-block").value, 10);
  return Number.isInteger(b) && b >= 1 ? b : DEFAULT_BLOCK;
}

// The keys of the row: token, score, block; the blocks taken so far marked.
function keysTable(row, block, done) {
  const table = node("table", { className: "stats blockwise-keys", id: "blockwise-keys" });
  table.setAttribute("aria-label", "The row's scores, in blocks");
  const names = node("tr");
  const scores = node("tr");
  const blocks = node("tr");
  names.append(node("th", { scope: "row" }, "key"));
  scores.append(node("th", { scope: "row" }, "score s"));
  blocks.append(node("th", { scope: "row" }, "block"));
  row.scores.forEach((sc, k) => {
    const b = Math.floor(k / block);
    const masked = row.eligible && !row.eligible[k];
    const cls = `${b < done ? "blockwise-done" : ""} ${b % 2 ? "blockwise-odd" : ""}`.trim();
    names.append(node("td", { className: cls }, `${pos(k)} ${pieceQuote(row.tokens[k])}`));
    scores.append(node("td", { className: cls }, masked ? "masked" : fmt(sc)));
    blocks.append(node("td", { className: cls }, String(b + 1)));
  });
  table.append(names, scores, blocks);
  return table;
}

// One line per block taken: its max, m_old → m_new, the rescale factor and l.
function stepsTable(steps) {
  const table = node("table", { className: "stats blockwise-steps", id: "blockwise-steps" });
  const head = node("tr");
  for (const h of [
    "block",
    "keys",
    "block max",
    "m_old → m_new",
    "rescale exp(m_old − m_new)",
    "l = l_old·rescale + Σ exp(s − m_new)",
  ]) {
    head.append(node("th", { scope: "col" }, h));
  }
  table.append(head);
  steps.forEach((st, i) => {
    const tr = node("tr");
    Object.assign(tr.dataset, { m: String(st.mNew), l: String(st.l), rescale: String(st.rescale ?? "") });
    const rescale = st.rescale == null ? "— (nothing yet)" : fmt(st.rescale);
    tr.append(
      node("th", { scope: "row" }, String(i + 1)),
      node("td", {}, `${pos(st.k0)}–${pos(st.k1 - 1)}`),
      node("td", {}, fmt(st.max)),
      node("td", {}, `${fmt(st.mOld)} → ${fmt(st.mNew)}`),
      node("td", {}, rescale),
      node(
        "td",
        {},
        `${fmt(st.lOld)}·${st.rescale == null ? "0" : fmt(st.rescale)} + ${fmt(st.blockSum)} = ${fmt(st.l)}`,
      ),
    );
    table.append(tr);
  });
  return table;
}

// The weights exp(s − m) / l beside the server's dense weights.
function finalTable(row, online) {
  const table = node("table", { className: "stats blockwise-final", id: "blockwise-final" });
  table.setAttribute("aria-label", "The blockwise weights beside the dense ones");
  const line = (label, testid, values) => {
    const tr = node("tr");
    tr.setAttribute("data-testid", testid);
    tr.dataset.weights = JSON.stringify(values);
    tr.append(node("th", { scope: "row" }, label), ...values.map((w) => node("td", {}, w.toFixed(4))));
    return tr;
  };
  table.append(
    line(`blocks: exp(s − ${fmt(online.m)}) / ${fmt(online.l)}`, "blockwise-online", online.weights),
    line("dense softmax (the server's weights)", "blockwise-dense", row.dense),
  );
  return table;
}

export function render(root, s) {
  const part = within(root);
  const out = part("blockwise-out");
  const row = lessonRow(s);
  out.replaceChildren();
  const controls = part("blockwise-controls");
  controls.hidden = !row;
  if (!row) {
    out.append(node("p", { className: "muted small" }, "Run a text to take one of its rows through the blocks."));
    return;
  }
  const block = blockOf(part);
  const online = onlineSoftmax(row.scores, row.eligible, block);
  const last = online.steps.length + 1; // step 0: the row; 1..n: a block each; n + 1: the weights
  const key = JSON.stringify([row.layer, row.head, row.query, block, row.scores.length]);
  if (root.dataset.key !== key) root.dataset.step = "0";
  root.dataset.key = key;
  const step = Math.max(0, Math.min(last, Number(root.dataset.step) || 0));
  Object.assign(root.dataset, {
    step: String(step),
    steps: String(last),
    layer: String(row.layer),
    head: String(row.head),
    query: String(row.query),
  });
  part("blockwise-prev").disabled = step === 0;
  part("blockwise-next").disabled = step === last;
  const done = Math.min(step, online.steps.length);
  part("blockwise-step").textContent =
    step === 0
      ? `the row, in ${online.steps.length} blocks of ${block}`
      : step < last
        ? `block ${step} of ${online.steps.length}`
        : "the weights";
  out.append(
    node(
      "p",
      { className: "small" },
      `L${row.layer}H${row.head}, query ${pos(row.query)} ${pieceQuote(row.queryToken)}: ` +
        "a flash pass never holds the whole row of scores. It keeps a running maximum m and a running sum l of " +
        "exp(s − m); when a block raises the maximum, the sum so far is multiplied by exp(m_old − m_new).",
    ),
    keysTable(row, block, done),
  );
  if (done) out.append(stepsTable(online.steps.slice(0, done)));
  if (step === last) {
    const diff = maxAbsDiff(online.weights, row.dense);
    root.dataset.maxDiff = String(diff);
    out.append(
      finalTable(row, online),
      node(
        "p",
        { className: "small", id: "blockwise-diff" },
        `Largest difference from the dense softmax: ${diff.toExponential(2)}` +
          (diff < 1e-4
            ? " — the same weights, without the whole row at once."
            : " — these weights are not this row's softmax (a demonstrated bug, hidden sinks or typed-in weights change them)."),
      ),
    );
  } else delete root.dataset.maxDiff;
}

export function bind(root, { getState }) {
  const part = within(root);
  const redraw = () => render(root, getState());
  const move = (by) => {
    root.dataset.step = String(Math.max(0, (Number(root.dataset.step) || 0) + by));
    redraw();
  };
  part("blockwise-prev").addEventListener("click", () => move(-1));
  part("blockwise-next").addEventListener("click", () => move(1));
  part("blockwise-block").addEventListener("change", redraw);
}
