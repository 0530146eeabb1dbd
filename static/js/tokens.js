// The tokens panel (data-view="tokens"): one chip per position (click, Enter or Space marks it padding and back;
// hovering one lights its row and column up in every head; the chips are one tab stop, the arrow keys,
// Home and End move between them), the batch bar, the next-word predictions, the run's
// status and the "what changed" line (the page dimmed while a run is on its way, or marked stale after a failed
// one, is main.js's). A long list shows its first TOKENS_SHOWN chips until opened. A hover (state.highlight) draws
// nothing again: it moves the "lit" class between the chips already drawn.

import { renderBatchBar } from "./batch.js";
import { act } from "./actions.js";
import { selectView, tokenMasks } from "./selectors.js";
import { pieceQuote, pieceTitle, renderPiece, specialAt } from "./piece.js";
import { firstPosition, pos } from "./positions.js";
import { within } from "./dom.js";

export const TOKENS_SHOWN = 48; // beyond this many tokens the list starts collapsed
const MOVES = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

// The chip an arrow key, Home or End moves to from chip i of n (null: not a key the list takes).
export function moveToken(i, key, n) {
  if (key === "Home") return 0;
  if (key === "End") return n - 1;
  return key in MOVES ? Math.max(0, Math.min(n - 1, i + MOVES[key])) : null;
}

// What the view draws from but the highlight: while these stay, a hover only moves the "lit" class between chips.
function drawDeps(s) {
  return [
    s.run.result,
    s.run.status,
    s.run.rest,
    s.run.error,
    s.run.diff,
    s.run.full, // the batch bar
    s.run.lastAction, // the "what changed" line
    s.ui.masks,
    s.ui.sourcePadded,
    s.ui.item,
    s.panels.nextWords,
    s.tokensOpen,
  ];
}

export function deps(s) {
  return [...drawDeps(s), s.highlight];
}

// Each root's last whole draw: its drawDeps and the count positions were printed in.
const drawnFrom = new WeakMap();

function sameAs(a, b) {
  return !!b && a.length === b.length && a.every((x, i) => x === b[i]);
}

export function render(root, s, dispatch) {
  const part = within(root);
  const from = [...drawDeps(s), firstPosition()];
  if (sameAs(from, drawnFrom.get(root))) {
    // only the highlight changed (a hover over a head, a cell or a chip): the chips stay, their "lit" class moves
    lightTokens(part("tokens"), s.highlight);
    return;
  }
  drawnFrom.set(root, from);
  const r = s.run.result;
  renderStatus(part, s);
  if (!r) return;
  const view = selectView(s);
  const batched = !!r.config.batch;
  const hl = s.highlight;
  const open = !!s.tokensOpen || view.tokens.length <= TOKENS_SHOWN;
  renderTokens(
    part("tokens"),
    {
      tokens: open ? view.tokens : view.tokens.slice(0, TOKENS_SHOWN),
      masks: tokenMasks(s),
      locked: batched || !!view.keyTokens,
      lit: hl,
      special: (i) => specialAt(r, i),
    },
    {
      onPad: (i) => dispatch(act.tokenPadded(i, view.tokens[i])),
      onHover: (i) => dispatch(act.highlightSet(i === null ? null : { q: i, k: i })),
    },
  );
  const more = part("tokens-more");
  more.hidden = view.tokens.length <= TOKENS_SHOWN;
  more.textContent = open ? `Show the first ${TOKENS_SHOWN} tokens only` : `Show all ${view.tokens.length} tokens`;
  more.setAttribute("aria-expanded", open ? "true" : "false");
  renderBatchBar(part("batch-bar"), {
    full: s.run.full,
    item: view.item,
    sourceTokens: view.keyTokens,
    sourcePadded: view.masks.padded,
    onSourcePad: (i) => dispatch(act.sourcePadded(i)),
  });
  const slot = s.panels.nextWords;
  const late = slot.status === "ready" && JSON.stringify(slot.result?.tokens) === JSON.stringify(r.tokens);
  const words = r.config.next_word?.length ? r.config.next_word : late ? slot.result.config.next_word : [];
  renderNextWords(part("next-words"), r.tokens, words);
  renderSummary(part, s);
}

export function bind(root, store) {
  const part = within(root);
  part("batch-item").addEventListener("change", (e) => store.dispatch(act.itemSet(Number(e.target.value) || 0)));
  part("tokens-more").addEventListener("click", () => store.dispatch(act.tokensOpenSet(!store.getState().tokensOpen)));
}

function renderStatus(part, s) {
  const status = part("run-status");
  // a run in flight is announced once, by the busy indicator (busy.js); this line says only what a failure left
  status.textContent =
    s.run.status === "error" && s.run.result
      ? "The last run failed: the controls, the link and the views are back at the last run that worked."
      : "";
}

// "what changed": the last toggle's changes, or, after a failure, that it changed nothing.
export function summaryText(run) {
  // a failure is told once, where the person acted (actionerror.js); here it changed nothing: nothing to say
  if (run.status === "error" && run.error) return "";
  const d = run.diff;
  if (!d || !d.comparable) return "";
  const facts = [];
  const n = (k, one, many) => `${k} ${k === 1 ? one : many}`;
  if (d.newlyMasked.length) facts.push(`${n(d.newlyMasked.length, "cell", "cells")} became masked`);
  if (d.newlyEligible.length) facts.push(`${n(d.newlyEligible.length, "cell", "cells")} became eligible`);
  if (d.where && d.maxDelta > 1e-6) {
    const w = d.where;
    facts.push(`largest weight change ${d.maxDelta.toFixed(3)} (head ${w.head}, query ${pos(w.q)} → key ${pos(w.k)})`);
  } else {
    facts.push("no weight changed");
  }
  return `${run.lastAction ? `${run.lastAction}: ` : "Changed: "}${facts.join("; ")}.`;
}

function renderSummary(part, s) {
  const p = part("change-summary");
  p.textContent = summaryText(s.run);
  p.classList.toggle("bad", s.run.status === "error");
}

// Whether chip i is lit by the highlight {q, k} (null: none is).
export function litAt(lit, i) {
  return !!lit && (lit.q === i || lit.k === i);
}

// The highlight on chips already drawn: "lit" taken from the chips it left and put on the ones it reaches (at most
// two each way); no chip is drawn again.
export function lightTokens(root, lit) {
  for (const b of root.querySelectorAll("button.lit[data-index]")) {
    if (!litAt(lit, Number(b.dataset.index))) b.classList.remove("lit");
  }
  if (!lit) return;
  for (const i of new Set([lit.q, lit.k])) root.querySelector(`button[data-index="${i}"]`)?.classList.add("lit");
}

// The chip that holds the list's one tab stop (the last one focused), per list.
const stopOf = new WeakMap();
// The handlers of each list's last draw: a chip kept from an earlier draw calls these, not the ones it was made with.
const handlersOf = new WeakMap();
// What each chip's text was drawn from (its piece, whether it is special, its printed position).
const drawnAs = new WeakMap();

// The chips of `view.tokens` in `root`, kept where they are: a draw updates the chips already there and adds or
// removes only the difference, so an element under the pointer stays the same element. A run landing between the
// press and the release of a click used to draw every chip anew, and the click, its press on a chip that was gone,
// was lost.
export function renderTokens(root, view, handlers) {
  const focused = root.contains(document.activeElement) ? document.activeElement.dataset.index : null;
  const lit = view.lit || null;
  const stop = Math.min(stopOf.get(root) ?? 0, Math.max(0, view.tokens.length - 1));
  stopOf.set(root, stop);
  handlersOf.set(root, handlers);
  if (!root.dataset.keys) {
    // bound once a list: arrows move the focus (and the tab stop) along the chips
    root.dataset.keys = "1";
    root.addEventListener("keydown", (e) => {
      const chips = root.querySelectorAll("button[data-index]");
      const at = e.target instanceof Element ? e.target.closest("button[data-index]") : null;
      const to = at ? moveToken(Number(at.dataset.index), e.key, chips.length) : null;
      if (to == null) return;
      e.preventDefault();
      chips[to]?.focus();
    });
    root.addEventListener("focusin", (e) => {
      const at = e.target instanceof Element ? e.target.closest("button[data-index]") : null;
      if (!at) return;
      stopOf.set(root, Number(at.dataset.index));
      for (const b of root.querySelectorAll("button[data-index]")) b.tabIndex = b === at ? 0 : -1;
    });
  }
  const kept = [...root.children];
  for (const extra of kept.slice(view.tokens.length)) extra.remove();
  view.tokens.forEach((token, i) => {
    const b = kept[i] ?? newChip(root, i);
    b.className = "token";
    b.tabIndex = i === stop ? 0 : -1;
    const padded = view.masks.padded.includes(i);
    b.classList.toggle("padded", padded);
    b.classList.toggle("lit", litAt(lit, i));
    b.setAttribute("aria-pressed", padded ? "true" : "false");
    b.title = padded
      ? `Position ${pos(i)} is padding: click to make it a real token`
      : `Click to mark position ${pos(i)} as padding`;
    b.removeAttribute("aria-disabled");
    if (view.locked) {
      // a batch item's padding comes from its length, not from a click
      b.setAttribute("aria-disabled", "true");
      b.title = padded ? `Position ${pos(i)} pads this item to the batch's longest text` : `Position ${pos(i)}`;
    }
    const special = !!view.special?.(i);
    b.classList.toggle("special", special);
    b.title = `${pieceTitle(token, special)}\n${b.title}`;
    b.setAttribute("aria-label", `${pos(i)} ${pieceTitle(token, special)}`);
    const as = `${pos(i)}\u0000${special}\u0000${token}`;
    if (drawnAs.get(b) !== as) {
      drawnAs.set(b, as);
      const idx = document.createElement("span");
      idx.className = "idx";
      idx.textContent = String(pos(i));
      const text = renderPiece(token, { special, tag: "span" });
      text.classList.add("text");
      text.title = "";
      b.replaceChildren(idx, text);
    }
    // the focus stays on the chip it was on, without scrolling to it: a draw of the chips can come while the page
    // shows an answer further down (a draw out of sight waits for the paint), and must not pull the page back up
    if (focused === String(i) && document.activeElement !== b) b.focus({ preventScroll: true });
  });
}

// A chip for position `i`, appended to `root`; its listeners call the list's handlers of the time.
function newChip(root, i) {
  const b = document.createElement("button");
  b.type = "button";
  b.setAttribute("data-testid", "token");
  b.dataset.index = String(i);
  b.addEventListener("click", () => {
    if (b.getAttribute("aria-disabled") !== "true") handlersOf.get(root).onPad(i);
  });
  b.addEventListener("mouseenter", () => handlersOf.get(root).onHover(i));
  b.addEventListener("mouseleave", () => handlersOf.get(root).onHover(null));
  root.append(b);
  return b;
}

// What a model that predicts tokens (induction) expects next at each position: the result's `config.next_word`
// ({token, p} per position), one chip per position under the tokens, ✓ when it is the token that does come next.
export function nextWordRows(tokens, nextWord) {
  if (!nextWord || !nextWord.length) return [];
  return nextWord.map((w, i) => {
    const next = i + 1 < tokens.length ? tokens[i + 1] : null;
    return { position: i, token: tokens[i], predicted: w.token, p: w.p, right: next != null && w.token === next };
  });
}

export function renderNextWords(root, tokens, nextWord) {
  const rows = nextWordRows(tokens, nextWord);
  root.hidden = !rows.length;
  root.replaceChildren();
  if (!rows.length) return;
  const right = rows.filter((r) => r.right).length;
  const head = document.createElement("p");
  head.className = "muted small nw-head";
  head.textContent = `The model's next-word prediction after each position (top-1, probability); ✓ = the word that comes next: ${right} of ${rows.length - 1}.`;
  const list = document.createElement("ol");
  list.className = "next-words";
  for (const r of rows) {
    const li = document.createElement("li");
    li.className = `nw${r.right ? " right" : ""}`;
    li.dataset.position = String(r.position);
    li.dataset.predicted = r.predicted;
    li.dataset.p = String(r.p);
    li.title = `after position ${pos(r.position)} ${pieceQuote(r.token)} the model predicts ${pieceQuote(r.predicted)} with p = ${r.p.toFixed(3)}`;
    const idx = document.createElement("span");
    idx.className = "idx";
    idx.textContent = String(r.position);
    const word = document.createElement("span");
    word.className = "word";
    word.append(`${r.right ? "✓ " : ""}`, renderPiece(r.predicted));
    const p = document.createElement("span");
    p.className = "p";
    p.textContent = r.p.toFixed(2);
    li.append(idx, word, p);
    list.append(li);
  }
  root.append(head, list);
}
