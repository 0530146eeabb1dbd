// Top heads for one query -> key pair (POST /api/heads/top): which heads, in every layer, put the most weight from
// this query on this key? Choose the pair here, by shift-clicking a cell of the large head, or by pressing a key in
// the retrieval diagram; press a head in the list to open it.

import { node, within } from "./dom.js";
import { act } from "./actions.js";
import { selectView } from "./selectors.js";
import { pieceLabel, pieceQuote } from "./piece.js";
import { firstPosition, pos } from "./positions.js";

export const TOP_K = 10;

export function positionLabel(tokens, i) {
  return `${pos(i)} ${pieceLabel(tokens[i] ?? "", 16)}`;
}

// tokens -> {[the first position's number]: a <select> of "choose…" and an option a position}: cloned, not rebuilt
const choices = new WeakMap();

// Every position's <option> (a select cloned from the one kept for these tokens).
function everyPosition(tokens) {
  let model = choices.get(tokens)?.[firstPosition()];
  if (!model) {
    model = node("select");
    model.append(node("option", { value: "" }, "choose…"));
    model.append(...tokens.map((_, i) => node("option", { value: String(i) }, positionLabel(tokens, i))));
    choices.set(tokens, { ...choices.get(tokens), [firstPosition()]: model });
  }
  return model.cloneNode(true).options;
}

// A position picker. Its options are styled and measured as the page is laid out, each time the view draws: two
// pickers of 513 options took 19-25 ms of layout in a bare page. So it holds "choose…" and the position chosen
// until a person reaches for it (its focus, a press, a key), and every position from then on.
function positionSelect(id, label, tokens, value, onChange) {
  const wrap = node("label", { className: "th-pick", htmlFor: id });
  wrap.append(node("span", {}, label));
  const sel = node("select", { id });
  sel.append(node("option", { value: "" }, "choose…"));
  if (value != null) sel.append(node("option", { value: String(value) }, positionLabel(tokens, value)));
  sel.value = value == null ? "" : String(value);
  let filled = false;
  const fill = () => {
    if (filled) return;
    filled = true;
    const chosen = sel.value;
    sel.replaceChildren(...everyPosition(tokens));
    sel.value = chosen;
  };
  for (const type of ["focus", "pointerdown", "mousedown", "keydown"]) sel.addEventListener(type, fill);
  sel.addEventListener("change", () => onChange(sel.value === "" ? null : Number(sel.value)));
  wrap.append(sel);
  return wrap;
}

// view: {tokens, pair: [q, k] | null, top: TopHeadsResult | null, status: "idle"|"loading"|"error"|"ready",
//        message, multiLayer, focus: [layer, head] | null}
// on: {pair(q, k), open(layer, head, query)}
export function renderTopHeads(root, view, on) {
  const active = root.contains(document.activeElement)
    ? document.activeElement.id || document.activeElement.dataset.focus
    : null;
  root.replaceChildren();
  const [q, k] = view.pair || [null, null];
  const picks = node("div", { className: "th-picks" });
  picks.append(
    positionSelect("pair-query", "Query", view.tokens, q, (v) => on.pair(v, k)),
    node("span", { className: "th-arrow" }, "→"),
    positionSelect("pair-key", "Key", view.tokens, k, (v) => on.pair(q, v)),
  );
  root.append(picks);
  const status = node("p", { className: "muted small th-status" });
  status.setAttribute("aria-live", "polite");
  root.append(status);
  const top = view.top;
  if (!view.pair || q == null || k == null) {
    status.textContent =
      "Choose a query and a key: here, by shift-clicking a cell of the large head, or by pressing a key in the retrieval diagram.";
  } else if (view.status === "error") {
    status.textContent = view.message;
    status.classList.add("bad");
  } else if (view.status === "loading" && !top) {
    status.textContent = "ranking every head…";
  }
  if (top && view.pair && top.query === q && top.key === k && top.masked) {
    // a masked cell holds exactly 0 in every head: say why instead of ranking zeros
    status.textContent =
      `Query ${pos(q)} ${pieceQuote(view.tokens[q])} → key ${pos(k)} ${pieceQuote(view.tokens[k])} is masked (${top.reasons.join(", ")}): ` +
      "every head gives it weight 0, so there is nothing to rank. Choose an eligible pair.";
    status.dataset.masked = "true";
  } else if (top && view.pair && top.query === q && top.key === k) {
    status.textContent =
      `Weight from query ${pos(q)} ${pieceQuote(view.tokens[q])} to key ${pos(k)} ${pieceQuote(view.tokens[k])}, highest first, over all ` +
      `${view.total} head${view.total === 1 ? "" : "s"}.`;
    const list = node("ol", { className: "th-list" });
    list.setAttribute("data-testid", "top-heads");
    const max = Math.max(1e-9, ...top.heads.map((h) => h.weight));
    top.heads.forEach((h, rank) => {
      const li = node("li");
      const b = node("button", { type: "button", className: "th-item" });
      b.dataset.layer = String(h.layer);
      b.dataset.head = String(h.head);
      b.dataset.weight = String(h.weight);
      b.dataset.focus = `top-${h.layer}-${h.head}`;
      const current = view.focus && view.focus[0] === h.layer && view.focus[1] === h.head;
      if (current) b.setAttribute("aria-current", "true");
      b.setAttribute("aria-label", `Open layer ${h.layer} head ${h.head}: weight ${h.weight.toFixed(3)}`);
      const bar = node("span", { className: "th-bar" });
      bar.style.width = `${((h.weight / max) * 100).toFixed(1)}%`;
      bar.setAttribute("aria-hidden", "true");
      const track = node("span", { className: "th-track" });
      track.append(bar);
      b.append(
        node("span", { className: "th-rank" }, `${rank + 1}`),
        node("span", { className: "th-name" }, view.multiLayer ? `L${h.layer} H${h.head}` : `H${h.head}`),
        track,
        node("span", { className: "th-weight" }, h.weight.toFixed(3)),
      );
      b.addEventListener("click", () => on.open(h.layer, h.head, q));
      li.append(b);
      list.append(li);
    });
    root.append(list);
    root.append(
      node(
        "p",
        { className: "muted small th-hint" },
        "Press a head to open it large with this query: the retrieval diagram then shows where else the query looks.",
      ),
    );
  }
  if (active) {
    const el =
      root.querySelector(`#${CSS.escape(active)}`) || root.querySelector(`[data-focus="${CSS.escape(active)}"]`);
    if (el) el.focus({ preventScroll: true }); // a redraw keeps the focus where it was, and the page where it is
  }
}

// ---- the view (data-view="tophead") --------------------------------------------------------------------------

export function deps(s) {
  return [s.panels.top, s.run.result, s.ui.pair, s.ui.focus];
}

export function render(root, s, dispatch) {
  const r = s.run.result;
  if (!r) return;
  const t = s.panels.top;
  const view = selectView(s);
  renderTopHeads(
    within(root)("top-heads-panel"),
    {
      tokens: r.tokens,
      pair: s.ui.pair,
      top: t.result,
      status: t.status,
      message: t.message,
      multiLayer: r.config.n_layers > 1,
      total: r.config.n_layers * r.config.n_heads,
      focus: s.ui.focus || (view ? view.focus : null),
    },
    {
      pair: (q, k) => dispatch(act.pairSet(q, k)),
      open: (layer, head, query) => dispatch(act.headOpened(layer, head, query, "top-heads-panel")),
    },
  );
}
