// Why a query matches a key (POST /api/qk-attribution): the open head's score at the chosen query -> key pair as a
// sum over what wrote the residual stream on each side (the embedding, each earlier head, each MLP, the biases), the
// largest terms in a small table. Asked for only when the panel is opened, for the head and pair the page shows; a
// post-norm model's refusal is shown as the server words it. The panel's one declaration (`panel`, registry.js).

import { act } from "./actions.js";
import { node, within } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { headTypesRequest } from "./requests.js";
import { selectView, singleOf } from "./selectors.js";

export const QK_ROWS = 6; // the largest terms shown

export function qkRequest(attention, focus, pair) {
  if (!attention || !focus || !pair || !pair.every((v) => v != null)) return null;
  return { ...headTypesRequest(attention), layer: focus[0], head: focus[1], query: pair[0], key: pair[1] };
}

// "L1H2 attends to 'river' because of the embedding (query) × L0H1 (key): 5.39 of 8.52"
export function qkSentence(r) {
  const top = r.terms[0];
  if (!top) return "";
  const share = r.score !== 0 ? ` (${Math.round((100 * top.value) / r.score)}% of it)` : "";
  return (
    `L${r.layer}H${r.head} scores ${pieceQuote(r.tokens[r.query])} → ${pieceQuote(r.tokens[r.key])} at ${r.score.toFixed(2)}; ` +
    `the largest term is ${top.query_source} on the query side × ${top.key_source} on the key side: ` +
    `${top.value.toFixed(2)}${share}. The ${r.terms.length} terms sum to ${r.total.toFixed(2)}.`
  );
}

export function renderQK(root, view) {
  root.replaceChildren();
  const status = node("p", { className: "muted small", id: "qk-status" });
  root.append(status);
  if (!view.asked) {
    status.textContent = "Press “Explain this score” for the open head and pair.";
    return;
  }
  if (!view.pair) {
    status.textContent = "Choose a query and a key (shift-click a cell of the large head).";
    return;
  }
  if (view.status === "loading") status.textContent = "decomposing the score…";
  if (view.status === "error") {
    status.textContent = view.message;
    status.classList.add("bad");
    return;
  }
  const r = view.result;
  if (!r) return;
  status.textContent = qkSentence(r);
  const table = node("table", { className: "stats qk-terms", id: "qk-terms" });
  table.setAttribute("aria-label", "The largest terms of the score");
  const head = node("tr");
  head.append(node("th", {}, "query side"), node("th", {}, "key side"), node("th", {}, "term"));
  table.append(head);
  for (const t of r.terms.slice(0, QK_ROWS)) {
    const row = node("tr");
    row.append(node("td", {}, t.query_source), node("td", {}, t.key_source), node("td", {}, t.value.toFixed(3)));
    row.dataset.value = String(t.value);
    table.append(row);
  }
  root.append(table);
  root.dataset.score = String(r.score);
  root.dataset.total = String(r.total);
}

export const panel = {
  analysis: "qk-attribution",
  words: "the score's terms",
  request: (s, value, slot) => {
    if (!slot.nonce) return null;
    const view = selectView(s);
    return qkRequest(singleOf(s), view ? view.focus : null, s.ui.pair);
  },
  nonce: true,
  keep: true,
  deps: (s) => [s.ui.pair, s.ui.focus, s.run.result],
  render(root, slot, s) {
    const view = selectView(s);
    const pair = s.ui.pair && s.ui.pair.every((v) => v != null) ? s.ui.pair : null;
    renderQK(within(root)("qk-body"), {
      asked: !!slot.nonce,
      pair,
      status: slot.status,
      message: slot.message,
      result: slot.status === "error" ? null : slot.result,
      focus: view ? view.focus : null,
    });
  },
  bind(root, { dispatch }) {
    within(root)("qk-explain").addEventListener("click", () => dispatch(act.panelAsked("qkterms", { fields: {} })));
  },
};
