// The large head (data-view="focus"): a plotly plot of the head as an image (one pixel a cell, painted here) with a
// colour bar, zoom and hover, cell values when they fit, the chosen query row and query -> key pair outlined. Masked
// cells are hatched, in the image's MASK_FILL (never a colour on the scale). The cells the last toggle changed are
// outlined by one dotted path (changedPath), whatever their number. Click a cell to block or unblock it; shift-click
// picks the pair. On touch a tap shows the cell's numbers in the readout under the plot, whose buttons block it or
// pick it. By keyboard the plot is one tab stop: the arrow keys move a cell cursor (announced in the readout), Enter
// or Space blocks or unblocks, Shift+Enter picks the pair. Under it: the row and column sums, and the form that sets
// one weight (an intervention). The cells as data (labels, paths, hover text, the image) are in focuscells.js. A
// large head's first plot waits for the first paint, which shows its cells sketched on a canvas (`sketch`).

import { renderSums } from "./bugs.js";
import { noteWidth, widthOf, within } from "./dom.js";
import { MASK_FILL, MASK_HATCH, headScale, matrixKey, plotlyScale } from "./colors.js";
import { halfRows } from "./arrays.js";
import {
  ANNOTATE_MAX_TOKENS,
  ANNOTATE_MIN_PX,
  FOCUS_HEIGHT,
  INNER_EDGES_PX,
  TICK_PX,
  cellAnnotations,
  cellReadout,
  changedPath,
  focusMargins,
  focusShapes,
  headCanvas,
  headImage,
  hoverTexts,
  maskPath,
  sinkColumn,
  tickEvery,
  tickLabels,
  ticksOf,
} from "./focuscells.js";
import { sinkWeights, themeInk } from "./heatmap.js";
import { headName } from "./interventions.js";
import { moveCursor } from "./eligibility.js";
import { PLOT_CONFIG } from "./plotly.js";
import { act } from "./actions.js";
import { selectView, shownDeps } from "./selectors.js";
import { positionLabel } from "./tophead.js";
import { firstPosition } from "./positions.js";

export const needsPlotly = true; // main.js draws this view once plotly is loaded

// plotly's image trace hands its hover label the pixel's colour as a typed array, which its colour checks reject
// with a console warning on every hover (plotly.js 4.1): the trace's own scaler is wrapped to return a plain array.
function plainHoverColours(el) {
  for (const t of el._fullData || []) {
    if (t.type === "image" && typeof t._scaler === "function" && !t._scaler.plain) {
      const scaler = t._scaler;
      t._scaler = Object.assign((c) => Array.from(scaler(c)), { plain: true });
    }
  }
}

const FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
let measurer = null;

// A label's width in px at `size`, measured on a canvas of its own (no layout of the page).
function textWidth(size) {
  measurer ??= document.createElement("canvas").getContext("2d");
  measurer.font = `${size}px ${FONT_FAMILY}`;
  return (text) => measurer.measureText(text).width;
}

// The plot's size: as wide as its element, about as tall, within FOCUS_HEIGHT.
function plotSize(el) {
  const width = widthOf(el, 480);
  return { width, height: Math.round(Math.min(FOCUS_HEIGHT.max, Math.max(FOCUS_HEIGHT.min, width * 0.9))) };
}

// The axes' labels, as many as fit along each (the length the plot had last time, else a guess from its size), and
// the margins that hold them, for a plot of `size` (plotSize). `withSink` adds a sink column's label to the keys'.
function axesOf(el, view, { width, height }, withSink = (t) => t) {
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const font = S > 16 ? 9 : 11;
  const guess = Math.max(120, Math.min(width - 160, height - 120));
  const xLen = el._fullLayout?.xaxis?._length || guess;
  const xTicks = withSink(ticksOf(tickLabels(keys), tickEvery(keys.length, xLen, font * TICK_PX.x)));
  const yTicks = ticksOf(
    tickLabels(view.tokens),
    tickEvery(S, el._fullLayout?.yaxis?._length || guess, font * TICK_PX.y),
  );
  return { font, xTicks, yTicks, margin: focusMargins(xTicks.ticktext, yTicks.ticktext, font, textWidth(font)) };
}

// A first picture of a large head whose plot is not made yet (SKETCH_CELLS cells or more): its cells' colours on a
// canvas where the plot will put them, so that the first paint shows the head; `render` makes the plot (axes'
// labels, colour bar, hover, clicks) after that paint (main.js), which takes away the sketch. A head with a sink
// column or keys of its own, a plot already made, or a small head (plotted at once) is not sketched: false.
export const SKETCH_CELLS = 128 * 128;

export function sketch(root, s) {
  const view = selectView(s);
  const el = within(root)("focus-plot");
  if (!view || el._fullLayout || view.keyTokens) return false;
  const head = view.focusHead;
  const S = view.tokens.length;
  if (S * S < SKETCH_CELLS || (view.view === "weights" && sinkWeights(head, view.item))) return false;
  if (el.sketched === view && el.querySelector(":scope > .focus-sketch")) return true; // drawn already (held for plotly)
  el.sketched = view;
  const key = matrixKey(view.view);
  const { width, height } = plotSize(el);
  const { margin } = axesOf(el, view, { width, height });
  // the cells are square (the axes share a scale) and centred in the plot's area, as plotly places them
  const across = width - margin.l - margin.r;
  const down = height - margin.t - margin.b;
  const cell = Math.min(across, down) / S;
  const canvas = headCanvas(halfRows(head, key) ?? head[key], view.eligible, headScale(view, head), S, S);
  canvas.className = "focus-sketch";
  Object.assign(canvas.style, {
    left: `${margin.l + (across - cell * S) / 2}px`,
    top: `${margin.t + (down - cell * S) / 2}px`,
    width: `${cell * S}px`,
    height: `${cell * S}px`,
  });
  el.querySelector(":scope > .focus-sketch")?.remove();
  el.prepend(canvas);
  el.style.minHeight = `${height}px`;
  const [fl, fh] = view.focus;
  within(root)("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  return true;
}

// The sketch taken away once the plot is made over it.
function unsketch(el) {
  const drawn = el.querySelector(":scope > .focus-sketch");
  if (!drawn) return;
  drawn.remove();
  el.style.minHeight = "";
}

export function renderFocus(el, reset, view, head, layer) {
  if (!window.Plotly || !head) return;
  const scale = headScale(view, head);
  const S = view.tokens.length;
  const key = matrixKey(view.view); // head[key] of a float16 answer widens when first read
  const hover = hoverTexts(view, head);
  const keys = view.keyTokens || view.tokens;
  const K = keys.length;
  const path = maskPath(view.eligible);
  const traces = [
    {
      // every cell, masked ones included (their hover says why), one pixel each, never smoothed
      // a float16 answer is painted from its bit patterns (arrays.js halfRows), with no widening
      type: "image",
      source: headImage(halfRows(head, key) ?? head[key], view.eligible, scale, S, K),
      x0: 0,
      y0: 0,
      dx: 1,
      dy: 1,
      zsmooth: false,
      text: hover,
      hovertemplate: "%{text}<extra></extra>",
    },
    {
      type: "scatter",
      mode: "lines",
      x: path.x,
      y: path.y,
      fill: "toself",
      hoverinfo: "skip",
      line: { width: 0 },
      fillcolor: MASK_FILL,
      showlegend: false,
      fillpattern: { shape: "/", fgcolor: MASK_HATCH, bgcolor: MASK_FILL, size: 7, solidity: 0.15 },
    },
    {
      // the colour bar: a marker-less trace that carries the scale
      type: "scatter",
      mode: "markers",
      x: [null],
      y: [null],
      hoverinfo: "skip",
      showlegend: false,
      marker: {
        color: [scale.min],
        cmin: scale.min,
        cmax: scale.max,
        colorscale: plotlyScale(scale.stops),
        showscale: true,
        colorbar: { title: { text: scale.label, side: "right" }, thickness: 14, len: 0.9 },
      },
    },
  ];
  if (view.blocked.length) {
    traces.push({
      type: "scatter",
      mode: "markers",
      hoverinfo: "skip",
      showlegend: false,
      x: view.blocked.map(([, k]) => k),
      y: view.blocked.map(([q]) => q),
      marker: {
        symbol: "x-thin-open",
        color: "#202020",
        size: Math.max(8, Math.min(22, 260 / S)),
        line: { width: 2, color: "#202020" },
      },
    });
  }
  const ink = themeInk();
  // a head's learned sink in the weights view: one column of its own right of the keys
  const sink = view.view === "weights" ? sinkWeights(head, view.item) : null;
  const sinkCol = sink ? sinkColumn(sink, scale, K, ink) : null;
  if (sinkCol) traces.push(sinkCol.trace);
  const { width, height } = plotSize(el);
  // what the last toggle changed: one path whatever the number of cells, never a shape per cell (130,816 dotted
  // rectangles at 512 tokens froze the tab for minutes)
  const cellPx = Math.min(width, height) / Math.max(S, K);
  el.outline = changedPath(view.changed || [], S, K, cellPx >= INNER_EDGES_PX).path;
  const shapes = focusShapes(view, S, K, ink, el.cursor, el.outline);
  if (sinkCol) shapes.push(sinkCol.shape);
  const withSink = (t) =>
    sinkCol ? { tickvals: [...t.tickvals, sinkCol.tick.value], ticktext: [...t.ticktext, sinkCol.tick.text] } : t;
  const { font, xTicks, yTicks, margin } = axesOf(el, view, { width, height }, withSink);
  const axis = (title, t) => ({
    title: { text: title, standoff: 6 },
    tickmode: "array",
    ...t,
    showgrid: false,
    zeroline: false,
    fixedrange: false,
    automargin: false,
    tickfont: { size: font },
    // the margins hold every label (focusMargins): plotly's default, "hide past div", measured each label's box
    // (a layout per label: 150 ms of a 512-token first draw) to hide the ones that would cross the page's edge
    ticklabeloverflow: "allow",
  });
  const bg = ink.panel;
  const layout = {
    height,
    margin,
    xaxis: {
      ...axis(view.keyTokens ? "Key position (source)" : "Key position", xTicks),
      side: "bottom",
      tickangle: -45,
      constrain: "domain",
    },
    yaxis: { ...axis("Query position", yTicks), autorange: "reversed", scaleanchor: "x", constrain: "domain" },
    shapes,
    // a value in each cell when the cells are wide enough to hold it
    annotations:
      Math.max(S, K) <= ANNOTATE_MAX_TOKENS && width / K >= ANNOTATE_MIN_PX
        ? cellAnnotations(head[key], view.eligible, scale, S, K)
        : [],
    plot_bgcolor: bg,
    paper_bgcolor: bg,
    font: { family: FONT_FAMILY, size: 12, color: ink.text },
    hoverlabel: { bgcolor: "#fff", bordercolor: "#555", font: { color: "#111" } },
  };
  el.dataset.layer = String(layer);
  el.dataset.head = String(head.index);
  el.dataset.height = String(height);
  // what the image shows, for tests and tools: the matrix (read, and so widened, only when asked), its mask, its scale
  el.drawn = {
    get matrix() {
      return head[key];
    },
    eligible: view.eligible,
    scale,
    sink,
  };
  el.drawnView = view;
  el.dataset.ticks = "";
  // the labels again for the length the axes took once plotly has placed them (its automatic margins are worked out
  // after the first pass): data-ticks says they are final
  const fitTicks = () => {
    if (el.drawnView !== view || !el._fullLayout?.xaxis) return;
    const fit = {};
    for (const [name, count, labels, per, had] of [
      ["xaxis", K, tickLabels(keys), font * TICK_PX.x, xTicks],
      ["yaxis", S, tickLabels(view.tokens), font * TICK_PX.y, yTicks],
    ]) {
      const every = ticksOf(labels, tickEvery(count, el._fullLayout[name]._length, per));
      const t = name === "xaxis" ? withSink(every) : every;
      if (t.tickvals.length !== had.tickvals.length)
        Object.assign(fit, { [`${name}.tickvals`]: t.tickvals, [`${name}.ticktext`]: t.ticktext });
    }
    if (Object.keys(fit).length) {
      const x = fit["xaxis.ticktext"] ?? xTicks.ticktext;
      const y = fit["yaxis.ticktext"] ?? yTicks.ticktext;
      fit.margin = focusMargins(x, y, font, textWidth(font));
    }
    const done = () => {
      el.dataset.ticks = String(el._fullLayout.xaxis.tickvals.length);
    };
    if (Object.keys(fit).length) Promise.resolve(window.Plotly.relayout(el, fit)).then(done);
    else done();
  };
  Promise.resolve(window.Plotly.react(el, traces, layout, PLOT_CONFIG)).then(() => {
    unsketch(el);
    fitTicks();
  });
  plainHoverColours(el);
  if (!el.dataset.clicks && clicked) {
    el.on("plotly_click", clicked); // on the first plot: plotly gives the element `on` when it first plots
    // a drag zooms in; "Reset zoom" shows while it is zoomed (a new draw shows the whole head again)
    el.on("plotly_relayout", (e) => {
      const keys = Object.keys(e || {});
      if (keys.some((k) => k.includes(".range"))) reset.hidden = false;
      else if (keys.some((k) => k.endsWith(".autorange"))) reset.hidden = true;
    });
    el.dataset.clicks = "1";
  }
  reset.hidden = true;
}

const optionsFor = new WeakMap(); // the edit form's query select -> the tokens its options list

// A click on a cell blocks or unblocks it; shift-click picks the pair (set by bind).
let clicked = null;

export function deps(s) {
  return [
    ...shownDeps(s),
    s.run.diff,
    s.ui.view,
    s.ui.palette,
    s.ui.scoreScale,
    s.ui.layer,
    s.ui.focus,
    s.ui.query,
    s.ui.pair,
    s.ui.edits,
    s.cursor,
  ];
}

// The cell cursor within this view's grid, or null.
function cursorIn(view, cursor) {
  const K = (view.keyTokens || view.tokens).length;
  return cursor && cursor[0] < view.tokens.length && cursor[1] < K ? cursor : null;
}

// The readout under the plot: the cursor's cell in words (a live region, so a keyboard move is announced) and the
// buttons that do what a click and a shift-click do (on touch, a tap only shows the numbers).
function renderReadout(part, view, cursor) {
  const box = part("focus-readout");
  box.hidden = !cursor;
  if (!cursor) return;
  const [q, k] = cursor;
  const r = cellReadout(view, view.focusHead, q, k);
  box.dataset.q = String(q);
  box.dataset.k = String(k);
  box.querySelector("[data-role=text]").textContent = r.text;
  box.querySelector("[data-role=block]").textContent = r.blocked ? "Unblock this cell" : "Block this cell";
}

export function measure(root) {
  noteWidth(within(root)("focus-plot"));
}

export function render(root, s) {
  const part = within(root);
  const view = selectView(s);
  if (!view) return;
  const [fl, fh] = view.focus;
  const el = part("focus-plot");
  const cursor = cursorIn(view, s.cursor);
  renderReadout(part, view, cursor);
  el.setAttribute(
    "aria-label",
    `${view.multiLayer ? `Layer ${fl} head ${fh}` : `Head ${fh}`}: ${view.tokens.length} queries by ${(view.keyTokens || view.tokens).length} keys. Arrow keys move the cell cursor, Enter or Space blocks or unblocks it, Shift+Enter picks the pair`,
  );
  if (el.drawnView === view && el.cursor !== cursor && el._fullLayout) {
    // only the cursor moved: its outline, not the head's image, is drawn again
    el.cursor = cursor;
    const S = view.tokens.length;
    window.Plotly.relayout(el, {
      shapes: focusShapes(view, S, (view.keyTokens || view.tokens).length, themeInk(), cursor, el.outline),
    });
    return;
  }
  el.cursor = cursor;
  part("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  renderFocus(el, part("focus-reset"), view, view.focusHead, fl);
  renderSums(part("sums"), {
    weights: view.focusHead.weights,
    tokens: view.tokens,
    keyTokens: view.keyTokens,
    bug: view.bug,
    eligible: view.eligible,
    hidden: view.hidden,
    renormalised: view.renormalised,
  });
  // the weight-edit form: this head, the pair (or the query) as its cell
  part("edit-head").textContent = headName(fl, fh, view.multiLayer);
  const S = view.tokens.length;
  if (
    optionsFor.get(part("edit-query")) !== view.tokens ||
    part("edit-query").dataset.first !== String(firstPosition())
  ) {
    // one option a position, built once a tokens array (512 each at 512 tokens), the second select a clone
    const query = part("edit-query");
    query.replaceChildren(
      ...view.tokens.map((_, i) =>
        Object.assign(document.createElement("option"), {
          value: String(i),
          textContent: positionLabel(view.tokens, i),
        }),
      ),
    );
    part("edit-key").replaceChildren(...[...query.options].map((o) => o.cloneNode(true)));
    optionsFor.set(query, view.tokens);
    query.dataset.first = String(firstPosition()); // the count the labels are in (positions.js)
  }
  const pair = view.pair && view.pair.every((v) => v != null) ? view.pair : [Math.min(view.query, S - 1), 0];
  part("edit-query").value = String(pair[0]);
  part("edit-key").value = String(pair[1]);
  renderEdits(part("edit-shown"), s.ui.edits, view);
}

// The edits in force, under the form that adds them: what "Add edit" changed, in sight where it was pressed (their
// effect is drawn in Test's interventions panel).
function renderEdits(line, edits, view) {
  const at = (i) => positionLabel(view.tokens, i);
  const named = edits.map(
    (e) => `${headName(e.layer, e.head, view.multiLayer)} ${at(e.query)}→${at(e.key)} = ${e.weight}`,
  );
  line.hidden = !edits.length;
  line.textContent = edits.length ? `In force: ${named.join(", ")}. Their effect: Test, Interventions.` : "";
}

// Whether a plotly click came from a finger: the event plotly hands on, else the device's main pointer.
export function fromTouch(e) {
  if (e && (String(e.type).startsWith("touch") || e.pointerType === "touch" || e.sourceCapabilities?.firesTouchEvents))
    return true;
  return typeof matchMedia === "function" && matchMedia("(hover: none) and (pointer: coarse)").matches;
}

function readoutBox() {
  const box = document.createElement("div");
  box.id = "focus-readout";
  box.className = "focus-readout";
  box.dataset.testid = "focus-readout";
  box.hidden = true;
  const text = Object.assign(document.createElement("p"), { className: "readout-text" });
  text.dataset.role = "text";
  text.setAttribute("aria-live", "polite");
  const block = Object.assign(document.createElement("button"), { type: "button", className: "secondary small-btn" });
  block.dataset.role = "block";
  const pair = Object.assign(document.createElement("button"), {
    type: "button",
    className: "secondary small-btn",
    textContent: "Top heads for this pair",
  });
  pair.dataset.role = "pair";
  box.append(text, block, pair);
  return box;
}

export function bind(root, store) {
  const part = within(root);
  const el = part("focus-plot");
  if (!part("focus-readout")) el.after(readoutBox());
  const reset = Object.assign(document.createElement("button"), {
    type: "button",
    id: "focus-reset",
    className: "secondary small-btn",
    textContent: "Reset zoom",
    hidden: true,
  });
  reset.addEventListener("click", () =>
    window.Plotly?.relayout(el, { "xaxis.autorange": true, "yaxis.autorange": "reversed" }),
  );
  part("focus-title").after(reset);
  el.tabIndex = 0;
  el.setAttribute("role", "application");
  el.setAttribute("aria-roledescription", "attention heatmap");
  el.setAttribute("aria-describedby", "focus-readout");
  const here = () => {
    const view = selectView(store.getState());
    return view ? [view, cursorIn(view, store.getState().cursor)] : [null, null];
  };
  clicked = (ev) => {
    const p = ev.points && ev.points[0];
    if (!p || !Number.isInteger(p.x) || !Number.isInteger(p.y)) return;
    if (ev.event && ev.event.shiftKey) store.dispatch(act.pairSet(p.y, p.x));
    else if (fromTouch(ev.event))
      store.dispatch(act.cursorSet([p.y, p.x])); // a tap shows the numbers; the readout blocks
    else store.dispatch(act.cellToggled(p.y, p.x, "focus-plot"));
  };
  el.addEventListener("focus", (e) => {
    if (e.target !== el) return;
    const [view, cursor] = here();
    if (view && !cursor)
      store.dispatch(act.cursorSet(view.pair && view.pair.every((v) => v != null) ? [...view.pair] : [0, 0]));
  });
  el.addEventListener("keydown", (e) => {
    if (e.target !== el) return;
    const [view, cursor] = here();
    if (!view) return;
    const [q, k] = cursor || [0, 0];
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      if (e.shiftKey) store.dispatch(act.pairSet(q, k));
      else store.dispatch(act.cellToggled(q, k, "focus-plot"));
      return;
    }
    const S = view.tokens.length;
    const to = moveCursor([q, k], e.key, S, (view.keyTokens || view.tokens).length, Math.max(8, Math.ceil(S / 16)));
    if (!to) return;
    e.preventDefault();
    store.dispatch(act.cursorSet(to));
  });
  part("focus-readout").addEventListener("click", (e) => {
    const b = e.target instanceof Element ? e.target.closest("button[data-role]") : null;
    const [, cursor] = here();
    if (!b || !cursor) return;
    if (b.dataset.role === "block") store.dispatch(act.cellToggled(cursor[0], cursor[1], "focus-plot"));
    else store.dispatch(act.pairSet(cursor[0], cursor[1]));
  });
  part("edit-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const view = selectView(store.getState());
    const weight = Number.parseFloat(part("edit-weight").value);
    const query = Number(part("edit-query").value);
    const key = Number(part("edit-key").value);
    const bad = !view || !(weight >= 0 && weight <= 1) || !Number.isInteger(query) || !Number.isInteger(key);
    part("edit-weight").setAttribute("aria-invalid", bad ? "true" : "false");
    part("edit-error").textContent = bad ? "The weight must be a number from 0 to 1." : "";
    if (bad) return;
    store.dispatch(act.editAdded({ layer: view.focus[0], head: view.focus[1], query, key, weight }));
  });
}
