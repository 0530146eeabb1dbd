// The small read-only panels: the heads notice, the colour legend, the "what changed" summary, the numbers behind
// the large head, the error banner and the busy state. Each draws from what it is given; none keeps state.

import { ApiError, describeError } from "./api.js";
import { pairLines } from "./masks.js";
import { renderNumbers } from "./matrices.js";

const $ = (id) => document.getElementById(id);

export function renderNotice(notice) {
  const n = $("heads-notice");
  n.textContent = notice;
  n.hidden = !notice;
}

export function renderLegend(view) {
  const root = $("legend");
  root.replaceChildren();
  const s = view.scale;
  const bar = document.createElement("span");
  bar.className = "legend-bar";
  bar.style.background = `linear-gradient(to right, ${s.stops.join(", ")})`;
  const lo = document.createElement("span");
  lo.textContent = s.min.toFixed(view.view === "scores" ? 2 : 0);
  const hi = document.createElement("span");
  hi.textContent = s.max.toFixed(view.view === "scores" ? 2 : 0);
  const name = document.createElement("span");
  name.className = "legend-name";
  name.textContent = s.label;
  const item = (cls, text) => {
    const w = document.createElement("span");
    w.className = "legend-item";
    const sw = document.createElement("span");
    sw.className = `swatch ${cls}`;
    const t = document.createElement("span");
    t.textContent = text;
    w.append(sw, t);
    return w;
  };
  root.append(name, lo, bar, hi, item("sw-masked", "masked"), item("sw-blocked", "blocked by you"), item("sw-changed", "changed by the last toggle"));
}

// `diff` is diffResults() of the last two results; `lastAction` names what the user did between them.
export function renderSummary(view, diff, lastAction) {
  const p = $("change-summary");
  const d = diff;
  if (!d || !d.comparable) {
    p.textContent = "";
    return;
  }
  const facts = [];
  const n = (k, one, many) => `${k} ${k === 1 ? one : many}`;
  if (d.newlyMasked.length) facts.push(`${n(d.newlyMasked.length, "cell", "cells")} became masked`);
  if (d.newlyEligible.length) facts.push(`${n(d.newlyEligible.length, "cell", "cells")} became eligible`);
  if (d.where && d.maxDelta > 1e-6) {
    const w = d.where;
    facts.push(`largest weight change ${d.maxDelta.toFixed(3)} (head ${w.head}, query ${w.q} → key ${w.k})`);
  } else {
    facts.push("no weight changed");
  }
  p.textContent = `${lastAction ? `${lastAction}: ` : "Changed: "}${facts.join("; ")}.`;
  p.hidden = !view;
}

export function renderNumbersPanel(view) {
  const d = $("numbers");
  const h = view.focusHead;
  if (!h.q && !h.contexts) {
    d.hidden = true;
    return;
  }
  d.hidden = false;
  const layer = view.layer;
  renderNumbers($("numbers-body"), view.tokens, [
    [`Q (head ${h.index})`, h.q],
    [`K (kv group ${h.kv_group})`, h.k],
    [`V (kv group ${h.kv_group})`, h.v],
    [`context = weights · V (head ${h.index})`, h.contexts],
    ["output", layer.output],
  ]);
}

// ---- errors, busy ---------------------------------------------------------------------------------------------

export function showError(err) {
  const { message, hint } = describeError(err);
  const b = $("error-banner");
  b.querySelector("[data-role=message]").textContent = message;
  b.querySelector("[data-role=hint]").textContent = hint;
  b.hidden = false;
  b.dataset.code = err instanceof ApiError ? err.code || "" : "network";
  $("run-status").textContent = "last run failed; the views show the previous result";
}

export function hideError() {
  $("error-banner").hidden = true;
}

export function setBusy(busy) {
  $("views").setAttribute("aria-busy", busy ? "true" : "false");
  document.body.classList.toggle("busy", busy);
  $("run-status").textContent = busy ? "computing…" : "";
}

// The eligible-pair counts beside the mask controls; hidden when the result has none (a batch, a source).
export function renderPairs(el, pairs) {
  const lines = pairLines(pairs);
  el.hidden = !lines.length;
  el.replaceChildren(
    ...lines.map((l) => {
      const li = document.createElement("li");
      li.dataset.mask = l.name;
      li.dataset.count = String(l.count);
      li.dataset.total = String(l.total);
      li.textContent = l.text;
      return li;
    }),
  );
}
