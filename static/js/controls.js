// Controls <-> state: writeControls() puts state into the form, bindControls() turns every input back into state
// and a run or a redraw, fillModels() fills the model and example menus once /api/models answers. main.js hands in
// the context ({state, app, actions}); this module never imports main.js.

import { fetchAttentionNpz } from "./api.js";
import { PALETTES, RDBU } from "./colors.js";
import { EXAMPLES, exampleText } from "./examples.js";
import { download, headsPng } from "./exporter.js";
import { visibleCanvases } from "./heads.js";
import { splitTokens } from "./masks.js";
import { renderMatrices, setEntry } from "./matrices.js";
import { hideError, showError } from "./panels.js";
import { itemResult } from "./batch.js";
import { BATCH_MODELS, BUGS, RANDOM_OPTIONS, SOURCE_MODELS, defaultState, encodeState, fitRows, stateForModel } from "./state.js";
import { batchOf, singleRequest, sourceOf } from "./requests.js";

const $ = (id) => document.getElementById(id);

// ctx.actions needs: info, run, render, schedule, renderHeadTypesPanel, refreshHeadTypes, refreshTopHeads.
export function createControls({ state, app, actions }) {
  const info = (...a) => actions.info(...a);
  const run = (...a) => actions.run(...a);
  const render = (...a) => actions.render(...a);
  const schedule = (...a) => actions.schedule(...a);
  const renderHeadTypesPanel = (...a) => actions.renderHeadTypesPanel(...a);

  function writeControls() {
    const m = info();
    $("model-select").value = state.model;
    $("model-description").textContent = m ? m.description : "";
    if (document.activeElement !== $("sequence-input")) $("sequence-input").value = state.text;
    $("mask-causal").checked = state.masks.causal;
    $("mask-window-on").checked = state.masks.window != null;
    if (state.masks.window != null) $("mask-window").value = String(state.masks.window);
    $("all-masked").value = state.allMasked;
    $("scale").checked = state.scale;
    $("bug-select").value = state.bug || "";
    writeMoreInputs();
    document.querySelectorAll("input[name=view]").forEach((r) => {
      r.checked = r.value === state.view;
    });
    $("palette-select").value = state.palette;
    if (document.activeElement !== $("ht-find")) $("ht-find").value = state.hfind;
    $("ht-score").value = state.hscore;
    $("ht-min").disabled = !state.hscore;
    if (document.activeElement !== $("ht-min")) $("ht-min").value = String(state.hmin);
    const n = state.masks.blocked.length;
    $("blocked-count").textContent = n ? `${n} cell${n === 1 ? "" : "s"} blocked` : "no cells blocked";
    $("blocked-clear").disabled = n === 0;
    const hasOptions = RANDOM_OPTIONS.some((k) => k in state.options);
    $("random-options").hidden = !hasOptions;
    for (const k of RANDOM_OPTIONS) {
      const el = $(`opt-${k}`);
      if (!el) continue;
      if (k === "positions") el.checked = !!state.options[k];
      else el.value = state.options[k] ?? "";
    }
    const layers = m ? m.layers : 1;
    const sel = $("layer-select");
    const want = [...Array.from({ length: layers }, (_, i) => String(i)), ...(layers > 1 ? ["all"] : [])];
    if ([...sel.options].map((o) => o.value).join() !== want.join()) {
      sel.replaceChildren(
        ...want.map((v) => Object.assign(document.createElement("option"), { value: v, textContent: v === "all" ? "all layers" : `layer ${v}` })),
      );
    }
    sel.value = String(state.layer);
    sel.disabled = layers <= 1;
    const tb = $("textbook-matrices");
    const isTextbook = state.model === "textbook" && m && m.options && m.options.x;
    tb.hidden = !isTextbook;
    if (isTextbook) {
      const mats = state.matrices || { x: m.options.x, w_q: m.options.w_q, w_k: m.options.w_k, w_v: m.options.w_v };
      const key = JSON.stringify([mats, state.text]);
      if (tb.dataset.key !== key && !tb.contains(document.activeElement)) {
        tb.dataset.key = key;
        renderMatrices($("matrix-editors"), mats, splitTokens(state.text), onMatrixEdit);
      }
    }
  }

  // The source and batch boxes: their text, whether this model takes them, and what they do to the masks.
  function writeMoreInputs() {
    if (document.activeElement !== $("source-input")) $("source-input").value = state.source;
    if (document.activeElement !== $("batch-input")) $("batch-input").value = state.batch;
    const canSource = SOURCE_MODELS.includes(state.model);
    const canBatch = BATCH_MODELS.includes(state.model) && !state.matrices;
    const batch = batchOf(state);
    const source = sourceOf(state);
    $("source-help").textContent = !canSource
      ? `Cross-attention takes its keys and values from a second sequence: on ${SOURCE_MODELS.join(", ")} here.`
      : batch
        ? "The batch below wins while it has text."
        : source
          ? "Queries come from the sequence above, keys and values from this one: every head is S_q × S_k."
          : "Keys and values from this text instead of the sequence: cross-attention.";
    $("batch-help").textContent = !canBatch
      ? `A batch runs on ${BATCH_MODELS.join(", ")}.`
      : batch
        ? `${batch.length} text${batch.length === 1 ? "" : "s"}, padded to the longest; the sequence above is not used.`
        : "Each line one text; they are padded to the longest and run together.";
    $("source-input").setAttribute("aria-disabled", canSource ? "false" : "true");
    $("batch-input").setAttribute("aria-disabled", canBatch ? "false" : "true");
    if (batch || source) $("more-inputs").open = true;
    // causal, a window and padding compare positions of one sequence: a source leaves them out; a batch pads itself
    const note = $("mask-note");
    note.hidden = !(batch || source);
    note.textContent = source
      ? "With a source, only blocked cells and the source's padding apply: causal and window compare positions of one sequence."
      : batch
        ? "In a batch each item's padding comes from its length; causal, window and blocked cells apply to every item."
        : "";
    for (const id of ["mask-causal", "mask-window-on", "mask-window"]) $(id).disabled = !!source;
  }

  function onMatrixEdit(name, i, j, raw) {
    const m = info();
    const base = state.matrices || { x: m.options.x, w_q: m.options.w_q, w_k: m.options.w_k, w_v: m.options.w_v };
    const next = setEntry(base, name, i, j, raw);
    if (!next) return false;
    state.matrices = next;
    schedule(`${name.toUpperCase().replace("_", "_")}[${i + 1}][${j + 1}] set to ${raw}`);
    return true;
  }

  function chooseModel(name, text, options) {
    const m = info(name);
    if (!m) return;
    const keep = {
      view: state.view, palette: state.palette, scale: state.scale, allMasked: state.allMasked,
      hsort: state.hsort, hdir: state.hdir,
      // a pinned A stays (compare two models or seeds); the perturbation settings stay; interventions name heads
      // of the old model and go
      pin: state.pin, perturbOn: state.perturbOn, perturb: { ...state.perturb, position: null }, ablMode: state.ablMode,
      // a classic bug, decoding and the sweep are page settings; the cost overrides describe the old model and go
      bug: state.bug, decodeOn: state.decodeOn, sweep: state.sweep,
      // a source and a batch stay while the new model takes them
      source: state.source, sourcePadded: state.sourcePadded, batch: state.batch,
    };
    Object.assign(state, stateForModel(m, defaultState()), keep);
    if (text) state.text = text;
    if (options) Object.assign(state.options, options);
    app.diff = null;
    app.lastAction = "";
    app.notice = "";
    writeControls();
    schedule();
  }

  function updateUrl() {
    const qs = encodeState(state);
    if (location.search !== `?${qs}`) history.replaceState(null, "", `?${qs}`);
  }

  function bindControls() {
    $("run-form").addEventListener("submit", (e) => {
      e.preventDefault();
      state.text = $("sequence-input").value;
      state.source = $("source-input").value;
      state.batch = $("batch-input").value;
      if (state.model === "textbook" && state.matrices) {
        state.matrices = { ...state.matrices, x: fitRows(state.matrices.x, splitTokens(state.text).length) };
      }
      app.lastAction = "new sequence";
      run();
    });
    $("sequence-input").addEventListener("input", (e) => {
      state.text = e.target.value;
    });
    for (const id of ["sequence-input", "source-input", "batch-input"]) {
      $(id).addEventListener("keydown", (e) => {
        if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
          e.preventDefault();
          $("run-form").requestSubmit();
        }
      });
    }
    $("source-input").addEventListener("input", (e) => {
      state.source = e.target.value;
    });
    $("batch-input").addEventListener("input", (e) => {
      state.batch = e.target.value;
    });
    for (const id of ["source-input", "batch-input"]) {
      $(id).addEventListener("change", () => {
        app.skipDiff = true;
        schedule(id === "source-input" ? "new source" : "new batch");
      });
    }
    $("batch-item").addEventListener("change", (e) => {
      if (!app.full || !app.full.config.batch) return;
      state.item = Number(e.target.value) || 0;
      app.prev = null;
      app.diff = null;
      app.result = itemResult(app.full, state.item);
      app.single = singleRequest(app.request, state.item);
      render();
      // the one-sequence panels now describe this item
      actions.refreshHeadTypes();
      actions.refreshTopHeads();
    });
    $("model-select").addEventListener("change", (e) => chooseModel(e.target.value));
    $("example-select").addEventListener("change", (e) => {
      const ex = EXAMPLES.concat(app.extraExamples || [])[Number(e.target.value)];
      e.target.value = "";
      if (!ex) return;
      if (ex.sort) {
        state.hsort = ex.sort;
        state.hdir = "desc";
      }
      app.pendingPair = ex.pair ? { ...ex.pair, model: ex.model } : null;
      app.pendingOpen = !!ex.pair;
      chooseModel(ex.model, exampleText(ex, info(ex.model)), ex.options);
    });
    $("mask-causal").addEventListener("change", (e) => {
      state.masks = { ...state.masks, causal: e.target.checked };
      schedule(`causal ${e.target.checked ? "on" : "off"}`);
    });
    const windowChanged = () => {
      const on = $("mask-window-on").checked;
      const w = Number.parseInt($("mask-window").value, 10);
      state.masks = { ...state.masks, window: on ? Math.max(1, Number.isFinite(w) ? w : 3) : null };
      schedule(on ? `window ${state.masks.window}` : "window off");
    };
    $("mask-window-on").addEventListener("change", windowChanged);
    $("mask-window").addEventListener("change", () => {
      $("mask-window-on").checked = true;
      windowChanged();
    });
    $("blocked-clear").addEventListener("click", () => {
      state.masks = { ...state.masks, blocked: [] };
      schedule("blocked cells cleared");
    });
    $("all-masked").addEventListener("change", (e) => {
      state.allMasked = e.target.value;
      schedule(`all-masked rows: ${e.target.value}`);
    });
    $("scale").addEventListener("change", (e) => {
      state.scale = e.target.checked;
      schedule(`scaling ${e.target.checked ? "on" : "off"}`);
    });
    $("bug-select").addEventListener("change", (e) => {
      state.bug = BUGS.includes(e.target.value) ? e.target.value : null;
      schedule(state.bug ? `classic bug on: ${e.target.selectedOptions[0].textContent}` : "classic bug off");
    });
    document.querySelectorAll("input[name=view]").forEach((r) =>
      r.addEventListener("change", () => {
        state.view = r.value;
        render();
      }),
    );
    $("palette-select").addEventListener("change", (e) => {
      state.palette = e.target.value;
      render();
    });
    $("layer-select").addEventListener("change", (e) => {
      state.layer = e.target.value === "all" ? "all" : Number(e.target.value);
      state.page = 0;
      state.focus = null;
      app.notice = "";
      app.skipDiff = true;
      schedule();
    });
    for (const k of RANDOM_OPTIONS) {
      const el = $(`opt-${k}`);
      el?.addEventListener("change", () => {
        if (k === "positions") state.options[k] = el.checked;
        else {
          const v = Number.parseInt(el.value, 10);
          state.options[k] = Number.isFinite(v) ? v : k === "kv_heads" ? null : state.options[k];
        }
        state.focus = null;
        schedule(`${k} = ${state.options[k]}`);
      });
    }
    $("matrices-reset").addEventListener("click", () => {
      state.matrices = null;
      schedule("the chapter's numbers restored");
    });
    const pager = $("heads-pager");
    pager.querySelector("[data-role=prev]").addEventListener("click", () => {
      state.page = Math.max(0, state.page - 1);
      render();
    });
    pager.querySelector("[data-role=next]").addEventListener("click", () => {
      state.page += 1;
      render();
    });
    $("retrieval").addEventListener("keydown", (e) => {
      if (!app.result) return;
      const S = app.result.tokens.length;
      const step = { ArrowUp: -1, ArrowLeft: -1, ArrowDown: 1, ArrowRight: 1 }[e.key];
      if (!step) return;
      e.preventDefault();
      state.query = ((state.query ?? S - 1) + step + S) % S;
      render();
      $("retrieval").focus();
    });
    $("error-banner").querySelector("[data-role=dismiss]").addEventListener("click", hideError);
    $("ht-find").addEventListener("input", (e) => {
      state.hfind = e.target.value.slice(0, 40);
      updateUrl();
      renderHeadTypesPanel();
    });
    $("ht-score").addEventListener("change", (e) => {
      state.hscore = e.target.value;
      $("ht-min").disabled = !state.hscore;
      updateUrl();
      renderHeadTypesPanel();
    });
    $("ht-min").addEventListener("input", (e) => {
      const v = Number.parseFloat(e.target.value);
      if (!Number.isFinite(v)) return;
      state.hmin = v;
      updateUrl();
      renderHeadTypesPanel();
    });
    $("copy-link").addEventListener("click", async () => {
      updateUrl();
      try {
        await navigator.clipboard.writeText(location.href);
        $("share-status").textContent = "Link copied: it opens this exact view.";
      } catch {
        $("share-status").textContent = `Copy this link: ${location.href}`;
      }
    });
    $("export-png").addEventListener("click", async () => {
      if (!app.view) return;
      const cards = visibleCanvases().map(({ canvas, item }) => ({
        canvas,
        label: app.view.multiLayer ? `L${item.layer} H${item.head.index}` : `Head ${item.head.index}`,
      }));
      const title = `attnlab · ${app.result.model} · ${state.view} · “${state.text.slice(0, 60)}”`;
      const stops = state.view === "scores" ? RDBU : PALETTES[state.palette];
      const blob = await headsPng(cards, title, stops);
      if (blob) download(`attnlab-${app.result.model}-heads.png`, blob);
    });
    $("export-npz").addEventListener("click", async () => {
      if (!app.request) return;
      try {
        download(`attnlab-${app.result.model}.npz`, await fetchAttentionNpz(app.request));
      } catch (err) {
        showError(err);
      }
    });
    $("export-json").addEventListener("click", () => {
      if (!app.result) return;
      const data = { link: location.href, request: app.request, response: app.full || app.result };
      download(`attnlab-${app.result.model}.json`, new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
    });
  }

  function fillModels() {
    const sel = $("model-select");
    sel.replaceChildren(
      ...app.models.map((m) =>
        Object.assign(document.createElement("option"), {
          value: m.name,
          textContent: `${m.name} · ${m.layers > 1 ? `${m.layers} layers × ` : ""}${m.heads} head${m.heads === 1 ? "" : "s"}`,
        }),
      ),
    );
    // custom needs numbers typed in as x; the page offers it through textbook's editors instead
    for (const o of sel.options) if (o.value === "custom") o.remove();
    const names = app.models.map((m) => m.name);
    const listed = new Set(EXAMPLES.map((e) => e.model));
    app.extraExamples = app.models
      .filter((m) => !listed.has(m.name) && m.default_text && m.name !== "custom")
      .map((m) => ({ model: m.name, text: m.default_text, label: `${m.name}: ${m.default_text.slice(0, 50)}` }));
    const ex = $("example-select");
    EXAMPLES.concat(app.extraExamples).forEach((e, i) => {
      if (!names.includes(e.model)) return;
      if (e.repeat && !exampleText(e, info(e.model))) return;
      ex.append(Object.assign(document.createElement("option"), { value: String(i), textContent: e.label }));
    });
  }

  return { writeControls, onMatrixEdit, chooseModel, updateUrl, bindControls, fillModels };
}
