// Head types: every (layer, head) of the model with its previous-token, duplicate-token, induction and bracket scores,
// mean attention distance and entropy (POST /api/heads). Sort by a column, filter, press a row to open that head;
// one press opens the best head of a kind. The helpers on top are pure; `renderHeadTypes` only builds the DOM.

import { node, within } from "./dom.js";
import { act } from "./actions.js";
import { selectView } from "./selectors.js";
import { bindProbeFields, byLengthText, probeSentence, renderProbeFields } from "./probe.js";
import { revealLargeHead } from "./workspaces.js";

export const COLUMNS = [
  {
    key: "previous_token",
    label: "Previous-token",
    short: "prev",
    max: 1,
    help: "mean weight a query puts on the position just before it (1 = always the previous token)",
  },
  {
    key: "duplicate_token",
    label: "Duplicate-token",
    short: "dup",
    max: 1,
    byLength: "duplicate_by_length",
    help: "mean weight a repeated token puts on its earlier copies (on the probes: the lowest over their lengths)",
  },
  {
    key: "induction",
    label: "Induction",
    short: "ind",
    max: 1,
    byLength: "induction_by_length",
    help:
      "on L random tokens followed by the same L again: mean weight from each token of the second copy to " +
      "the token that followed its first occurrence (Olsson et al. 2022); the lowest over the probe's lengths L",
  },
  {
    key: "bracket_match",
    label: "Bracket match",
    short: "brk",
    max: 1,
    help:
      "mean weight from each closing bracket's token to the token holding its opening bracket " +
      "(empty when the text has no pair across tokens)",
  },
  {
    key: "mean_distance",
    label: "Mean distance",
    short: "dist",
    max: null,
    help: "mean over queries of Σ weight · |query − key|, in positions (small = local)",
  },
  {
    key: "entropy",
    label: "Entropy",
    short: "H",
    max: null,
    help: "mean over queries of the weights' entropy in nats (0 = one key takes all the weight)",
  },
  {
    key: "ablation_effect",
    label: "Ablation effect",
    short: "abl",
    max: null,
    help:
      "with “ablate each head” on: how much the next-token loss rises (nats; decoders) or the output moves " +
      "(encoders) when this head alone is zero-ablated. A head looked at a lot can matter little",
  },
];

// One sentence on how the ablation effects rank against the attention scores (Spearman's ρ per score).
export function ablationLine(result) {
  const rho = result?.ablation_rank_correlation;
  if (!rho) return "";
  const what = result.ablation_metric === "loss" ? "the loss change" : "the output change";
  const parts = Object.entries(rho)
    .filter(([, v]) => v != null)
    .map(
      ([k, v]) =>
        `${COLUMNS.find((c) => c.key === k)?.label.toLowerCase() ?? k} ${v >= 0 ? "" : "−"}${Math.abs(v).toFixed(2)}`,
    );
  return parts.length ? ` Rank correlation (Spearman's ρ) of ${what} with each score: ${parts.join(", ")}.` : "";
}
export const BEST_KINDS = ["induction", "previous_token", "duplicate_token", "bracket_match"];

// What /api/heads is asked to add: the ablation effects and the shuffled baselines, as the two boxes say.
export function headTypesInclude(ui) {
  const include = [...(ui.hablate ? ["ablation_effect"] : []), ...(ui.hbase ? ["baseline"] : [])];
  return include.length ? { include } : {};
}

// A score beside its shuffled baseline: "+0.98 · z 49.7" (how far above the shuffles' mean, in their stds).
export function aboveText(b, key) {
  if (!b) return "";
  const size = formatScore(Math.abs(b.above), key);
  const sign = b.above < 0 && Number(size) > 0 ? "−" : "+"; // a distance that rounds to 0 is +0.000
  const z = b.z == null ? "z –" : `z ${b.z.toFixed(1)}`;
  return `${sign}${size} · ${z}`;
}

// One sentence on the baseline, when it was asked for.
export function baselineLine(result) {
  const row = result?.heads?.find((r) => r.baselines);
  if (!row) return "";
  return (
    " Under each score: how far the head stands above its shuffled baseline (the same head's weights moved at " +
    `random among each query's eligible keys, ${result.permutations} shuffles, seeded) and z, that distance in the shuffles' standard ` +
    "deviations; a uniform head stands at 0, entropy has none (a shuffle keeps it)."
  );
}
// A head "has" a 0..1 property when its score reaches this: 40% of a query's weight, on average, on the key the
// property names. Attention spread evenly over the keys a query sees scores about 1 / (keys seen): 0.02–0.03 for
// induction on the 2 x 24-token probe, ~0.1 for the untrained random model's previous-token and duplicate-token
// heads on a sentence, up to ~0.3 for previous-token on a causal text of 5 or 6 tokens; the trained heads score
// 0.74–0.95 (induction's induction heads) and 0.88–1 (minilm's previous- and duplicate-token heads). Below it
// the quick button says that no head has the property, and names the highest score, instead of offering a "best".
export const HAS_KIND = 0.4;
export const STRONG = 0.5; // a 0..1 score at or above this is drawn as a strong bar
export const BAR_ROOM_PX = 58; // the right part of a cell, kept free of the bar for the number

export function headLabel(row) {
  return `L${row.layer} H${row.head}`;
}

function byPosition(a, b) {
  return a.layer - b.layer || a.head - b.head;
}

// Rows sorted on a column ("head" or a score key; null = layer order). Missing scores go last either way.
export function sortRows(rows, by, dir = "desc") {
  const out = [...rows];
  if (!by) return out.sort(byPosition);
  const sign = dir === "asc" ? 1 : -1;
  if (by === "head") return out.sort((a, b) => sign * byPosition(a, b));
  return out.sort((a, b) => {
    const x = a[by];
    const y = b[by];
    if (x == null && y == null) return byPosition(a, b);
    if (x == null) return 1;
    if (y == null) return -1;
    return sign * (x - y) || byPosition(a, b);
  });
}

// Does the head match a typed filter? "L1H3", "l1 h3", "L1", "H3" and "1.3" all work; "" matches every head.
export function matchesText(row, text) {
  const t = String(text || "")
    .trim()
    .toLowerCase()
    .replace(/\s+/g, "");
  if (!t) return true;
  const dotted = /^(\d+)\.(\d+)$/.exec(t);
  if (dotted) return row.layer === Number(dotted[1]) && row.head === Number(dotted[2]);
  const m = /^(?:l(\d+))?(?:h(\d+))?$/.exec(t);
  if (!m || (m[1] === undefined && m[2] === undefined)) return false;
  return (m[1] === undefined || row.layer === Number(m[1])) && (m[2] === undefined || row.head === Number(m[2]));
}

// The rows a person asked to see: matching the text, and (with a score chosen) at or above its threshold.
export function filterRows(rows, { text = "", score = "", min = 0 } = {}) {
  return rows.filter((r) => matchesText(r, text) && (!score || (r[score] != null && r[score] >= min)));
}

// The head with the highest value of a score, or null when no head has one.
export function bestHead(rows, key) {
  let best = null;
  for (const r of rows) if (r[key] != null && (best === null || r[key] > best[key])) best = r;
  return best;
}

// What a bar's full width stands for in a column: 1 for the 0..1 scores, else the column's largest value.
export function columnMax(rows, column) {
  if (column.max != null) return column.max;
  return Math.max(1e-9, ...rows.map((r) => r[column.key] ?? 0));
}

export function formatScore(v, key) {
  if (v == null) return "–";
  return key === "mean_distance" ? v.toFixed(2) : v.toFixed(3);
}

// One sentence on what the scores were measured on.
export function measuredOn(result, seqLen) {
  const probe = result.probe_tokens;
  const L = result.segment_len;
  const where =
    result.scored_on === "input"
      ? `Previous-token, duplicate-token, distance and entropy are measured on your text (${seqLen} tokens, with your masks).`
      : (result.probe?.segment_lengths.length ?? 1) > 1
        ? "Previous-token, distance and entropy are measured on the first probe (below), duplicate-token and induction on every probe."
        : "Every score is measured on the probe below.";
  const ind = probeSentence(result, probe, L);
  return where + ind;
}

// Keep keyboard focus on the same control across a rebuild (it is found again by its data-focus key).
function focusKey(root) {
  const a = document.activeElement;
  return a && root.contains(a) ? a.dataset.focus || null : null;
}

function refocus(root, key) {
  if (!key) return;
  const el = root.querySelector(`[data-focus="${CSS.escape(key)}"]`);
  if (el) el.focus({ preventScroll: true }); // a redraw keeps the focus where it was, and the page where it is
}

// Scroll the table's box to the opened head's row once each time another head is opened.
function revealCurrent(table, focus) {
  const box = table.parentElement;
  const want = focus ? focus.join(".") : "";
  if (!box || box.dataset.revealed === want) return;
  const row = table.querySelector("tbody tr.current");
  if (!row) return;
  box.dataset.revealed = want;
  const head = table.tHead ? table.tHead.offsetHeight : 0;
  const top = row.offsetTop - head;
  if (top < box.scrollTop || row.offsetTop + row.offsetHeight > box.scrollTop + box.clientHeight) {
    box.scrollTop = Math.max(0, top - box.clientHeight / 3);
  }
}

// view: {rows, result, seqLen, sort, dir, filter: {text, score, min}, focus: [layer, head] | null, multiLayer}
// on: {sort(by), open(layer, head)}
export function renderHeadTypes(table, view, on) {
  const key = focusKey(table);
  table.replaceChildren();
  const cap = node(
    "caption",
    { className: "sr-only" },
    "Head-type scores for every head; press a column heading to sort, a row to open that head.",
  );
  const thead = node("thead");
  const tr = node("tr");
  const headings = [{ key: "head", label: "Head", help: "layer and head; press to sort by position" }, ...COLUMNS];
  for (const c of headings) {
    const th = node("th", { scope: "col" });
    const sorted = view.sort === c.key || (!view.sort && c.key === "head");
    const dir = view.sort ? view.dir : "asc";
    th.setAttribute("aria-sort", sorted ? (dir === "asc" ? "ascending" : "descending") : "none");
    const b = node("button", { type: "button", title: c.help }, c.label);
    b.dataset.focus = `sort-${c.key}`;
    b.dataset.sort = c.key;
    const arrow = node("span", { className: "sort-arrow" }, sorted ? (dir === "asc" ? "▲" : "▼") : "↕");
    arrow.setAttribute("aria-hidden", "true");
    b.append(arrow);
    b.addEventListener("click", () => on.sort(c.key));
    th.append(b);
    tr.append(th);
  }
  thead.append(tr);
  const body = node("tbody");
  const shown = filterRows(sortRows(view.rows, view.sort, view.dir), view.filter);
  const maxes = Object.fromEntries(COLUMNS.map((c) => [c.key, columnMax(view.rows, c)]));
  for (const r of shown) {
    const row = node("tr");
    row.dataset.layer = String(r.layer);
    row.dataset.head = String(r.head);
    row.setAttribute("data-testid", "head-type-row");
    const current = view.focus && view.focus[0] === r.layer && view.focus[1] === r.head;
    if (current) row.classList.add("current");
    const th = node("th", { scope: "row" });
    const open = node(
      "button",
      { type: "button", className: "ht-open" },
      view.multiLayer ? headLabel(r) : `H${r.head}`,
    );
    open.dataset.focus = `open-${r.layer}-${r.head}`;
    open.setAttribute("aria-label", `Open layer ${r.layer} head ${r.head} large`);
    if (current) open.setAttribute("aria-current", "true");
    th.append(open);
    row.append(th);
    for (const c of COLUMNS) {
      const v = r[c.key];
      const td = node("td");
      td.dataset.col = c.key;
      if (v != null) {
        td.dataset.value = String(v);
        const frac = Math.max(0, Math.min(1, v / maxes[c.key]));
        const bar = node("span", { className: `ht-bar${c.max === 1 && v >= STRONG ? " strong" : ""}` });
        bar.style.width = `calc((100% - ${BAR_ROOM_PX}px) * ${frac.toFixed(4)})`;
        bar.setAttribute("aria-hidden", "true");
        td.append(bar);
      }
      td.append(node("span", { className: "ht-val" }, formatScore(v, c.key)));
      const lengths = c.byLength ? byLengthText(r[c.byLength]) : "";
      if (lengths) {
        td.title = lengths;
        td.dataset.byLength = JSON.stringify(r[c.byLength]);
      }
      const b = r.baselines?.[c.key];
      if (b) {
        const above = node("span", { className: "ht-above" }, aboveText(b, c.key));
        above.title = `shuffled baseline ${formatScore(b.mean, c.key)} ± ${formatScore(b.std, c.key)}`;
        td.dataset.above = String(b.above);
        td.append(above);
      }
      row.append(td);
    }
    row.addEventListener("click", () => on.open(r.layer, r.head));
    body.append(row);
  }
  if (!shown.length) {
    const row = node("tr");
    const td = node("td", { colSpan: headings.length, className: "ht-empty" }, "No head matches the filter.");
    row.append(td);
    body.append(row);
  }
  table.append(cap, thead, body);
  refocus(table, key);
  revealCurrent(table, view.focus);
  return shown.length;
}

// The quick buttons: "best induction head: L1 H3 (0.93)"; a kind no head has a score for, or no head scores
// HAS_KIND on, is disabled and says so ("none ≥ 0.4 · top 0.025").
export function renderBest(root, rows, multiLayer, onOpen) {
  const key = focusKey(root);
  root.replaceChildren(node("span", { className: "ht-best-label" }, "Best:"));
  for (const kind of BEST_KINDS) {
    const col = COLUMNS.find((c) => c.key === kind);
    const best = bestHead(rows, kind);
    const b = node("button", { type: "button", className: "secondary small-btn" });
    b.dataset.best = kind;
    b.dataset.focus = `best-${kind}`;
    const name = col.label.toLowerCase();
    if (best && best[kind] < HAS_KIND) {
      const top = formatScore(best[kind], kind);
      b.append(
        node("span", { className: "ht-kind" }, name),
        node("span", { className: "ht-which" }, `none ≥ ${HAS_KIND} · top ${top}`),
      );
      b.title =
        `No head is a ${name} head: the highest score, ${top} (${multiLayer ? headLabel(best) : `H${best.head}`}), is under ` +
        `${HAS_KIND}, about what attention spread evenly over the keys scores. Sort the column to see every head.`;
      b.setAttribute("aria-label", `No ${name} head: every score is under ${HAS_KIND}; the highest is ${top}`);
      b.dataset.none = "true";
      b.disabled = true;
    } else if (best) {
      const where = multiLayer ? headLabel(best) : `H${best.head}`;
      b.append(
        node("span", { className: "ht-kind" }, name),
        node("span", { className: "ht-which" }, `${where} · ${formatScore(best[kind], kind)}`),
      );
      b.setAttribute("aria-label", `Open the best ${name} head, ${where}, score ${formatScore(best[kind], kind)}`);
      const lengths = col.byLength ? byLengthText(best[col.byLength]) : "";
      if (lengths) b.title = `${where}, ${lengths}`;
      b.addEventListener("click", () => onOpen(best.layer, best.head));
    } else {
      b.append(node("span", { className: "ht-kind" }, name), node("span", { className: "ht-which" }, "no score"));
      b.disabled = true;
    }
    root.append(b);
  }
  refocus(root, key);
}

// ---- the view (data-view="headtypes") ------------------------------------------------------------------------

// What the head-types filter row asks for, read from ui.
export function headTypesFilter(ui) {
  return { text: ui.hfind, score: ui.hscore, min: ui.hmin };
}

export function deps(s) {
  return [
    s.panels.headTypes,
    s.ui.hsort,
    s.ui.hdir,
    s.ui.hfind,
    s.ui.hscore,
    s.ui.hmin,
    s.ui.hlens,
    s.ui.hseed,
    s.ui.focus,
    s.run.result,
  ];
}

export function render(root, s, dispatch) {
  const part = within(root);
  const ht = s.panels.headTypes;
  const view = selectView(s);
  root.dataset.state = ht.status;
  const result = ht.result;
  const rows = result ? result.heads : [];
  const multiLayer = result ? result.n_layers > 1 : false;
  const focus = s.ui.focus || (view ? view.focus : null);
  const open = (l, h) => {
    dispatch(act.headOpened(l, h, null, "headtypes"));
    revealLargeHead();
  };
  part("headtypes-status").textContent = {
    idle: "",
    loading: "scoring every head…",
    ready: result
      ? `${rows.length} head${rows.length === 1 ? "" : "s"} · ${result.n_layers} layer${result.n_layers === 1 ? "" : "s"}`
      : "",
    error: "could not score the heads",
  }[ht.status];
  if (document.activeElement !== part("ht-find")) part("ht-find").value = s.ui.hfind;
  part("ht-score").value = s.ui.hscore;
  part("ht-min").disabled = !s.ui.hscore;
  if (document.activeElement !== part("ht-min")) part("ht-min").value = String(s.ui.hmin);
  const shown = renderHeadTypes(
    part("headtypes"),
    { rows, sort: s.ui.hsort, dir: s.ui.hdir, filter: headTypesFilter(s.ui), focus, multiLayer },
    { sort: (column) => dispatch(act.headSorted(column)), open },
  );
  part("ht-count").textContent = rows.length ? `${shown} of ${rows.length} shown` : "";
  renderBest(part("headtypes-best"), rows, multiLayer, open);
  // no rows yet (or none to be had): say why instead of drawing an empty table
  for (const sel of [".ht-best", ".ht-filter", ".ht-scroll", ".ht-legend"])
    root.querySelector(sel).hidden = !rows.length;
  const empty = part("headtypes-empty");
  empty.hidden = rows.length > 0;
  empty.classList.toggle("bad", ht.status === "error");
  empty.textContent = ht.status === "error" ? ht.message : "Scoring every head…";
  part("headtypes-measured").textContent =
    result && s.run.result
      ? measuredOn(result, s.run.result.tokens.length) + ablationLine(result) + baselineLine(result)
      : "";
  part("ht-ablate").checked = !!s.ui.hablate;
  renderProbeFields(part("ht-lengths"), part("ht-seed"), s.ui);
  part("ht-baseline").checked = !!s.ui.hbase;
  const probe = part("headtypes-probe");
  probe.hidden = !(result && result.probe_tokens);
  const box = part("headtypes-probe-tokens");
  box.replaceChildren(
    ...(result?.probe_tokens || []).map((t, i) =>
      node("span", { className: `probe-token${i >= result.probe_tokens.length / 2 ? " second" : ""}` }, t),
    ),
  );
  const legend = part("headtypes-legend");
  legend.replaceChildren(...COLUMNS.flatMap((c) => [node("dt", {}, c.label), node("dd", {}, c.help)]));
}

export function bind(root, store) {
  const part = within(root);
  const { dispatch } = store;
  part("ht-find").addEventListener("input", (e) => dispatch(act.headFilterSet({ hfind: e.target.value.slice(0, 40) })));
  part("ht-ablate").addEventListener("change", (e) => dispatch(act.headFilterSet({ hablate: e.target.checked })));
  part("ht-baseline").addEventListener("change", (e) => dispatch(act.headFilterSet({ hbase: e.target.checked })));
  part("ht-score").addEventListener("change", (e) => dispatch(act.headFilterSet({ hscore: e.target.value })));
  bindProbeFields(part("ht-lengths"), part("ht-seed"), dispatch);
  part("ht-min").addEventListener("input", (e) => {
    const v = Number.parseFloat(e.target.value);
    if (Number.isFinite(v)) dispatch(act.headFilterSet({ hmin: v }));
  });
}
