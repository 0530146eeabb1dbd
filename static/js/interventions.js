// Interventions (POST /api/intervene): knock heads out (zero or mean) and set single attention weights by hand,
// then compare the model before and after: the affected heads side by side, how far each layer's output moved,
// and for a model that predicts tokens, its top predictions and loss before and after.
// Pure helpers on top (a test imports them); `renderIntervention` only draws. The interventions' settings (the heads
// knocked out, the weights set) are declared in interventionsettings.js.

import { findAblation } from "./interventionsettings.js";
import { renderDeltaCharts } from "./claims.js";
import { VIRIDIS } from "./colors.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { node } from "./dom.js";
import { pieceLabel } from "./piece.js";
import { pos } from "./positions.js";

export const EXTRA_HEADS = 4; // heads shown besides the affected ones: those whose weights moved most
export const MOVED = 1e-6; // a weight change below this is "did not move"

export function headName(layer, head, multiLayer = true) {
  return multiLayer ? `L${layer} H${head}` : `H${head}`;
}

// Drop interventions on heads the current result does not have (a model or head count changed).
export function keepValid(list, nLayers, nHeads) {
  return list.filter((x) => x.layer < nLayers && x.head < nHeads);
}

// The heads the interventions touch, once each, in (layer, head) order.
export function affectedHeads(ablate, edits) {
  const seen = new Map();
  for (const x of [...ablate, ...edits]) seen.set(`${x.layer}.${x.head}`, { layer: x.layer, head: x.head });
  return [...seen.values()].sort((a, b) => a.layer - b.layer || a.head - b.head);
}

// max |after - before| of each head's weights present in both results: [{layer, head, maxAbs}].
export function weightChanges(before, after) {
  const out = [];
  for (const lb of before?.layers || []) {
    const la = (after?.layers || []).find((l) => l.index === lb.index);
    if (!la) continue;
    for (const hb of lb.heads) {
      const ha = la.heads[hb.index];
      if (!ha || !hb.weights || !ha.weights) continue;
      let m = 0;
      hb.weights.forEach((row, q) =>
        row.forEach((v, k) => {
          const d = Math.abs(ha.weights[q][k] - v);
          if (d > m) m = d;
        }),
      );
      out.push({ layer: lb.index, head: hb.index, maxAbs: m });
    }
  }
  return out;
}

// The heads to draw before/after: every affected head, then up to `extra` others whose weights moved most.
export function shownHeads(before, after, affected, extra = EXTRA_HEADS) {
  const changes = weightChanges(before, after);
  const key = (x) => `${x.layer}.${x.head}`;
  const byKey = new Map(changes.map((c) => [key(c), c]));
  const want = new Set(affected.map(key));
  const first = affected.filter((a) => byKey.has(key(a))).map((a) => ({ ...byKey.get(key(a)), affected: true }));
  const rest = changes
    .filter((c) => !want.has(key(c)) && c.maxAbs > MOVED)
    .sort((a, b) => b.maxAbs - a.maxAbs)
    .slice(0, extra)
    .map((c) => ({ ...c, affected: false }));
  return [...first, ...rest];
}

// One row per position for a model that predicts tokens: what comes next, the top-1 guess before and after, and
// whether the guess changed. losses hold S-1 numbers: the loss at position i is for predicting token i+1.
export function predictionRows(tokens, predictions, lossesBefore, lossesAfter) {
  if (!predictions) return [];
  return tokens.map((token, i) => {
    const before = predictions.before[i]?.[0] ?? null;
    const after = predictions.after[i]?.[0] ?? null;
    const next = i + 1 < tokens.length ? tokens[i + 1] : null;
    return {
      position: i,
      token,
      next,
      before,
      after,
      beforeTop: predictions.before[i] || [],
      afterTop: predictions.after[i] || [],
      changed: !!before && !!after && before.token !== after.token,
      rightBefore: next != null && before?.token === next,
      rightAfter: next != null && after?.token === next,
      lossBefore: lossesBefore?.[i] ?? null,
      lossAfter: lossesAfter?.[i] ?? null,
    };
  });
}

// Positions whose top-1 prediction changed.
export function flippedPositions(predictions) {
  if (!predictions) return [];
  return predictions.before.flatMap((row, i) =>
    row[0] && predictions.after[i]?.[0] && row[0].token !== predictions.after[i][0].token ? [i] : [],
  );
}

export function describeInterventions(ablate, edits, multiLayer = true) {
  const parts = ablate.map(
    (a) => `${headName(a.layer, a.head, multiLayer)} ${a.mode === "mean" ? "mean-ablated" : "zeroed"}`,
  );
  for (const e of edits)
    parts.push(`${headName(e.layer, e.head, multiLayer)} weight ${pos(e.query)}→${pos(e.key)} set to ${e.weight}`);
  return parts.join(" · ");
}

function heatmap(title, head, eligible, tokens, cell) {
  const fig = node("figure", { className: "iv-map" });
  fig.append(node("figcaption", {}, title));
  const canvas = document.createElement("canvas");
  const L = layoutFor(tokens.length, { cell, labels: cell >= 7, maxLabel: 6 });
  drawHeatmap(sizeCanvas(canvas, L), {
    matrix: head.weights,
    eligible,
    tokens,
    layout: L,
    scale: { stops: VIRIDIS, min: 0, max: 1 },
  });
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `${title}: attention weights`);
  fig.append(canvas);
  return fig;
}

// The loss of a guess spread evenly over a vocabulary of V tokens: ln V nats, what a model that knows nothing
// scores. null when the model has no vocabulary to guess from.
export function chanceLoss(vocabSize) {
  return Number.isInteger(vocabSize) && vocabSize > 1 ? Math.log(vocabSize) : null;
}

// How a loss sits against chance, in words: "0.518 above chance", "1.691 below chance", "at chance".
export function againstChance(loss, chance) {
  const d = loss - chance;
  if (Math.abs(d) < 0.0005) return "at chance";
  return `${Math.abs(d).toFixed(3)} ${d > 0 ? "above" : "below"} chance`;
}

// An ablated head that nothing else edits keeps its own weights exactly: its context is replaced after them.
function unchangedByAblation(h, ablated, edited) {
  return h.affected && ablated && !edited && h.maxAbs <= MOVED;
}

function fmtLoss(v) {
  return v == null ? "–" : v.toFixed(3);
}

function predictionTable(rows) {
  const table = node("table", { className: "iv-preds" });
  table.setAttribute("data-testid", "intervention-predictions");
  const head = node("tr");
  for (const h of ["pos", "token", "next", "top-1 before", "top-1 after", "loss before", "loss after"]) {
    const th = node("th", { scope: "col" }, h);
    head.append(th);
  }
  table.append(node("thead"));
  table.tHead.append(head);
  const body = node("tbody");
  const guess = (g, right) => (g ? `${right ? "✓ " : ""}${pieceLabel(g.token)} ${g.p.toFixed(2)}` : "–");
  for (const r of rows) {
    const tr = node("tr", { className: r.changed ? "flipped" : "" });
    tr.dataset.position = String(r.position);
    tr.dataset.changed = String(r.changed);
    tr.dataset.before = r.before?.token ?? "";
    tr.dataset.after = r.after?.token ?? "";
    const cells = [
      String(r.position),
      pieceLabel(r.token),
      r.next != null ? pieceLabel(r.next) : "–",
      guess(r.before, r.rightBefore),
      `${r.changed ? "⚠ " : ""}${guess(r.after, r.rightAfter)}`,
      fmtLoss(r.lossBefore),
      fmtLoss(r.lossAfter),
    ];
    cells.forEach((c, i) => {
      const td = node(i === 0 ? "th" : "td", {}, c);
      if (i === 0) td.scope = "row";
      if (i === 3) td.title = r.beforeTop.map((g) => `${pieceLabel(g.token)} ${g.p.toFixed(3)}`).join(", ");
      if (i === 4) td.title = r.afterTop.map((g) => `${pieceLabel(g.token)} ${g.p.toFixed(3)}`).join(", ");
      if (i === 6 && r.lossBefore != null && r.lossAfter != null && r.lossAfter > r.lossBefore + 0.5)
        td.className = "worse";
      tr.append(td);
    });
    body.append(tr);
  }
  table.append(body);
  return table;
}

// view: {result, status, message, multiLayer, note, vocabSize}
export function renderIntervention(root, view) {
  root.replaceChildren();
  const r = view.result;
  if (!r) return;
  const box = node("div", { className: "iv-result" });
  box.setAttribute("data-testid", "intervention-result");
  box.dataset.lossBefore = r.loss_before == null ? "" : String(r.loss_before);
  box.dataset.lossAfter = r.loss_after == null ? "" : String(r.loss_after);
  const flipped = flippedPositions(r.predictions);
  box.dataset.flipped = flipped.join(",");
  box.dataset.ablated = String((r.ablate || []).length);
  box.dataset.edited = String((r.edit || []).length);
  root.append(box);
  box.append(
    node(
      "p",
      { className: "iv-what" },
      `Intervention: ${describeInterventions(r.ablate || [], r.edit || [], view.multiLayer)}.`,
    ),
  );
  if (r.loss_before != null && r.loss_after != null) {
    const d = r.loss_after - r.loss_before;
    const p = node("p", { className: `iv-loss${d > 0.5 ? " worse" : ""}` });
    p.textContent =
      `Mean next-token loss: ${r.loss_before.toFixed(3)} → ${r.loss_after.toFixed(3)} nats ` +
      `(${d >= 0 ? "+" : ""}${d.toFixed(3)}); top-1 prediction changed at ${flipped.length} of ${r.tokens.length} positions.`;
    box.append(p);
    const chance = chanceLoss(view.vocabSize);
    if (chance != null) {
      const c = node("p", { className: "iv-chance small" });
      c.dataset.chance = String(chance);
      c.textContent =
        `Chance, a uniform guess over the ${view.vocabSize.toLocaleString("en-US")}-token vocabulary, is ln ${view.vocabSize} = ` +
        `${chance.toFixed(3)} nats: before ${againstChance(r.loss_before, chance)}, after ${againstChance(r.loss_after, chance)}.`;
      box.append(c);
    }
  }
  if (r.predictions) {
    const rows = predictionRows(r.tokens, r.predictions, r.losses_before, r.losses_after);
    const wrap = node("div", { className: "scroll iv-preds-wrap" });
    wrap.append(predictionTable(rows));
    box.append(node("h3", {}, "Top predictions, before → after"), wrap);
    const chance = chanceLoss(view.vocabSize);
    box.append(
      node(
        "p",
        { className: "muted small" },
        "⚠ and the shaded rows: the top-1 guess changed. ✓: the guess is the token that comes next. Losses in nats" +
          (chance != null ? `; chance is ln ${view.vocabSize} = ${chance.toFixed(3)}.` : "."),
      ),
    );
  }
  const affected = affectedHeads(r.ablate || [], r.edit || []);
  const heads = shownHeads(r.before, r.after, affected);
  if (heads.length) {
    box.append(node("h3", {}, "Weights before and after"));
    const note = node("p", { className: "muted small iv-same-note" });
    box.append(note);
    const same = []; // the ablated heads drawn once
    const grid = node("div", { className: "iv-heads" });
    const S = r.tokens.length;
    const cell = Math.max(3, Math.min(16, Math.floor(150 / S)));
    for (const h of heads) {
      const lb = r.before.layers.find((l) => l.index === h.layer);
      const la = r.after.layers.find((l) => l.index === h.layer);
      const pair = node("div", { className: `iv-pair${h.affected ? " affected" : ""}` });
      pair.dataset.layer = String(h.layer);
      pair.dataset.head = String(h.head);
      pair.dataset.maxAbs = String(h.maxAbs);
      const name = headName(h.layer, h.head, view.multiLayer);
      const ab = findAblation(r.ablate || [], h.layer, h.head);
      const edited = (r.edit || []).some((e) => e.layer === h.layer && e.head === h.head);
      const maps = node("div", { className: "iv-maps" });
      if (unchangedByAblation(h, ab, edited)) {
        // identical by construction (and checked: max |Δw| 0): one map, and why
        pair.classList.add("iv-same");
        same.push(name);
        pair.append(node("p", { className: "iv-pair-title" }, `${name} · ${ab.mode}-ablated`));
        maps.append(heatmap(`before = after`, lb.heads[h.head], r.before.eligible, r.tokens, cell));
      } else {
        const role = !h.affected
          ? " · downstream"
          : ab && edited
            ? ` · ${ab.mode}-ablated and edited`
            : ab
              ? ` · ${ab.mode}-ablated`
              : " · edited";
        pair.append(node("p", { className: "iv-pair-title" }, `${name}${role} · max |Δw| ${h.maxAbs.toFixed(3)}`));
        maps.append(
          heatmap(`${name} before`, lb.heads[h.head], r.before.eligible, r.tokens, cell),
          heatmap(`${name} after`, la.heads[h.head], r.after.eligible, r.tokens, cell),
        );
      }
      pair.append(maps);
      grid.append(pair);
    }
    box.append(grid);
    note.hidden = !same.length;
    note.textContent = same.length
      ? `${same.join(", ")}: drawn once, identical before and after: ${same.length === 1 ? "this head's" : "each head's"} own ` +
        "weights are not changed by ablating it (its context is replaced after them; the heads downstream move)."
      : "";
  } else if (view.note) {
    box.append(node("p", { className: "muted small" }, view.note));
  }
  box.append(node("h3", {}, "How far each layer's output moved"));
  const charts = node("div", { className: "iv-charts" });
  box.append(charts);
  renderDeltaCharts(
    charts,
    { tokens: r.tokens, layers: r.layers, final_delta: r.final_delta, final: r.final },
    "intervention-chart",
  );
}
