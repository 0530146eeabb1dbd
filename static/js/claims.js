// "Test a claim": change one position's input (POST /api/perturb) and see how far the change travels, layer by
// layer. A mask makes a promise (causal: nothing before the position may move); the server checks each promise on
// the real code path and the chart shows it: one bar per position and layer, the changed position marked, and the
// positions a mask protects drawn as protected — a protected bar above zero is a leak, drawn in red.
// Pure helpers on top; `renderDeltaCharts` and `renderPerturb` only draw. The intervention panel reuses the charts.
// The claim's settings (the change, where, whether it runs) are declared in claimsettings.js.

import { node, el } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { pos, posList } from "./positions.js";

export const CHART = { width: 560, height: 58, left: 64, right: 8, top: 6, labelBand: 14 };
export const ZERO_TOLERANCE = 0; // "exactly 0": a protected bar above this is a leak
export const MAX_TICK_LABELS = 24;
// A batch's checks (/api/perturb with texts and item) are not about the changed item's bars: `batch` protects the
// other items (its list names items), `padding_invariance` compares the item with itself run alone (its list names
// the positions compared, which may move). They are listed with the rest, never hatched on the charts. A source's
// `source_boundary` is hatched: on either side its protected positions are queries, the bars' own positions (side
// query: every other query; side source: the queries whose cell to the changed source position is masked).
export const BATCH_CHECKS = ["batch", "padding_invariance"];
const onBars = (checks) => (checks || []).filter((c) => !BATCH_CHECKS.includes(c.name));

// Every position some mask check in force protects (must read exactly 0), sorted.
export function protectedPositions(checks) {
  const all = new Set();
  for (const c of onBars(checks)) for (const p of c.protected || []) all.add(p);
  return [...all].sort((a, b) => a - b);
}

// Per layer, every position some check protects after that layer (a window's set shrinks as the change travels;
// a blocked cell protects its query in layer 0 only), sorted. A check without per-layer sets protects its final
// set in every layer.
export function protectedByLayer(checks, nLayers) {
  return Array.from({ length: nLayers }, (_, l) => {
    const all = new Set();
    for (const c of onBars(checks)) for (const p of c.protected_by_layer?.[l] ?? c.protected ?? []) all.add(p);
    return [...all].sort((a, b) => a - b);
  });
}

// {holds, names, lines}: whether every check holds, which masks were checked, one line per check.
// A check with tested: false put no position under its claim (causal, changing position 0): it neither holds
// nor leaks, and says so. A check with holds null is inconclusive: the change did not reach the model.
export function verdictSummary(result) {
  const checks = result.checks || [];
  const where = (leak) =>
    leak
      ? `, first at ${leak.layer == null ? "the final output" : `layer ${leak.layer}`}, ` +
        `${leak.item == null ? "" : `item ${leak.item}'s `}position ${pos(leak.position)}`
      : "";
  return {
    holds: checks.every((c) => c.holds !== false),
    inconclusive: checks.some((c) => c.holds === null),
    names: checks.map((c) => c.name),
    lines: checks.map((c) => {
      const untested = c.tested === false;
      const mark = untested ? "– not tested" : c.holds === null ? "? inconclusive" : c.holds ? "✓ holds" : "✗ leak";
      return {
        name: c.name,
        holds: c.holds,
        tested: !untested,
        text: `${mark} · ${c.name}: ${c.claim} (max |Δ| ${formatDelta(c.max_delta)}${c.holds === false ? where(c.first_leak) : ""})`,
      };
    }),
  };
}

export function formatDelta(v) {
  if (v === 0) return "0";
  if (!Number.isFinite(v)) return String(v);
  return Math.abs(v) < 1e-3 || Math.abs(v) >= 1e4 ? v.toExponential(2) : v.toFixed(4);
}

// The largest value over every row: one shared y scale, so layers compare by bar height.
export function sharedMax(rows) {
  let m = 0;
  for (const r of rows) for (const v of r) if (Number.isFinite(v) && Math.abs(v) > m) m = Math.abs(v);
  return m;
}

// Bars for one row of S deltas in a chart of the given geometry: [{position, x, width, height, value, leak}].
export function barGeometry(deltas, max, geom = CHART, protectedSet = new Set()) {
  const S = deltas.length;
  const plotW = geom.width - geom.left - geom.right;
  const plotH = geom.height - geom.top - geom.labelBand;
  const slot = plotW / Math.max(S, 1);
  const width = Math.max(1, slot * 0.72);
  return deltas.map((value, position) => {
    const frac = max > 0 ? Math.min(1, Math.abs(value) / max) : 0;
    return {
      position,
      slot,
      x: geom.left + position * slot + (slot - width) / 2,
      width,
      height: frac * plotH,
      value,
      leak: protectedSet.has(position) && Math.abs(value) > ZERO_TOLERANCE,
    };
  });
}

// One chart: a row label, a protected band behind every protected slot, the bars, the changed position marked.
function chart(label, deltas, opts) {
  const g = CHART;
  const S = deltas.length;
  const plotH = g.height - g.top - g.labelBand;
  const base = g.top + plotH;
  const prot = new Set(opts.protected || []);
  const bars = barGeometry(deltas, opts.max, g, prot);
  const svg = el("svg", {
    viewBox: `0 0 ${g.width} ${g.height}`,
    width: "100%",
    class: "delta-chart",
    role: "img",
    "data-testid": opts.testid || "delta-chart",
    "data-layer": opts.layer,
  });
  svg.style.maxWidth = `${g.width * 1.3}px`;
  const leaks = bars.filter((b) => b.leak).map((b) => b.position);
  const nonzero = bars.filter((b) => b.value !== 0).length;
  svg.setAttribute(
    "aria-label",
    `${label}: largest |Δ| ${formatDelta(Math.max(0, ...deltas.map(Math.abs)))}; ${nonzero} of ${S} positions moved` +
      (prot.size ? `; ${prot.size} protected, ${leaks.length ? `leaks at ${posList(leaks)}` : "all exactly 0"}` : ""),
  );
  svg.append(el("text", { x: 4, y: g.top + plotH / 2 + 4, class: "dc-label" }, label));
  for (const b of bars) {
    if (prot.has(b.position)) {
      svg.append(
        el("rect", {
          x: g.left + b.position * b.slot,
          y: g.top,
          width: b.slot,
          height: plotH,
          class: "dc-protected",
          fill: `url(#${opts.hatch})`,
        }),
      );
    }
    if (b.position === opts.position) {
      svg.append(
        el("rect", {
          x: g.left + b.position * b.slot + 0.5,
          y: g.top,
          width: Math.max(1, b.slot - 1),
          height: plotH,
          class: "dc-changed",
        }),
      );
    }
  }
  svg.append(el("line", { x1: g.left, x2: g.width - g.right, y1: base + 0.5, y2: base + 0.5, class: "dc-axis" }));
  for (const b of bars) {
    const cls = [
      "bar",
      b.leak ? "leak" : "",
      prot.has(b.position) ? "protected" : "",
      b.position === opts.position ? "changed" : "",
    ]
      .filter(Boolean)
      .join(" ");
    const r = el("rect", {
      x: b.x,
      y: base - b.height,
      width: b.width,
      height: Math.max(b.height, 0),
      class: cls,
      "data-position": b.position,
      "data-delta": b.value,
    });
    r.append(
      el(
        "title",
        {},
        `position ${pos(b.position)} ${pieceQuote(opts.tokens[b.position])}: |Δ| ${formatDelta(b.value)}` +
          (prot.has(b.position) ? (b.leak ? " — protected, but it moved: a leak" : " — protected: exactly 0") : ""),
      ),
    );
    svg.append(r);
    if (b.leak)
      svg.append(
        el("text", { x: b.x + b.width / 2, y: g.top + 9, class: "dc-leak-mark", "text-anchor": "middle" }, "!"),
      );
    else if (prot.has(b.position) && b.slot >= 10) {
      svg.append(el("text", { x: b.x + b.width / 2, y: base - 3, class: "dc-zero", "text-anchor": "middle" }, "0"));
    }
  }
  if (opts.ticks) {
    const every = Math.ceil(S / MAX_TICK_LABELS);
    for (const b of bars) {
      if (b.position % every !== 0 && b.position !== opts.position) continue;
      svg.append(
        el(
          "text",
          {
            x: g.left + b.position * b.slot + b.slot / 2,
            y: g.height - 4,
            "text-anchor": "middle",
            class: `dc-tick${b.position === opts.position ? " dc-tick-changed" : ""}`,
          },
          b.position === opts.position ? `▲${b.position}` : String(b.position),
        ),
      );
    }
  }
  return svg;
}

// The hatch every chart's protected band uses, defined once per root.
function defs(id) {
  const svg = el("svg", { width: 0, height: 0, class: "dc-defs", "aria-hidden": "true" });
  const d = el("defs");
  const pat = el("pattern", {
    id,
    width: 6,
    height: 6,
    patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)",
  });
  pat.append(
    el("rect", { width: 6, height: 6, fill: "#eeeeee" }),
    el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#b0b0b0", "stroke-width": 1.5 }),
  );
  d.append(pat);
  svg.append(d);
  return svg;
}

// Per-layer and final |Δ| per position. data: {tokens, layers: [{index, delta}], final_delta, final, position?,
// protected? (the final row's protected positions, and every layer's unless given apart), protectedByLayer? (one
// list per layer)}. One shared scale over every row.
export function renderDeltaCharts(root, data, testid = "delta-chart") {
  root.replaceChildren();
  // the layers share one scale; the final row has its own (it may be logits, another unit than a layer's output)
  const max = sharedMax(data.layers.map((l) => l.delta));
  const finalMax = data.final_delta ? sharedMax([data.final_delta]) : 0;
  const hatch = `${testid}-hatch`;
  root.append(defs(hatch));
  const byLayer = data.protectedByLayer || null;
  const hatched = [data.protected, ...(byLayer || [])].some((p) => p && p.length);
  // whether the layers' sets differ (a window's): then the legend says each layer hatches its own
  const perLayer = !!byLayer && byLayer.some((p) => p.join() !== (data.protected || []).join());
  const legend = node("p", { className: "muted small dc-legend" });
  legend.textContent =
    `Bars: max |change| of each position's output; the layers share one scale (top = ${formatDelta(max)})` +
    (data.final_delta ? `, the final row has its own (top = ${formatDelta(finalMax)}).` : ".") +
    (data.position != null ? ` ▲ marks the changed position ${pos(data.position)}.` : "") +
    (hatched
      ? ` Hatched slots are protected by a mask${perLayer ? " after that layer" : ""}: their bar must be exactly 0; red with ! = a leak.`
      : "");
  root.append(legend);
  const opts = { tokens: data.tokens, max, position: data.position, protected: data.protected, testid, hatch };
  data.layers.forEach((l, i) =>
    root.append(
      chart(`layer ${l.index}`, l.delta, { ...opts, layer: l.index, protected: byLayer ? byLayer[i] : data.protected }),
    ),
  );
  if (data.final_delta) {
    const last = chart("final", data.final_delta, { ...opts, max: finalMax, layer: "final", ticks: true });
    root.append(last);
    if (data.final) root.append(node("p", { className: "muted small" }, `final: ${data.final}`));
  }
}

// The verdict line and the check list, then the charts. view: {result, status, message, tokens}
export function renderPerturb(root, view) {
  const verdict = root.querySelector("[data-testid=perturb-verdict]");
  const checks = root.querySelector("[data-role=checks]");
  const charts = root.querySelector("[data-role=charts]");
  const status = root.querySelector("[data-role=status]");
  status.textContent = { idle: "", loading: "perturbing…", ready: "", error: "" }[view.status] || "";
  status.classList.toggle("bad", view.status === "error");
  if (view.status === "error") status.textContent = view.message;
  const r = view.result;
  if (!r) {
    verdict.hidden = true;
    verdict.textContent = "";
    verdict.dataset.holds = "";
    verdict.dataset.checks = "";
    checks.replaceChildren();
    charts.replaceChildren();
    return;
  }
  const sum = verdictSummary(r);
  verdict.hidden = false;
  verdict.dataset.holds = !sum.names.length
    ? "none"
    : sum.inconclusive && sum.holds
      ? "inconclusive"
      : String(sum.holds);
  verdict.dataset.checks = sum.names.join(",");
  verdict.dataset.position = String(r.position);
  verdict.dataset.side = r.side ?? "query";
  verdict.classList.toggle("holds", sum.names.length > 0 && sum.holds && !sum.inconclusive);
  verdict.classList.toggle("leak", !sum.holds);
  const mark = !sum.names.length ? "·" : !sum.holds ? "✗" : sum.inconclusive ? "?" : "✓";
  verdict.textContent = `${mark} ${r.verdict}`;
  checks.replaceChildren(
    ...sum.lines.map((l) => {
      const li = node(
        "li",
        { className: !l.tested ? "untested" : l.holds === null ? "inconclusive" : l.holds ? "holds" : "leak" },
        l.text,
      );
      li.dataset.check = l.name;
      li.dataset.holds = String(l.holds);
      li.dataset.tested = String(l.tested);
      return li;
    }),
  );
  if (!sum.lines.length)
    checks.append(node("li", { className: "muted" }, "No mask in force makes a promise to check here."));
  // side source: the position is the source's, not one of the bars' queries (no ▲ on them)
  const src = r.side === "source";
  const own = src ? r.source_tokens : r.tokens;
  const after = src ? r.source_tokens_after : r.tokens_after;
  const at = `${r.item == null ? "" : `item ${r.item}'s `}${src ? "source " : ""}position ${pos(r.position)} ${pieceQuote(own[r.position])}`;
  const what =
    r.change.kind === "token"
      ? `${at} → “${after[r.position]}”`
      : r.change.kind === "direction"
        ? `${at} moved along a random direction of length ${r.change.norm ?? r.change.amount}`
        : r.change.kind === "value"
          ? `${at}'s value vector moved (every layer) along a random direction of length ${r.change.norm}`
          : `${at} shifted by ${r.change.amount}`;
  charts.dataset.position = String(r.position);
  charts.dataset.side = r.side ?? "query";
  renderDeltaCharts(
    charts,
    {
      ...r,
      position: src ? null : r.position,
      protected: protectedPositions(r.checks),
      protectedByLayer: protectedByLayer(r.checks, r.layers.length),
    },
    "perturb-chart",
  );
  charts.prepend(node("p", { className: "small dc-what" }, `Changed: ${what}.`));
  if (r.item_delta) charts.append(itemLine(r));
}

// A batch: per item, the largest change in its final output (every item but the changed one must read 0).
export function itemDeltaText(r) {
  const parts = r.item_delta.map((d, i) => `item ${i}${i === r.item ? " (changed)" : ""} ${formatDelta(d)}`);
  return `Per item, the largest change in ${r.final}: ${parts.join(" · ")}.`;
}

function itemLine(r) {
  const p = node("p", { className: "small dc-items" }, itemDeltaText(r));
  p.setAttribute("data-testid", "perturb-items");
  p.dataset.items = r.item_delta.join(",");
  return p;
}
