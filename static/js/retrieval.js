// The retrieval diagram (data-view="retrieval"): one query linked to every key, line width by weight, a zero
// weight drawn as a grey hairline, masked keys struck through with the reason; the diagram scrolls to follow the
// query. Under it, the chapter's second half for this query: weights times values give the context.
// SVG built node by node; token text goes in as text only.

import { colorAt, inkOn, rgbString, PALETTES } from "./colors.js";
import { cellReasons } from "./masks.js";
import { el, node, within } from "./dom.js";
import { act } from "./actions.js";
import { selectView, shownDeps } from "./selectors.js";
import { pieceLabel, pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const ROW_PX = { max: 30, min: 16 };
export const MAX_LINE_PX = 16;
export const ZERO_WEIGHT = 1e-4; // a line for a weight below this is a grey hairline: nothing is retrieved
export const WIDTH = 520;
const COL = { query: 4, key: 196, boxW: 104, labels: 308 };

export function rowHeight(seqLen) {
  return Math.max(ROW_PX.min, Math.min(ROW_PX.max, Math.floor(520 / Math.max(seqLen, 1))));
}

// Line width for a weight in [0, 1]: a hairline at 0, MAX_LINE_PX at 1.
export function lineWidth(weight) {
  return 0.75 + Math.max(0, Math.min(1, weight)) * (MAX_LINE_PX - 0.75);
}

// What the diagram says about each key for query q: eligible or why not, score and weight.
export function retrievalRows(view, head, q) {
  return (view.keyTokens || view.tokens).map((token, k) => {
    const reasons = cellReasons(view, q, k);
    return {
      k,
      token,
      eligible: view.eligible[q][k],
      reasons,
      score: head.scores ? head.scores[q][k] : null,
      weight: head.weights ? head.weights[q][k] : null,
    };
  });
}

// One element of each kind the diagram repeats (a line, a query's box, a key's box), with the attributes every copy
// shares: a row is a deep clone of it, its own attributes set after (512 keys are 4,100 elements).
function models(rh, font) {
  const x1 = COL.query + COL.boxW;
  const line = (attrs) => el("path", { fill: "none", ...attrs });
  const query = el("g");
  query.append(
    el("rect", { x: COL.query, width: COL.boxW, height: rh - 4, rx: 4 }),
    el("text", { x: COL.query + 8, "font-size": font }),
  );
  const key = el("g");
  key.append(
    el("rect", { x: COL.key, width: COL.boxW, height: rh - 4, rx: 4 }),
    el("text", { x: COL.key + 8, "font-size": font }),
    el("text", { x: COL.labels, "font-size": Math.min(12, font), class: "rd-num" }),
  );
  return {
    x1,
    zero: line({ stroke: "#9a9a9a", "stroke-width": 0.75, "stroke-opacity": 0.6, class: "rd-line rd-zero" }),
    eligible: line({ "stroke-linecap": "round", "stroke-opacity": 0.85, class: "rd-line" }),
    blocked: line({ stroke: "#9a9a9a", "stroke-width": 1, "stroke-dasharray": "3 4", class: "rd-line rd-blocked" }),
    query,
    key,
  };
}

// A long diagram draws the rows its scroll box shows: up to ALL_ROWS rows every row is drawn at once; beyond, the rows
// within ROWS_AROUND of the query and of the rows last in sight, and the others as the box scrolls to them
// (ROWS_BEYOND more past each edge of the box). Every line is drawn: a line to a key out of sight still crosses
// the rows in sight. At 512 tokens that is about 1,200 elements instead of 4,100 (most of the first draw's style
// and layout was the 1,024 rows' SVG text).
export const ALL_ROWS = 160;
export const ROWS_AROUND = 64;
export const ROWS_BEYOND = 24;
const TOP = 30; // the header's height: row i starts at TOP + i * rh

const drawing = new WeakMap(); // svg -> how its rows are drawn: {rowCount, rh, height, drawn, draw(i), seen}

export function renderRetrieval(svg, view, head, q, onQuery, onKey) {
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const rowCount = Math.max(S, keys.length);
  const rh = rowHeight(rowCount);
  const height = TOP + 4 + rowCount * rh + 8;
  svg.replaceChildren();
  const rows = retrievalRows(view, head, q);
  // wide enough for the longest "score · ✕ reasons" label: the reason text is never cut off
  const longest = Math.max(0, ...rows.map((r) => (r.eligible ? 13 : 11 + r.reasons.join("+").length)));
  const width = Math.max(WIDTH, Math.ceil(COL.labels + longest * 7.2 + 8));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", "100%");
  svg.style.maxWidth = `${width * 1.25}px`;
  svg.dataset.query = String(q);
  const font = Math.min(13, rh - 4);
  const defs = el("defs");
  const pat = el("pattern", {
    id: "rd-hatch",
    width: 6,
    height: 6,
    patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)",
  });
  pat.append(
    el("rect", { width: 6, height: 6, fill: "#e4e4e4" }),
    el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#8c8c8c", "stroke-width": 1.5 }),
  );
  defs.append(pat);
  const all = document.createDocumentFragment();
  all.append(defs);
  all.append(
    el("text", { x: COL.query, y: 16, class: "rd-head" }, "Query (pick one)"),
    el("text", { x: COL.key, y: 16, class: "rd-head" }, view.keyTokens ? "Keys (source)" : "Keys"),
    el("text", { x: COL.labels, y: 16, class: "rd-head" }, head.scores ? "score · weight" : "weight"),
  );
  const y = (i) => TOP + i * rh + rh / 2;
  const m = models(rh, font);
  const lines = el("g", { class: "rd-lines" });
  const queries = el("g", { class: "rd-queries" });
  const keyRows = el("g", { class: "rd-keys" });
  all.append(lines, queries, keyRows);
  const palette = PALETTES[view.palette] || PALETTES.viridis;
  const x1 = m.x1;
  const x2 = COL.key;
  const mid = (x1 + x2) / 2;
  for (const r of rows) {
    const d = `M ${x1} ${y(q)} C ${mid} ${y(q)}, ${mid} ${y(r.k)}, ${x2} ${y(r.k)}`;
    let path;
    if (r.eligible && (r.weight ?? 0) < ZERO_WEIGHT) {
      path = m.zero.cloneNode(false);
    } else if (r.eligible) {
      const w = r.weight ?? 0;
      path = m.eligible.cloneNode(false);
      path.setAttribute("stroke", rgbString(colorAt(palette, 0.15 + 0.85 * w)));
      path.setAttribute("stroke-width", String(lineWidth(w)));
    } else {
      path = m.blocked.cloneNode(false);
    }
    path.setAttribute("d", d);
    path.setAttribute("data-key", String(r.k));
    lines.append(path);
  }
  const queryRow = (i) => {
    const g = m.query.cloneNode(true);
    g.setAttribute("class", `rd-query${i === q ? " rd-chosen" : ""}`);
    g.setAttribute("data-query", String(i));
    g.firstChild.setAttribute("y", String(y(i) - rh / 2 + 2));
    g.lastChild.setAttribute("y", String(y(i) + font / 3));
    g.lastChild.textContent = `${pos(i)}  ${pieceLabel(view.tokens[i], 12)}`;
    g.addEventListener("click", () => onQuery(i));
    return g;
  };
  const keyRow = (r) => {
    const chosen = view.pair && view.pair[0] === q && view.pair[1] === r.k;
    const g = m.key.cloneNode(true);
    g.setAttribute("class", `rd-key${r.eligible ? "" : " rd-masked"}${chosen ? " rd-pair" : ""}`);
    g.setAttribute("data-key", String(r.k));
    if (onKey) g.addEventListener("click", () => onKey(r.k));
    const [box, label, num] = g.childNodes;
    const colour = r.eligible ? colorAt(palette, r.weight ?? 0) : null;
    box.setAttribute("y", String(y(r.k) - rh / 2 + 2));
    box.setAttribute("fill", colour ? rgbString(colour) : "url(#rd-hatch)");
    box.setAttribute("stroke", colour ? "none" : "#8c8c8c");
    label.setAttribute("y", String(y(r.k) + font / 3));
    label.textContent = `${pos(r.k)}  ${pieceLabel(r.token, 12)}`;
    label.style.fill = colour ? inkOn(colour) : "#333";
    if (!r.eligible) label.setAttribute("text-decoration", "line-through");
    // a result with weights only (an exported file's) shows the weight alone
    const s = r.score === null ? "" : `${r.score.toFixed(3)} · `;
    num.setAttribute("y", String(y(r.k) + font / 3));
    num.textContent = r.eligible ? `${s}${(r.weight ?? 0).toFixed(3)}` : `${s}✕ ${r.reasons.join("+") || "masked"}`;
    return g;
  };
  const last = drawing.get(svg);
  const state = { rowCount, rh, height, drawn: new Uint8Array(rowCount), seen: last?.seen ?? null };
  const queryEls = new Array(rowCount);
  const keyEls = new Array(rowCount);
  // row i's query and key, each put before the next row drawn below it, so the rows stay in order
  state.draw = (i) => {
    state.drawn[i] = 1;
    let next = i + 1;
    while (next < rowCount && !state.drawn[next]) next++;
    if (i < S) queries.insertBefore((queryEls[i] = queryRow(i)), queryEls[next] ?? null);
    if (i < rows.length) keyRows.insertBefore((keyEls[i] = keyRow(rows[i])), keyEls[next] ?? null);
  };
  drawing.set(svg, state);
  if (rowCount <= ALL_ROWS) drawRows(state, 0, rowCount);
  else {
    drawRows(state, q - ROWS_AROUND, q + ROWS_AROUND + 1);
    if (state.seen) drawRows(state, ...state.seen);
  }
  svg.append(all);
  watchScroll(svg);
  svg.setAttribute(
    "aria-label",
    `Retrieval for query ${pos(q)} ${pieceQuote(view.tokens[q])}: ${rows.filter((r) => r.eligible).length} of ${keys.length} keys eligible. ` +
      "Up and down arrows choose another query.",
  );
}

// Draws the rows from..to (clamped, `to` excluded) not drawn yet.
function drawRows(state, from, to) {
  for (let i = Math.max(0, from); i < Math.min(state.rowCount, to); i++) if (!state.drawn[i]) state.draw(i);
}

// The rows of `svg` its scroll box (its parent) shows, ROWS_BEYOND more each side: [from, to), or null when the
// diagram has no box (not laid out). Reads the layout.
export function rowsInSight(svg) {
  const state = drawing.get(svg);
  const box = svg.parentElement;
  if (!state || !box) return null;
  const s = svg.getBoundingClientRect();
  if (!s.height) return null;
  const b = box.getBoundingClientRect();
  const scale = s.height / state.height; // px a unit of the viewBox
  const top = Math.max(s.top, b.top + box.clientTop) - s.top;
  const bottom = Math.min(s.bottom, b.top + box.clientTop + box.clientHeight) - s.top;
  const row = (px) => (px / scale - TOP) / state.rh;
  return [Math.floor(row(top)) - ROWS_BEYOND, Math.ceil(row(bottom)) + ROWS_BEYOND];
}

// Draws the rows in sight that are not drawn yet, and remembers them for the next draw.
function drawInSight(svg) {
  const state = drawing.get(svg);
  const seen = rowsInSight(svg);
  if (!state || !seen) return;
  state.seen = seen;
  drawRows(state, ...seen);
}

const watched = new WeakSet();

// The rows scrolled to are drawn in the frame that shows them (a scroll event comes before the frame's paint).
function watchScroll(svg) {
  const box = svg.parentElement;
  if (!box || watched.has(svg)) return;
  watched.add(svg);
  box.addEventListener("scroll", () => drawInSight(svg), { passive: true });
}

// The context for query q: Σ_k weight_k · v_k, as rows a person can add up (only the keys with weight).
export function contextRows(head, q) {
  if (!head.v || !head.weights || !head.contexts) return null;
  const w = head.weights[q];
  const rows = Array.from(w, (weight, k) => ({ k, weight, v: head.v[k] })) // a typed row's map holds numbers only
    .filter((r) => r.weight >= ZERO_WEIGHT && r.v);
  return { rows, context: head.contexts[q] };
}

function renderContext(root, view, head, q) {
  root.replaceChildren();
  const c = contextRows(head, q);
  root.hidden = !c;
  if (!c) return;
  const vec = (xs) => `[${Array.from(xs, (x) => x.toFixed(3)).join(", ")}]`;
  root.append(
    node(
      "p",
      { className: "small" },
      `Then the values: context of query ${pos(q)} = Σ weight × v (head ${head.index}).`,
    ),
  );
  const table = node("table", { className: "stats ctx-table" });
  for (const r of c.rows) {
    const tr = node("tr");
    tr.append(
      node("th", {}, `${pos(r.k)} ${pieceLabel(view.tokens[r.k] ?? "")}`),
      node("td", {}, `${r.weight.toFixed(3)} × ${vec(r.v)}`),
    );
    table.append(tr);
  }
  const total = node("tr", { className: "ctx-total" });
  total.append(node("th", {}, "context"), node("td", {}, `= ${vec(c.context)}`));
  table.append(total);
  root.append(table);
}

export function deps(s) {
  return [...shownDeps(s), s.ui.focus, s.ui.query, s.ui.pair, s.ui.palette, s.ui.layer];
}

export function render(root, s, dispatch) {
  const view = selectView(s);
  if (!view) return;
  const [fl, fh] = view.focus;
  const part = within(root);
  part("retrieval-title").textContent =
    `Retrieval · ${view.multiLayer ? `L${fl} ` : ""}head ${fh} · query ${pos(view.query)} ${pieceQuote(view.tokens[view.query])}`;
  const svg = part("retrieval");
  renderRetrieval(
    svg,
    view,
    view.focusHead,
    view.query,
    (q) => dispatch(act.querySet(q)),
    (k) => dispatch(act.pairSet(view.query, k)),
  );
  renderContext(part("retrieval-context"), view, view.focusHead, view.query);
  // once every view of this draw has written (a microtask: still before anything else reads the page), so that
  // the read lays the page out once, not halfway through the draw and again after it
  queueMicrotask(() => followQuery(svg));
}

// Follow the chosen query in the scroll box, without scrolling the page.
function followQuery(svg) {
  const box = svg.parentElement;
  const chosen = svg.querySelector(".rd-chosen rect");
  if (!box || !chosen) return;
  const b = box.getBoundingClientRect();
  const r = chosen.getBoundingClientRect();
  if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += r.top - b.top - b.height / 2 + r.height / 2;
  drawInSight(svg);
}

export function bind(root, store) {
  within(root)("retrieval").addEventListener("keydown", (e) => {
    const s = store.getState();
    if (!s.run.result) return;
    const S = s.run.result.tokens.length;
    const step = { ArrowUp: -1, ArrowLeft: -1, ArrowDown: 1, ArrowRight: 1 }[e.key];
    if (!step) return;
    e.preventDefault();
    store.dispatch(act.querySet((selectView(s).query + step + S) % S));
  });
}
