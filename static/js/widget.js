// attnlab.show's notebook widget (attnlab/widget.py, an anywidget): the standalone file's views (standalone.js, so
// the page's own heads.js, overview.js and retrieval.js) drawn in a shadow root of the output, from the run's arrays
// form, which the kernel sends as a binary buffer (the model's `_data`), with nothing fetched. wire/standalone.py
// bundles this module and what it imports into the widget's `_esm` (one ES module whose default export is
// { render }); the markup and CSS it draws into are the file's, in the model's `_shell`.
//
// Two-way: the kernel's `view`, `layer`, `head` and `query` traits set what is shown (`w.head = 2` redraws) and
// what is shown sets them back; a pressed cell sets `selected` ({layer, head, query, key}). The mask controls set
// `causal` and `blocked`: the kernel runs the model again with them and sends the new buffer, drawn in place.

import { readArrays } from "./arrays.js";
import { node } from "./dom.js";
import { countFrom1 } from "./positions.js";
import { sinksLine } from "./sinks.js";
import { bindControls, initialState, reduce, render as draw, summaryLine } from "./standalone.js";

// The arrays form of a buffer trait: ipywidgets hands a DataView (or an ArrayBuffer); a copy of its own bytes, so
// that every typed array read from it starts aligned.
export function bufferOf(value) {
  if (value instanceof ArrayBuffer) return value;
  return value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength);
}

// The traits a state shows.
export function traitsOf(s) {
  return { view: s.show, layer: s.ui.layer, head: s.ui.focus[1], query: s.ui.query };
}

// The cell an action pressed, as `selected`, or undefined when it pressed none: a head card's cell (the one under
// the pointer: the state's highlight before the press), a cell of the large head, a key of the retrieval.
export function selectedBy(prev, next, a) {
  const [layer, head] = next.ui.focus;
  if (a.type === "headOpened") {
    const hl = prev.highlight || {};
    return { layer: a.layer, head: a.head, query: a.query ?? hl.q ?? null, key: hl.k ?? null };
  }
  if (a.type === "querySet" && a.key != null) return { layer, head, query: a.query, key: a.key };
  if (a.type === "pairSet" && a.k != null) return { layer, head, query: a.q, key: a.k };
  return undefined;
}

// `blocked` with the cell [q, k] switched: added when absent, taken off when there.
export function toggledCell(blocked, q, k) {
  const rest = blocked.filter(([bq, bk]) => bq !== q || bk !== k);
  return rest.length < blocked.length ? rest : [...blocked, [q, k]];
}

// The mask controls, put in the file's own controls: causal, and a button that blocks (or unblocks) the cell last
// pressed. Each sets a trait; the kernel answers with the new weights.
function maskControls(root, model) {
  const causal = node("input", { type: "checkbox", id: "sa-causal" });
  const block = node("button", { type: "button", id: "sa-block", className: "chip" }, "Block pressed cell");
  const status = node("span", { id: "sa-mask-status", className: "muted small" });
  const field = node("div", { className: "sa-field" });
  const label = node("label", { htmlFor: "sa-causal" }, "Causal mask");
  field.append(label, causal);
  const blockField = node("div", { className: "sa-field" });
  blockField.append(node("label", {}, "Blocked cells"), block, status);
  root.querySelector(".sa-controls").append(field, blockField);
  causal.addEventListener("change", () => {
    status.textContent = "recomputing…";
    model.set("causal", causal.checked);
    model.save_changes();
  });
  block.addEventListener("click", () => {
    const sel = model.get("selected");
    if (!sel || sel.key == null) {
      status.textContent = "press a cell first";
      return;
    }
    status.textContent = "recomputing…";
    model.set("blocked", toggledCell(model.get("blocked"), sel.query, sel.key));
    model.save_changes();
  });
  return () => {
    causal.checked = model.get("causal");
    const n = model.get("blocked").length;
    status.textContent = `${n} blocked`;
  };
}

export function render({ model, el }) {
  const root = el.attachShadow({ mode: "open" });
  // the shell is the server's own markup and CSS (wire/standalone.py widget_shell, its one text escaped there),
  // parsed inert by DOMParser (no script of it runs) and moved into the shadow root
  const shell = new DOMParser().parseFromString(model.get("_shell"), "text/html");
  root.append(...[...shell.head.childNodes, ...shell.body.childNodes]);
  const $ = (id) => root.getElementById(id);
  let state = null;
  const publish = (prev, a) => {
    const traits = traitsOf(state);
    let changed = false;
    for (const [name, value] of Object.entries(traits)) {
      if (model.get(name) !== value) {
        model.set(name, value);
        changed = true;
      }
    }
    const selected = selectedBy(prev, state, a);
    if (selected !== undefined) {
      model.set("selected", selected);
      changed = true;
    }
    if (changed) model.save_changes();
  };
  const store = {
    root,
    host: el,
    getState: () => state,
    dispatch(a) {
      const prev = state;
      state = reduce(state, a);
      if (state !== prev) draw(state, store, prev);
      publish(prev, a);
    },
  };
  const showMasks = maskControls(root, model);
  const load = () => {
    const result = readArrays(bufferOf(model.get("_data")));
    const shown = model.get("_shown");
    countFrom1(shown.positions_from === 1);
    const traits = { view: model.get("view"), layer: model.get("layer"), head: model.get("head") };
    const palette = state ? state.ui.palette : shown.palette;
    const next = initialState(result, { ...shown, ...traits, query: model.get("query"), palette });
    state = { ...next, rollout: shown.rollout || null };
    $("sa-summary").textContent = summaryLine(result, state);
    $("sa-sinks").textContent = sinksLine(result.sinks, result.source_tokens || result.tokens);
    $("sa-sinks").hidden = !result.sinks;
    showMasks();
    draw(state, store);
  };
  const showError = () => {
    const message = model.get("error");
    $("sa-error").hidden = !message;
    $("sa-error").textContent = message;
    if (message) showMasks();
  };
  const follow = {
    view: (v) => state.show !== v && { type: "showSet", show: v },
    layer: (v) => state.ui.layer !== v && { type: "layerSet", layer: v },
    head: (v) => state.ui.focus[1] !== v && { type: "headSet", head: v },
    query: (v) => state.ui.query !== v && { type: "querySet", query: v },
  };
  const onChange = {};
  for (const [name, action] of Object.entries(follow)) {
    onChange[`change:${name}`] = () => {
      const a = action(model.get(name));
      if (a) store.dispatch(a);
    };
  }
  Object.assign(onChange, {
    "change:_data": load,
    "change:error": showError,
    "change:causal": showMasks,
    "change:blocked": showMasks,
  });
  for (const [event, handler] of Object.entries(onChange)) model.on(event, handler);
  bindControls(store);
  load();
  showError();
  return () => {
    for (const [event, handler] of Object.entries(onChange)) model.off(event, handler);
  };
}
