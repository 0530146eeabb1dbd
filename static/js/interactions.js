// Pointer and keyboard on the views: padding a token, blocking a cell, opening a head, choosing the query, hover
// highlights and the tooltip. Handlers close over the context ({state, app, actions}) that main.js hands in.

import { highlightHeads } from "./heads.js";
import { toggleBlocked, togglePadded } from "./masks.js";
import { renderTokens } from "./tokens.js";

const $ = (id) => document.getElementById(id);

// ctx.actions needs: render, schedule, onPair.
export function createInteractions({ state, app, actions }) {
  const render = (...a) => actions.render(...a);
  const schedule = (...a) => actions.schedule(...a);
  const onPair = (...a) => actions.onPair(...a);

  function onPad(i) {
    state.masks = { ...state.masks, padded: togglePadded(state.masks.padded, i) };
    const on = state.masks.padded.includes(i);
    const tok = app.result ? app.result.tokens[i] : i;
    schedule(`position ${i} “${tok}” ${on ? "marked padding" : "is a real token again"}`);
    renderTokens($("tokens"), { tokens: app.result.tokens, masks: state.masks }, { onPad, onHover: onTokenHover });
  }

  // Cross-attention: mark a source position padding (no query attends to it) and back.
  function onSourcePad(i) {
    state.sourcePadded = togglePadded(state.sourcePadded || [], i);
    const on = state.sourcePadded.includes(i);
    schedule(`source position ${i} ${on ? "marked padding" : "is a real key again"}`);
  }

  function onCellToggle(q, k, event) {
    if (event && event.shiftKey) {
      onPair(q, k);
      return;
    }
    const was = state.masks.blocked.some(([a, b]) => a === q && b === k);
    state.masks = { ...state.masks, blocked: toggleBlocked(state.masks.blocked, q, k) };
    schedule(`cell query ${q} → key ${k} ${was ? "unblocked" : "blocked"}`);
  }

  function onOpen(layer, head, query) {
    state.focus = [layer, head];
    if (query !== null && query !== undefined) state.query = query;
    render();
    $("focus-plot").scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  function onQuery(q) {
    state.query = q;
    render();
  }

  function setHighlight(h) {
    app.highlight = h;
    if (app.view) highlightHeads(h);
    document.querySelectorAll("[data-testid=token]").forEach((b) => {
      const i = Number(b.dataset.index);
      b.classList.toggle("lit", !!h && (h.q === i || h.k === i));
    });
  }

  function onTokenHover(i) {
    setHighlight(i === null ? null : { q: i, k: i });
  }

  function onCellHover(cell, event) {
    const tip = $("tooltip");
    if (!cell || !app.view) {
      tip.hidden = true;
      setHighlight(null);
      return;
    }
    const v = app.view;
    const layer = app.result.layers.find((l) => l.index === cell.layer);
    const head = layer.heads[cell.head];
    const ok = v.eligible[cell.q][cell.k];
    const lines = [
      `${v.multiLayer ? `Layer ${cell.layer} · ` : ""}head ${cell.head}`,
      `query ${cell.q} “${v.tokens[cell.q]}” → key ${cell.k} “${(v.keyTokens || v.tokens)[cell.k]}”`,
      `score ${head.scores[cell.q][cell.k].toFixed(4)}${ok ? "" : " (before masking)"}`,
      ok ? `weight ${head.weights[cell.q][cell.k].toFixed(4)}` : `masked · weight ${head.weights[cell.q][cell.k].toFixed(4)}`,
    ];
    tip.replaceChildren(...lines.map((l) => Object.assign(document.createElement("div"), { textContent: l })));
    tip.hidden = false;
    const x = Math.min(window.innerWidth - 300, event.clientX + 14);
    tip.style.left = `${x + window.scrollX}px`;
    tip.style.top = `${event.clientY + window.scrollY + 14}px`;
    setHighlight({ q: cell.q, k: cell.k });
  }

  return { onPad, onSourcePad, onCellToggle, onOpen, onQuery, setHighlight, onTokenHover, onCellHover };
}
