// The grid of per-head heatmaps (small multiples), paged so that 72 heads stay fast and readable.
// Hover a cell: tooltip and linked row/column in every head. Click or Enter on a head: it opens large.
// Each card carries an "ablate" toggle (its own button: pressing it never opens the head) and the head's health
// flags from its stats: dead (near-uniform), identical to another head, W_Q = W_K (symmetric scores), the rank of
// W_Q W_Kᵀ.

import { cellAt, drawHeatmap, drawHighlight, layoutFor, maskedCells, sizeCanvas } from "./heatmap.js";

export const PAGE_SIZE = 24;
export const TARGET_PLOT_PX = { few: 190, many: 130 }; // plot side for <= 4 heads on a page, and for more
export const MAX_CELL = 34;

// The heads on a page: [{layer, head}] in layer-major order.
export function pageOf(all, page, size = PAGE_SIZE) {
  const pages = Math.max(1, Math.ceil(all.length / size));
  const p = Math.min(Math.max(0, page), pages - 1);
  return { page: p, pages, items: all.slice(p * size, (p + 1) * size) };
}

export const CARD_CHROME_PX = 24;

// A head's health from its stats: [{kind, text, help}] for dead, identical, W_Q = W_K and a rank-deficient W_Q W_Kᵀ, and the
// QK rank always (kind "rank"). `prefix` names a sibling head ("L1 H" or "H").
export function healthFlags(st, prefix = "H") {
  if (!st) return [];
  const out = [];
  if (st.dead) {
    const kl = st.kl_from_uniform == null ? "" : ` (KL from uniform ${st.kl_from_uniform.toFixed(3)} nats)`;
    out.push({ kind: "dead", text: "dead", help: `near-uniform over the keys it may see${kl}: it mixes, it does not pick` });
  }
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
    show(onAblate(item.layer, item.head.index));
  });
  b.addEventListener("keydown", (e) => e.stopPropagation());
  return b;
} // card padding, border and the gap between cards

// Cell size so that a page of heads fits the grid's width: up to 4 heads share one row, more get small multiples.
export function cellSize(seqLen, headsOnPage, available = 900, labels = true) {
  const target = headsOnPage <= 4 ? TARGET_PLOT_PX.few : TARGET_PLOT_PX.many;
  let cell = Math.max(2, Math.min(MAX_CELL, Math.floor(target / seqLen)));
  const perRow = Math.min(headsOnPage, 4);
  while (cell > 4 && perRow * (layoutFor(seqLen, { cell, labels, maxLabel: 6 }).width + CARD_CHROME_PX) > available) {
    cell -= 1;
  }
  return cell;
}

const cards = []; // {canvas, ctx, layout, item}

export function renderHeads(root, pager, view, handlers) {
  const { items, page, pages } = pageOf(view.heads, view.page);
  root.replaceChildren();
  cards.length = 0;
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const wantLabels = items.length <= 12;
  const cell = cellSize(Math.max(S, keys.length), items.length, root.clientWidth || 900, wantLabels);
  const labels = wantLabels && cell >= 7;
  const layout = layoutFor(S, { cell, labels, maxLabel: 6, cols: keys.length });
  const masked = maskedCells(view.eligible).join(",");
  for (const item of items) {
    const fig = document.createElement("figure");
    fig.className = "head-card";
    fig.dataset.testid = "head-heatmap";
    fig.setAttribute("data-testid", "head-heatmap");
    fig.dataset.layer = String(item.layer);
    fig.dataset.head = String(item.head.index);
    fig.dataset.view = view.view;
    fig.dataset.maskedCells = masked;
    fig.dataset.layout = JSON.stringify({ left: layout.left, top: layout.top, cell: layout.cell });
    fig.tabIndex = 0;
    fig.setAttribute("role", "button");
    const isFocus = view.focus && view.focus[0] === item.layer && view.focus[1] === item.head.index;
    fig.setAttribute("aria-pressed", isFocus ? "true" : "false");
    fig.setAttribute(
      "aria-label",
      `Layer ${item.layer} head ${item.head.index}: ${view.view}. Press Enter to open it large.`,
    );
    const cap = document.createElement("figcaption");
    const name = document.createElement("strong");
    name.textContent = view.multiLayer ? `L${item.layer} · H${item.head.index}` : `Head ${item.head.index}`;
    const meta = document.createElement("span");
    meta.className = "meta";
    const st = item.head.stats;
    meta.textContent = st ? `H̄ ${st.mean_entropy.toFixed(2)}` : "";
    if (view.kvGroups < view.nHeads) meta.textContent += ` · kv ${item.head.kv_group}`;
    cap.append(name, meta);
    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-hidden", "true");
    const flags = healthFlags(st, view.multiLayer ? `L${item.layer} H` : "H");
    const foot = document.createElement("div");
    foot.className = "card-foot";
    const badges = document.createElement("span");
    badges.className = "card-flags";
    for (const f of flags) {
      const b = document.createElement("span");
      b.className = `flag flag-${f.kind}`;
      b.textContent = f.text;
      b.title = f.help;
      badges.append(b);
    }
    foot.append(badges);
    fig.dataset.flags = flags.map((f) => f.kind).join(",");
    if (handlers.onAblate) foot.append(ablateButton(fig, item, view, handlers.onAblate));
    fig.append(cap, canvas, foot);
    root.append(fig);
    const ctx = sizeCanvas(canvas, layout);
    const card = { fig, canvas, ctx, layout, item };
    cards.push(card);
    canvas.addEventListener("mousemove", (e) => {
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
  paintHeads(view, view.highlight);
  pager.hidden = pages <= 1;
  pager.querySelector("[data-role=page-label]").textContent =
    `Heads ${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + items.length} of ${view.heads.length}`;
  pager.querySelector("[data-role=prev]").disabled = page === 0;
  pager.querySelector("[data-role=next]").disabled = page >= pages - 1;
  return { page, pages };
}

// Draw every visible head once, keep a copy, then paint the highlight over it.
export function paintHeads(view, highlight) {
  for (const card of cards) {
    const m = view.view === "scores" ? card.item.head.scores : card.item.head.weights;
    drawHeatmap(card.ctx, {
      matrix: m,
      eligible: view.eligible,
      blocked: view.blocked,
      tokens: view.tokens,
      keyTokens: view.keyTokens,
      scale: view.scale,
      layout: card.layout,
      changed: view.changed,
    });
    card.base = document.createElement("canvas");
    card.base.width = card.canvas.width;
    card.base.height = card.canvas.height;
    card.base.getContext("2d").drawImage(card.canvas, 0, 0);
  }
  highlightHeads(highlight);
}

let pending = null;

// Move the linked row/column highlight: restore each head from its copy and outline; at most once a frame.
export function highlightHeads(highlight) {
  const first = pending === null;
  pending = { highlight };
  if (!first) return;
  requestAnimationFrame(() => {
    const hl = pending.highlight;
    pending = null;
    for (const card of cards) {
      card.fig.dataset.highlight = hl ? `${hl.q ?? ""},${hl.k ?? ""}` : "";
      if (!card.base) continue;
      const ctx = card.ctx;
      ctx.save();
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.drawImage(card.base, 0, 0);
      ctx.restore();
      drawHighlight(ctx, card.layout, hl);
    }
  });
}

// The canvases of the visible heads, for the PNG export.
export function visibleCanvases() {
  return cards.map((c) => ({ canvas: c.canvas, item: c.item }));
}
