// Batches and cross-attention on the page. A batch (`texts`) comes back with a leading batch axis on every matrix
// (B x S x S per head), per-item stats, `batch_tokens` and `batch_padding`; `itemResult` cuts one item out of it,
// shaped like a single-sequence result, so every view draws it unchanged. Cross-attention (`source`) comes back
// S_q x S_k with `source_tokens` naming the key axis; the views take those as `keyTokens`. Pure helpers on top;
// the render functions only draw.

import { node } from "./dom.js";
import { renderPiece } from "./piece.js";
import { pos } from "./positions.js";

// Item b of a batched result, shaped like a one-sequence result (a result without a batch comes back as it is).
export function itemResult(r, b) {
  const B = r.config.batch;
  if (!B) return r;
  const i = Math.max(0, Math.min(B - 1, b));
  const pick = (x) => (x == null ? x : x[i]);
  return {
    ...r,
    tokens: r.batch_tokens[i],
    eligible: r.eligible[i],
    // the server's grids are B x S x S: each item's own reasons (its padding is its own length's)
    reasons: r.reasons
      ? Object.fromEntries(Object.entries(r.reasons).map(([name, grids]) => [name, grids[i]]))
      : r.reasons,
    masks: { ...r.masks, padding: r.batch_padding[i] },
    layers: r.layers.map((l) => ({
      ...l,
      output: pick(l.output),
      head_similarity: pick(l.head_similarity),
      heads: l.heads.map((h) => ({
        ...h,
        scores: pick(h.scores),
        weights: pick(h.weights),
        contexts: pick(h.contexts),
        q: pick(h.q),
        k: pick(h.k),
        v: pick(h.v),
        stats: pick(h.stats),
        value_norms: pick(h.value_norms),
        contribution: pick(h.contribution),
      })),
    })),
    item: i,
  };
}

// One line per item for the item menu: "1: [CLS] it ran [SEP] (4 of 9 real)".
export function itemLabels(r) {
  if (!r.config.batch) return [];
  return r.batch_tokens.map((tokens, i) => {
    const real = r.batch_padding[i].filter(Boolean).length;
    const words = tokens.slice(0, real).join(" ");
    return `${i}: ${words.length > 48 ? `${words.slice(0, 47)}…` : words} (${real} of ${tokens.length} real)`;
  });
}

// The item menu and the source chips. view: {full, item, sourceTokens, sourcePadded, onItem, onSourcePad}
export function renderBatchBar(root, view) {
  const r = view.full;
  const labels = r ? itemLabels(r) : [];
  const sel = root.querySelector("#batch-item");
  const wrap = root.querySelector("[data-role=batch]");
  wrap.hidden = !labels.length;
  // the menu is rebuilt only when its items change (compared with what it shows, not with a cached key)
  if ([...sel.options].map((o) => o.textContent).join("\n") !== labels.join("\n")) {
    sel.replaceChildren(
      ...labels.map((t, i) => Object.assign(document.createElement("option"), { value: String(i), textContent: t })),
    );
  }
  if (labels.length) {
    sel.value = String(view.item);
    root.querySelector("[data-role=batch-note]").textContent =
      `A batch of ${r.config.batch}, padded to ${r.tokens.length} positions: every matrix is ` +
      `${r.config.batch} × ${r.tokens.length} × ${r.tokens.length} per head. The views show item ${view.item}; ` +
      "its padding positions come from its length. Head types and decoding run this item on its own; " +
      "Test a claim changes an item inside the batch and checks the others stay put.";
  }
  const src = root.querySelector("[data-role=source]");
  const chips = root.querySelector("#source-tokens");
  src.hidden = !view.sourceTokens;
  if (!view.sourceTokens) {
    chips.replaceChildren();
    return;
  }
  const focused = chips.contains(document.activeElement) ? document.activeElement.dataset.index : null;
  chips.replaceChildren(
    ...view.sourceTokens.map((t, i) => {
      const b = node("button", { type: "button", className: "token source-token" });
      b.setAttribute("data-testid", "source-token");
      b.dataset.index = String(i);
      const padded = view.sourcePadded.includes(i);
      b.classList.toggle("padded", padded);
      b.setAttribute("aria-pressed", padded ? "true" : "false");
      b.title = padded
        ? `Source position ${pos(i)} is padding: click to make it a real key`
        : `Click to mark source position ${pos(i)} as padding`;
      const text = renderPiece(t, { tag: "span" });
      text.classList.add("text");
      b.append(node("span", { className: "idx" }, String(pos(i))), text);
      b.addEventListener("click", () => view.onSourcePad(i));
      return b;
    }),
  );
  // kept on the chip it was on, without scrolling the page to it (a redraw can come while an answer below is shown)
  if (focused != null) chips.querySelector(`[data-index="${focused}"]`)?.focus({ preventScroll: true });
}
