// A contrast for a claim about a head: the open head's weight from the chosen query to the chosen key, in your text
// and in a contrast text that changes what the query should resolve to ("… too tired" → "… too wide": "it" is the
// animal, then the street). A head that puts the same weight on the key in both does not tell them apart, so the
// claim "it makes the query look at the key" rests on something else. Asked as POST /api/compare (A: your text,
// B: the contrast, the open head's layer), so both texts must have the same number of tokens (the server says so
// when not). An example may declare its contrast (examples.js `contrast`): it is offered here. The panel's one
// declaration (`panel`, read by registry.js) on top of pure helpers.

import { node, within } from "./dom.js";
import { act } from "./actions.js";
import { EXAMPLES } from "./examples.js";
import { pieceQuote } from "./piece.js";
import { compareRequest } from "./requests.js";
import { selectView, singleOf } from "./selectors.js";

export const SAME_WITHIN = 0.05; // two weights this close are "the same" for the reading
export const KEEPS = 0.5; // a contrast that keeps at least this share of the weight leaves it mostly in place

// The contrast an example declares for this text, or null.
export function contrastFor(text) {
  const ex = EXAMPLES.find((e) => e.contrast && e.text === text);
  return ex ? ex.contrast : null;
}

// The head the contrast reads: the one open large.
export function contrastHead(s) {
  return s.ui.focus || selectView(s)?.focus || null;
}

// The POST /api/compare body: A the run on screen, B the same with the contrast text, both over the head's layer.
export function contrastRequest(attention, text, layer) {
  const { tokens: _t, ...rest } = attention;
  return compareRequest(attention, { ...rest, text }, layer);
}

// From the compare answer: the head's weight from query to key in each text, and the tokens at both positions.
export function contrastWeights(result, head, pair) {
  const [layer, h] = head;
  const [q, k] = pair;
  const side = (r) => {
    const l = r.layers.find((x) => x.index === layer) || r.layers[0];
    const hd = l.heads.find((x) => x.index === h) || l.heads[h];
    return { weight: Number(hd.weights[q][k]), query: r.tokens[q], key: r.tokens[k] };
  };
  return { a: side(result.a), b: side(result.b) };
}

// One line that reads the two weights.
export function contrastReading(w, head) {
  const name = `L${head[0]} H${head[1]}`;
  const pair = `${pieceQuote(w.a.query)} → ${pieceQuote(w.a.key)}`;
  const [x, y] = [w.a.weight.toFixed(2), w.b.weight.toFixed(2)];
  const said = `${name} puts ${x} on ${pair} in your text and ${y} in the contrast`;
  const query = pieceQuote(w.a.query);
  if (Math.abs(w.a.weight - w.b.weight) < SAME_WITHIN) {
    return `${said}: about the same in both, so it does not tell them apart; it does not resolve ${query}.`;
  }
  const kept = Math.min(w.a.weight, w.b.weight) / Math.max(w.a.weight, w.b.weight);
  if (kept >= KEEPS) {
    return (
      `${said}: the lower keeps ${Math.round(100 * kept)}% of the higher, so the weight mostly does not depend ` +
      `on the change; weak evidence that it resolves ${query}.`
    );
  }
  return `${said}: ${w.b.weight < w.a.weight ? "less" : "more"} by ×${(1 / kept).toFixed(1)}, its weight follows the change.`;
}

function renderResult(box, slot, s, value) {
  box.replaceChildren();
  const head = contrastHead(s);
  const pair = s.ui.pair;
  if (!value || slot.status !== "ready" || !slot.result || !head || !pair) return;
  const w = contrastWeights(slot.result, head, pair);
  const table = node("table", { className: "contrast-table" });
  const top = node("tr");
  for (const h of ["", "text", `weight ${pieceQuote(w.a.query)} → ${pieceQuote(w.a.key)}`])
    top.append(node("th", { scope: "col" }, h));
  table.append(top);
  for (const [side, label, text] of [
    ["a", "yours", s.run.request?.text ?? ""],
    ["b", "contrast", value.text],
  ]) {
    const tr = node("tr");
    tr.dataset.side = side;
    tr.append(node("th", { scope: "row" }, label), node("td", {}, text));
    const td = node("td", {}, w[side].weight.toFixed(3));
    td.dataset.key = "weight";
    td.dataset.value = String(w[side].weight);
    tr.append(td);
    table.append(tr);
  }
  box.append(table, node("p", { className: "contrast-reading" }, contrastReading(w, head)));
}

export const panel = {
  analysis: "compare",
  words: "the contrast",
  setting: { key: "contrast", encode: (v) => v.text, decode: (raw) => (raw ? { text: raw } : null), dropOnModel: true },
  request: (s, value) => {
    const attention = singleOf(s);
    const head = contrastHead(s);
    if (!value || !attention || !head || !s.ui.pair) return null;
    return contrastRequest(attention, value.text, head[0]);
  },
  deps: (s) => [s.ui.pair, s.ui.focus, s.run.request],
  render(root, slot, s) {
    const part = within(root);
    const value = s.ui.contrast;
    const input = part("contrast-text");
    const offered = contrastFor(s.run.request?.text);
    if (document.activeElement !== input && !input.value) input.value = value?.text || offered || "";
    const head = contrastHead(s);
    const ready = !!(s.ui.pair && head);
    part("contrast-run").disabled = !ready;
    part("contrast-status").textContent = !ready
      ? "choose a query → key pair and open a head first"
      : slot.status === "loading"
        ? "running both texts…"
        : slot.status === "error"
          ? slot.message
          : "";
    part("contrast-status").classList.toggle("bad", slot.status === "error");
    renderResult(part("contrast-result"), slot, s, value);
  },
  bind(root, { dispatch }) {
    const part = within(root);
    part("contrast-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const text = part("contrast-text").value.trim();
      dispatch(act.panelSet("contrast", text ? { text } : null));
    });
  },
};
