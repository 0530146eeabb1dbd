// The heads panel (data-view="heads"): a grid of per-head heatmaps (small multiples) of a fixed size, paged so that
// 72 heads stay fast and readable; a long sequence is downsampled into the same thumbnail instead of growing it.
// Hover a cell: tooltip and linked row/column in every head. Click or Enter on a head: it opens large.
// Each card carries an "ablate" toggle (its own button: pressing it never opens the head) and the head's health
// flags from its stats: nearly uniform (the server's `dead`), identical to another head, W_Q = W_K (symmetric
// scores), the rank of W_Q W_Kᵀ. Its parts are found in its root (dom.js `within`); the hover's tooltip is the page's
// one (tooltip.js).

import { halfRows } from "./arrays.js";
import { renderBugBanner } from "./bugs.js";
import { headScale, legendTicks, matrixKey } from "./colors.js";
import { node, noteWidth, widthOf, within } from "./dom.js";
import {
  cellAt,
  drawHeatmap,
  layoutFor,
  maskedCells,
  repaintHighlight,
  sinkCaption,
  sinkHover,
  sinkWeights,
  sizeCanvas,
} from "./heatmap.js";
import { act } from "./actions.js";
import { PAGE_SIZE, pageOf, selectView, shownDeps } from "./selectors.js";
import { pieceQuote } from "./piece.js";
import { contributionStrip, stripLabel } from "./contrib.js";
import { firstPosition, pos } from "./positions.js";
import { keptHidden, markGiveaways } from "./giveaway.js";
import { showTip } from "./tooltip.js";
import { distance } from "./sight.js";

export const TARGET_PLOT_PX = { few: 190, many: 130 }; // plot side for <= 4 heads on a page, and for more
export const THUMB_PX = 150; // at most this many px a side, whatever the length: a long sequence is downsampled
export const MAX_CELL = 34;
export const MIN_CARD_PX = 165; // a card narrower than this is too small to read

export const CARD_CHROME_PX = 24;

// Why a head the server calls `dead` is flagged "nearly uniform": not broken, it spreads its weight evenly.
export function uniformHelp(kl) {
  const nats = kl == null ? "" : `KL from uniform ${kl < 0.01 ? kl.toFixed(4) : kl.toFixed(3)} nats: `;
  return (
    `${nats}every eligible key gets almost the same weight, so this head averages its values rather than ` +
    "picking one (working as computed, not broken)"
  );
}

// A head's health from its stats: [{kind, text, help}] for nearly uniform, identical, W_Q = W_K and a rank-deficient
// W_Q W_Kᵀ, and the QK rank always (kind "rank"). `prefix` names a sibling head ("L1 H" or "H").
export function healthFlags(st, prefix = "H") {
  if (!st) return [];
  const out = [];
  if (st.dead) out.push({ kind: "uniform", text: "nearly uniform", help: uniformHelp(st.kl_from_uniform) });
  if (st.identical_to && st.identical_to.length) {
    const names = st.identical_to.map((h) => `${prefix}${h}`).join(", ");
    out.push({ kind: "identical", text: `= ${names}`, help: `weights identical (similarity ≈ 1) to ${names}` });
  }
  if (st.qk_symmetric) {
    out.push({
      kind: "symmetric",
      text: "W_Q = W_K: scores are symmetric",
      help: "this head's query and key projections are equal, so q_i·k_j = q_j·k_i: the score matrix is symmetric",
    });
  }
  if (st.qk_rank != null) {
    const low = st.qk_rank_max != null && st.qk_rank < st.qk_rank_max;
    out.push({
      kind: low ? "rank-low" : "rank",
      text: `QK rank ${st.qk_rank}${st.qk_rank_max != null ? `/${st.qk_rank_max}` : ""}`,
      help: `rank of W_Q W_Kᵀ for this head${low ? ": below full rank, the scores live in fewer dimensions" : ": full rank"}`,
    });
  }
  return out;
}

// The ablate toggle on a card: its own button, so clicking or pressing it never opens the head.
function ablateButton(fig, item, view, onAblate) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "ablate";
  b.setAttribute("data-testid", "head-ablate");
  b.dataset.layer = String(item.layer);
  b.dataset.head = String(item.head.index);
  const show = (entry) => {
    b.setAttribute("aria-pressed", entry ? "true" : "false");
    b.textContent = entry ? `ablated (${entry.mode})` : "ablate";
    const name = view.multiLayer ? `layer ${item.layer} head ${item.head.index}` : `head ${item.head.index}`;
    b.setAttribute("aria-label", entry ? `Restore ${name} (now ${entry.mode}-ablated)` : `Ablate ${name}`);
    fig.classList.toggle("ablated", !!entry);
  };
  show((view.ablate || []).find((a) => a.layer === item.layer && a.head === item.head.index));
  b.addEventListener("click", (e) => {
    e.stopPropagation();
    onAblate(item.layer, item.head.index);
  });
  b.addEventListener("keydown", (e) => e.stopPropagation());
  return b;
} // card padding, border and the gap between cards

// Cell size (px, fractional below 1 for a long sequence) so that a page of heads fits the grid's width: up to 4
// heads share one row, more get small multiples; no thumbnail's plot grows past THUMB_PX.
export function cellSize(seqLen, headsOnPage, available = 900, labels = true) {
  const target = headsOnPage <= 4 ? TARGET_PLOT_PX.few : TARGET_PLOT_PX.many;
  let cell = Math.min(MAX_CELL, Math.max(1, Math.floor(target / seqLen)));
  if (seqLen * cell > THUMB_PX) cell = THUMB_PX / seqLen;
  // as many heads a row as fit at MIN_CARD_PX each (up to 4): a phone gets two readable heads, not four specks
  const perRow = Math.max(1, Math.min(headsOnPage, 4, Math.floor(available / MIN_CARD_PX)));
  while (cell > 4 && perRow * (layoutFor(seqLen, { cell, labels, maxLabel: 6 }).width + CARD_CHROME_PX) > available) {
    cell -= 1;
  }
  return cell;
}

const drawn = new WeakMap(); // grid element -> {key, cards}: what this view last painted, to repaint only the highlight

// What the cards show besides the result: their view, colours, page, the head open and the ablations.
function cardFields(s) {
  return [s.run.diff, s.ui.view, s.ui.palette, s.ui.scoreScale, s.ui.layer, s.ui.page, s.ui.focus, s.ui.ablate];
}

export function deps(s) {
  return [...shownDeps(s), ...cardFields(s), s.run.notice, s.highlight, keptHidden(s)];
}

export function measure(root) {
  noteWidth(within(root)("heads-grid"));
}

// A first picture of a page of heads that takes long to paint (SKETCH_CELLS cells or more in all): every card, with
// only the thumbnails in sight painted; `render`, after the paint (main.js), paints the others. False (nothing done)
// when the page is small or drawn already.
export const SKETCH_CELLS = 4 * 256 * 256;

export function sketch(root, s, dispatch) {
  const view = selectView(s);
  if (!view) return false;
  const S = view.tokens.length;
  const K = (view.keyTokens || view.tokens).length;
  if (pageOf(view.heads, view.page).items.length * S * K < SKETCH_CELLS) return false;
  const last = drawn.get(within(root)("heads-grid"));
  if (last && sameKey(last.key, drawKey(s))) return false;
  // in sight (sight.js: within its margin), or with no box to place it by: painted now
  render(root, s, dispatch, (card) => !distance(card.fig.getBoundingClientRect(), window.innerHeight));
  return true;
}

// What the grid's cards are drawn from: a draw with the same key only moves the highlight.
function drawKey(s) {
  return [s.run.result, ...cardFields(s), firstPosition()];
}

function sameKey(a, b) {
  return a.every((x, i) => x === b[i]);
}

// `paintNow(card)`: whether a card's thumbnail is painted in this draw (every one, except in a sketch); a draw of
// the same key paints the ones still unpainted.
export function render(root, s, dispatch, paintNow = () => true) {
  const part = within(root);
  markGiveaways(root, s, ["symmetric"]); // a lesson that asks which head is symmetric keeps the badge out of sight
  const view = selectView(s);
  if (!view) return;
  const r = s.run.result;
  renderBugBanner(part("demo-bug"), r.demo_bug);
  const notice = part("heads-notice");
  notice.textContent = s.run.notice;
  notice.hidden = !s.run.notice;
  renderLegend(part("legend"), view);
  part("heads-title").textContent =
    `Heads: ${view.view} · ${view.heads.length} head${view.heads.length === 1 ? "" : "s"}` +
    (view.multiLayer ? (s.ui.layer === "all" ? " · all layers" : ` · layer ${s.ui.layer}`) : "");
  const grid = part("heads-grid");
  const key = drawKey(s);
  const last = drawn.get(grid);
  if (last && sameKey(last.key, key)) {
    paintHeads(
      last.cards.filter((card) => !card.painted),
      view,
    );
    highlightHeads(last.cards, s.highlight);
    return;
  }
  const handlers = {
    onOpen: (layer, head, query) => dispatch(act.headOpened(layer, head, query, `head-${layer}-${head}`)),
    onHover: (cell, event) => hover(view, cell, event, dispatch),
    // a state with no ablation list (an exported file's: no server to run an intervention) offers none
    onAblate: s.ui.ablate ? (layer, head) => dispatch(act.ablationToggled(layer, head)) : null,
  };
  const cards = renderHeads(grid, part("heads-pager"), view, handlers, paintNow);
  drawn.set(grid, { key, cards });
  highlightHeads(cards, s.highlight);
}

export function bind(root, store) {
  const part = within(root);
  const pager = part("heads-pager");
  pager
    .querySelector("[data-role=prev]")
    .addEventListener("click", () => store.dispatch(act.pageSet(store.getState().ui.page - 1)));
  pager
    .querySelector("[data-role=next]")
    .addEventListener("click", () => store.dispatch(act.pageSet(store.getState().ui.page + 1)));
}

// A head's learned sink weight per query, drawn as a column of its own in the weights view; null otherwise.
export function cardSink(view, head) {
  return view.view === "weights" ? sinkWeights(head, view.item) : null;
}

// The tooltip on a cell (the page's one: tooltip.js), and the row and column it lights up in every head.
function hover(view, cell, event, dispatch) {
  if (!cell) {
    showTip(null, event);
    dispatch(act.highlightSet(null));
    return;
  }
  const layer = view.heads.find((h) => h.layer === cell.layer && h.head.index === cell.head);
  const head = layer.head;
  const who = `${view.multiLayer ? `Layer ${cell.layer} · ` : ""}head ${cell.head}`;
  if (cell.sink) {
    showTip([who, sinkHover(cell.q, cardSink(view, head)[cell.q])], event);
    dispatch(act.highlightSet({ q: cell.q, k: null }));
    return;
  }
  const ok = view.eligible[cell.q][cell.k];
  const lines = [
    who,
    `query ${pos(cell.q)} ${pieceQuote(view.tokens[cell.q])} → key ${pos(cell.k)} ${pieceQuote((view.keyTokens || view.tokens)[cell.k])}`,
    ...(head.scores ? [`score ${head.scores[cell.q][cell.k].toFixed(4)}${ok ? "" : " (before masking)"}`] : []),
    ok
      ? `weight ${head.weights[cell.q][cell.k].toFixed(4)}`
      : `masked · weight ${head.weights[cell.q][cell.k].toFixed(4)}`,
  ];
  showTip(lines, event);
  dispatch(act.highlightSet({ q: cell.q, k: cell.k }));
}

// The legend: the scale's colours with numbers under them, the masked and blocked keys.
export function renderLegend(root, view) {
  root.replaceChildren();
  const s = view.scale;
  const perHead = view.view === "scores" && view.scoreScale === "head";
  const shown =
    view.view === "scores" && view.scoreScale === "clip" ? { ...s, min: -view.clipAbs, max: view.clipAbs } : s;
  const digits = view.view === "scores" ? 2 : 1;
  const scale = node("span", { className: "legend-scale" });
  const bar = node("span", { className: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${s.stops.join(", ")})`;
  const ticks = node("span", { className: "legend-ticks" });
  if (perHead) {
    ticks.append(node("span", {}, "−max"), node("span", {}, "0"), node("span", {}, "+max"));
  } else {
    for (const t of legendTicks(shown)) ticks.append(node("span", {}, (Math.abs(t) < 1e-9 ? 0 : t).toFixed(digits)));
  }
  scale.append(bar, ticks);
  const name = node(
    "span",
    { className: "legend-name" },
    view.view === "moved"
      ? "moved: weight × |v·W_O|, what each key gives the query (0 to the largest shown)"
      : view.view !== "scores"
        ? "attention weight"
        : perHead
          ? "score: each head on its own range (± under each head)"
          : view.scoreScale === "clip"
            ? `score, clipped at ±${view.clipAbs.toFixed(2)} (98% of scores inside)`
            : "score, one range over every head",
  );
  const item = (cls, text) => {
    const w = node("span", { className: "legend-item" });
    w.append(node("span", { className: `swatch ${cls}` }), node("span", {}, text));
    return w;
  };
  root.dataset.min = String(shown.min);
  root.dataset.max = String(shown.max);
  root.append(
    name,
    scale,
    item("sw-masked", "masked"),
    item("sw-blocked", "blocked by you"),
    item("sw-changed", "changed by the last toggle"),
  );
}

const maskedLists = new WeakMap(); // eligibility matrix -> its masked cells as "q-k,q-k,...": once a result

function maskedList(eligible) {
  if (!maskedLists.has(eligible)) maskedLists.set(eligible, maskedCells(eligible).join(","));
  return maskedLists.get(eligible);
}

// Returns the cards drawn: [{fig, canvas, ctx, layout, item, scale, base, lit, painted}]; `paintNow(card)` says which
// thumbnails are painted now (the others are left for paintHeads).
export function renderHeads(root, pager, view, handlers, paintNow = () => true) {
  const { items, page, pages } = pageOf(view.heads, view.page);
  root.replaceChildren();
  const cards = [];
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const wantLabels = items.length <= 12;
  // a page with a learned sink column gives it room: one column more than the keys
  const sinkCols = items.some((item) => cardSink(view, item.head)) ? 1 : 0;
  const cell = cellSize(Math.max(S, keys.length + sinkCols), items.length, widthOf(root, 900), wantLabels);
  const labels = wantLabels && cell >= 7;
  const keysOnly = layoutFor(S, { cell, labels, maxLabel: 6, cols: keys.length });
  // a head with a learned sink in the weights view: the same layout and one column more for it
  const withSink = layoutFor(S, { cell, labels, maxLabel: 6, cols: keys.length, sink: true });
  const masked = maskedList(view.eligible);
  for (const item of items) {
    const sink = cardSink(view, item.head);
    const layout = sink ? withSink : keysOnly;
    const fig = document.createElement("figure");
    fig.className = "head-card";
    fig.setAttribute("data-testid", "head-heatmap");
    fig.id = `head-${item.layer}-${item.head.index}`;
    fig.dataset.layer = String(item.layer);
    fig.dataset.head = String(item.head.index);
    fig.dataset.view = view.view;
    fig.dataset.maskedCells = masked;
    fig.dataset.hidden = (view.hidden || []).join(","); // key columns the sinks view hides, framed dashed
    fig.dataset.layout = JSON.stringify({ left: layout.left, top: layout.top, cell: layout.cell, sinkX: layout.sinkX });
    fig.tabIndex = 0;
    fig.setAttribute("role", "button");
    const isFocus = view.focus && view.focus[0] === item.layer && view.focus[1] === item.head.index;
    fig.setAttribute("aria-pressed", isFocus ? "true" : "false");
    // the moved view: a strip of what the head adds to the output at each query, named in the card's label too
    const who = view.multiLayer ? `Layer ${item.layer} head ${item.head.index}` : `Head ${item.head.index}`;
    const strip =
      view.view === "moved" ? contributionStrip(item.head, view.tokens, view.scale.stops, who, layout) : null;
    const adds = strip ? ` ${stripLabel(item.head.contribution, view.tokens, "It")}.` : "";
    fig.setAttribute(
      "aria-label",
      `Layer ${item.layer} head ${item.head.index}: ${view.view}.${adds} Press Enter to open it large.`,
    );
    const scale = headScale(view, item.head);
    const cap = document.createElement("figcaption");
    const name = node(
      "strong",
      {},
      view.multiLayer ? `L${item.layer} · H${item.head.index}` : `Head ${item.head.index}`,
    );
    const meta = node("span", { className: "meta" });
    const st = item.head.stats;
    meta.textContent = st ? `H̄ ${st.mean_entropy.toFixed(2)}` : "";
    // the weight on the sink keys (the hidden ones with sinks, else the first position), from the weights as computed
    if (st?.sink_mass != null) meta.textContent += ` · sink ${st.sink_mass.toFixed(2)}`;
    // a learned sink's mean weight over the queries (the column right of the keys)
    if (sinkCaption(st)) meta.textContent += ` · ${sinkCaption(st)}`;
    if (view.kvGroups < view.nHeads) meta.textContent += ` · kv ${item.head.kv_group}`;
    cap.append(name, meta);
    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-hidden", "true");
    const flags = healthFlags(st, view.multiLayer ? `L${item.layer} H` : "H");
    const foot = node("div", { className: "card-foot" });
    const badges = node("span", { className: "card-flags" });
    if (view.view === "scores" && view.scoreScale === "head") {
      const range = node("span", { className: "flag flag-range" }, `±${scale.max.toFixed(2)}`);
      range.title = "this head's colour range: its largest |score| over eligible cells";
      badges.append(range);
    }
    for (const f of flags) {
      const b = node("span", { className: `flag flag-${f.kind}` }, f.text);
      b.title = f.help;
      badges.append(b);
    }
    foot.append(badges);
    fig.dataset.flags = flags.map((f) => f.kind).join(",");
    fig.dataset.scaleMax = String(scale.max);
    if (handlers.onAblate) foot.append(ablateButton(fig, item, view, handlers.onAblate));
    fig.append(cap, canvas, ...(strip ? [strip] : []), foot);
    root.append(fig);
    const ctx = sizeCanvas(canvas, layout);
    if (sink) fig.dataset.sink = Array.from(sink).join(",");
    const card = { fig, canvas, ctx, layout, item, scale, sink };
    cards.push(card);
    canvas.addEventListener("mousemove", (e) => {
      if (e.sourceCapabilities?.firesTouchEvents) return; // a tap's mouse event: no hover to leave stuck over the cards
      const r = canvas.getBoundingClientRect();
      const at = cellAt(layout, e.clientX - r.left, e.clientY - r.top);
      handlers.onHover(at ? { ...at, layer: item.layer, head: item.head.index } : null, e);
    });
    canvas.addEventListener("mouseleave", () => handlers.onHover(null));
    fig.addEventListener("click", (e) => {
      const r = canvas.getBoundingClientRect();
      const at = cellAt(layout, e.clientX - r.left, e.clientY - r.top);
      handlers.onOpen(item.layer, item.head.index, at ? at.q : null);
    });
    fig.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        handlers.onOpen(item.layer, item.head.index, null);
      }
    });
  }
  paintHeads(cards.filter(paintNow), view);
  pager.hidden = pages <= 1;
  pager.querySelector("[data-role=page-label]").textContent =
    `Heads ${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + items.length} of ${view.heads.length}`;
  pager.querySelector("[data-role=prev]").disabled = page === 0;
  pager.querySelector("[data-role=next]").disabled = page >= pages - 1;
  return cards;
}

// Draw every visible head once. A float16 answer's heads are painted from their bit patterns, so drawing them
// widens none.
export function paintHeads(cards, view) {
  for (const card of cards) {
    const key = matrixKey(view.view);
    const m = halfRows(card.item.head, key) ?? card.item.head[key];
    drawHeatmap(card.ctx, {
      matrix: m,
      eligible: view.eligible,
      blocked: view.blocked,
      tokens: view.tokens,
      keyTokens: view.keyTokens,
      scale: card.scale,
      layout: card.layout,
      changed: view.changed,
      hidden: view.hidden,
      sink: card.sink,
    });
    card.base = null;
    card.lit = false;
    card.painted = true;
  }
}

// Move the linked row/column highlight: restore each head from a copy of its drawing, taken before its first
// highlight, and outline it. A head with no highlight drawn and none to draw is left as it is.
export function highlightHeads(cards, hl) {
  for (const card of cards) {
    card.fig.dataset.highlight = hl ? `${hl.q ?? ""},${hl.k ?? ""}` : "";
    if (!hl && !card.lit) continue;
    if (!card.base) {
      card.base = document.createElement("canvas");
      card.base.width = card.canvas.width;
      card.base.height = card.canvas.height;
      card.base.getContext("2d").drawImage(card.canvas, 0, 0);
    }
    repaintHighlight(card.canvas, card.base, card.layout, hl);
    card.lit = !!hl;
  }
}

// Every head shown (every page), drawn afresh with tick labels for the PNG export: [{canvas, label}].
// The layout of one exported head: cells of up to 24 px, labelled when there is room.
export function exportLayout(view) {
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const cell = Math.max(2, Math.min(24, Math.floor(220 / Math.max(S, keys.length))));
  return layoutFor(S, { cell, labels: cell >= 6, maxLabel: 8, cols: keys.length });
}

export function exportCards(view, layout = exportLayout(view)) {
  return view.heads.map((item) => {
    const canvas = document.createElement("canvas");
    drawHeatmap(sizeCanvas(canvas, layout), {
      matrix: item.head[matrixKey(view.view)],
      eligible: view.eligible,
      blocked: view.blocked,
      tokens: view.tokens,
      keyTokens: view.keyTokens,
      scale: headScale(view, item.head),
      layout,
      background: "#ffffff",
    });
    const scale = headScale(view, item.head);
    const range = view.view === "scores" && view.scoreScale === "head" ? ` (±${scale.max.toFixed(2)})` : "";
    return {
      canvas,
      label: `${view.multiLayer ? `L${item.layer} H${item.head.index}` : `Head ${item.head.index}`}${range}`,
    };
  });
}
