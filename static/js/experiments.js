// The three panels that test claims instead of showing a heatmap: "Test a claim" (POST /api/perturb),
// interventions (POST /api/intervene: the ablate toggles on the head cards and the weight edit under the large
// head) and "Compare with a pinned run" (POST /api/compare). Each asks the API on its own, latest request wins,
// and redraws its own panel when it answers. main.js hands in the context ({state, app, actions}); this module
// never imports main.js. The experiment settings live in state, so the URL carries them.

import { describeError, fetchCompare, fetchIntervene, fetchPerturb } from "./api.js";
import { fetchLatest } from "./analysis-panels.js";
import { renderPerturb } from "./claims.js";
import { renderCompare } from "./compare.js";
import {
  addEdit,
  findAblation,
  headName,
  keepValid,
  renderIntervention,
  toggleAblation,
} from "./interventions.js";
import { compareRequest, interveneRequest, perturbRequest, pinRequest } from "./requests.js";
import { positionLabel } from "./tophead.js";

const $ = (id) => document.getElementById(id);
export const TOP_K = 5;

function idle(slot) {
  if (slot.controller) slot.controller.abort();
  Object.assign(slot, { key: null, asked: null, result: null, status: "idle", message: "", controller: null });
}

// Ask unless this exact request was the last one asked: an answer, or an error, stands until something changes
// (fetchLatest forgets the key of a failed request; a redraw must not send it again).
function askOnce(slot, fetcher, req, render) {
  const key = JSON.stringify(req);
  if (slot.asked === key) return;
  slot.asked = key;
  fetchLatest(slot, fetcher, req, render);
}

const tooLarge = (err) => err && err.code === "too_large";

// Refill a <select> of positions only when the tokens change, keeping the chosen value when it still exists.
function fillPositions(sel, tokens, first) {
  const key = JSON.stringify([first, tokens]);
  if (sel.dataset.key === key) return;
  const keep = sel.value;
  sel.dataset.key = key;
  const opts = tokens.map((_, i) => Object.assign(document.createElement("option"), { value: String(i), textContent: positionLabel(tokens, i) }));
  if (first) opts.unshift(Object.assign(document.createElement("option"), { value: "", textContent: first }));
  sel.replaceChildren(...opts);
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

// ctx.actions needs: info, render, updateUrl.
export function createExperiments({ state, app, actions }) {
  const info = (...a) => actions.info(...a);
  const render = (...a) => actions.render(...a);
  const updateUrl = (...a) => actions.updateUrl(...a);
  const multiLayer = () => !!app.result && app.result.config.n_layers > 1;

  // ---- what each panel asks ------------------------------------------------------------------------------------

  function perturbPosition() {
    const S = app.result.tokens.length;
    const p = state.perturb.position ?? state.query ?? S - 1;
    return Math.max(0, Math.min(S - 1, p));
  }

  function refreshPerturb() {
    const slot = app.perturb;
    if (!state.perturbOn || !app.single || !app.result) {
      if (slot.status !== "idle") {
        idle(slot);
        renderPerturbPanel();
      }
      return;
    }
    askOnce(slot, fetchPerturb, perturbRequest(app.single, perturbPosition(), state.perturb), renderPerturbPanel);
  }

  // Before/after with every layer's weights; when that is more than the server sends, only the deltas.
  async function intervene(req, signal) {
    try {
      return await fetchIntervene(req, signal);
    } catch (err) {
      if (!tooLarge(err)) throw err;
      const result = await fetchIntervene({ ...req, include: [] }, signal);
      return { ...result, note: `${describeError(err).message} The before/after heatmaps are left out; the rest is complete.` };
    }
  }

  function refreshIntervention() {
    const slot = app.intervene;
    if (!app.single || !app.result || (!state.ablate.length && !state.edits.length)) {
      if (slot.status !== "idle") {
        idle(slot);
        renderInterventionPanel();
      }
      return;
    }
    const { layer: _layer, ...attention } = app.single;
    const req = interveneRequest({ ...attention, include: ["weights"] }, state.ablate, state.edits, TOP_K);
    askOnce(slot, intervene, req, renderInterventionPanel);
  }

  // The layer the page shows, when it shows one; a compare over every layer falls back to it when too large.
  function shownLayer() {
    const m = info();
    if (!m || m.layers <= 1) return null;
    return state.layer === "all" ? null : state.layer;
  }

  async function compare(req, signal) {
    try {
      return await fetchCompare(req, signal);
    } catch (err) {
      if (!tooLarge(err) || req.a.layer != null) throw err;
      const layer = state.focus ? state.focus[0] : 0;
      return fetchCompare({ a: { ...req.a, layer }, b: { ...req.b, layer } }, signal);
    }
  }

  function refreshCompare() {
    const slot = app.compare;
    if (!state.pin || !app.single) {
      if (slot.status !== "idle") {
        idle(slot);
        renderComparePanel();
      }
      return;
    }
    askOnce(slot, compare, compareRequest(state.pin, app.single, shownLayer()), renderComparePanel);
  }

  function refreshExperiments() {
    if (app.result) {
      const { n_layers: L, n_heads: H } = app.result.config;
      state.ablate = keepValid(state.ablate, L, H);
      const S = app.result.tokens.length;
      state.edits = keepValid(state.edits, L, H).filter((e) => e.query < S && e.key < S);
    }
    refreshPerturb();
    refreshIntervention();
    refreshCompare();
  }

  // ---- drawing -------------------------------------------------------------------------------------------------

  function writeExperimentControls() {
    const m = info();
    const tokens = app.result ? app.result.tokens : [];
    const canSwap = !!m && !String(m.tokenizer || "").startsWith("labels") && !state.matrices;
    const kind = $("perturb-kind");
    kind.querySelector("option[value=token]").disabled = !canSwap;
    if (!canSwap && state.perturb.kind === "token") state.perturb = { ...state.perturb, kind: "shift" };
    kind.value = state.perturb.kind;
    $("perturb-amount").hidden = state.perturb.kind !== "shift";
    $("perturb-token").hidden = state.perturb.kind !== "token";
    if (document.activeElement !== $("perturb-amount")) $("perturb-amount").value = String(state.perturb.amount);
    if (document.activeElement !== $("perturb-token")) $("perturb-token").value = state.perturb.token;
    const vocab = $("perturb-vocab");
    const vkey = m && m.vocab ? m.name : "";
    if (vocab.dataset.key !== vkey) {
      vocab.dataset.key = vkey;
      vocab.replaceChildren(...(m && m.vocab ? m.vocab : []).map((w) => Object.assign(document.createElement("option"), { value: w })));
    }
    $("perturb-kind-help").textContent = canSwap
      ? ""
      : "Token swap needs a model with token embeddings (random, minilm, induction); this one takes numbers.";
    if (tokens.length) {
      const S = tokens.length;
      const q = Math.min(state.query ?? S - 1, S - 1);
      fillPositions($("perturb-position"), tokens, null);
      const sel = $("perturb-position");
      const follow = sel.querySelector("option[data-follow]") || Object.assign(document.createElement("option"), { value: "" });
      follow.dataset.follow = "1";
      follow.textContent = `the retrieval query (${positionLabel(tokens, q)})`;
      if (sel.firstChild !== follow) sel.prepend(follow);
      sel.value = state.perturb.position == null ? "" : String(Math.min(state.perturb.position, S - 1));
      fillPositions($("edit-query"), tokens, null);
      fillPositions($("edit-key"), tokens, null);
      prefillEdit(tokens);
    }
    $("perturb-off").hidden = !state.perturbOn;
    $("abl-mode").value = state.ablMode;
    const any = state.ablate.length + state.edits.length > 0;
    $("iv-clear").disabled = !any;
    renderInterventionList();
    $("pin-a").disabled = !app.single;
    $("unpin").disabled = !state.pin;
    $("pin-a").textContent = state.pin ? "Pin this run as A instead" : "Pin as A";
    const focus = app.view ? app.view.focus : null;
    $("edit-head").textContent = focus ? headName(focus[0], focus[1], multiLayer()) : "this head";
  }

  // The edit form follows the last shift-clicked cell (state.pair) without taking over a choice made since.
  function prefillEdit(tokens) {
    const S = tokens.length;
    const pair = state.pair && state.pair.every((v) => v != null) ? state.pair : null;
    const want = pair ? pair : [Math.min(state.query ?? S - 1, S - 1), null];
    const key = JSON.stringify([want, S]);
    if (app.editPrefill === key) return;
    app.editPrefill = key;
    $("edit-query").value = String(want[0]);
    if (want[1] != null) $("edit-key").value = String(want[1]);
    else if (!$("edit-key").value) $("edit-key").value = "0";
  }

  function renderInterventionList() {
    const list = $("iv-list");
    const focused = list.contains(document.activeElement) ? document.activeElement.dataset.item : null;
    const items = [
      ...state.ablate.map((a) => ({ id: `a${a.layer}.${a.head}`, text: `${headName(a.layer, a.head, multiLayer())} ${a.mode}-ablated`, drop: () => dropAblation(a) })),
      ...state.edits.map((e, i) => ({
        id: `e${i}`,
        text: `${headName(e.layer, e.head, multiLayer())} ${e.query}→${e.key} = ${e.weight}`,
        drop: () => dropEdit(e),
      })),
    ];
    list.replaceChildren(
      ...items.map((it) => {
        const b = Object.assign(document.createElement("button"), { type: "button", className: "iv-chip" });
        b.dataset.item = it.id;
        b.textContent = `${it.text} ✕`;
        b.setAttribute("aria-label", `Remove: ${it.text}`);
        b.addEventListener("click", it.drop);
        return b;
      }),
    );
    if (!items.length) list.append(Object.assign(document.createElement("span"), { className: "muted small", textContent: "No intervention yet." }));
    if (focused) list.querySelector(`[data-item="${CSS.escape(focused)}"]`)?.focus();
  }

  function renderPerturbPanel() {
    renderPerturb($("claims-panel"), {
      result: app.perturb.result,
      status: app.perturb.status,
      message: app.perturb.message,
    });
  }

  function renderInterventionPanel() {
    const slot = app.intervene;
    const status = $("intervene-status");
    status.classList.toggle("bad", slot.status === "error");
    status.textContent =
      slot.status === "error"
        ? slot.message
        : slot.status === "loading"
          ? "running the model with the interventions…"
          : state.ablate.length + state.edits.length
            ? ""
            : "Press “ablate” on a head card, or set one weight under the large head.";
    renderIntervention($("intervene-body"), {
      result: slot.status === "error" ? null : slot.result,
      status: slot.status,
      multiLayer: multiLayer(),
      note: slot.result?.note,
    });
  }

  function renderComparePanel() {
    renderCompare($("compare-body"), {
      pin: state.pin,
      current: app.single ? pinRequest(app.single) : null,
      result: app.compare.result,
      status: app.compare.status,
      message: app.compare.message,
      multiLayer: multiLayer(),
    });
  }

  function renderExperiments() {
    writeExperimentControls();
    refreshExperiments();
    renderPerturbPanel();
    renderInterventionPanel();
    renderComparePanel();
  }

  // ---- actions -------------------------------------------------------------------------------------------------

  function changed() {
    updateUrl();
    writeExperimentControls();
    refreshExperiments();
    renderInterventionPanel();
  }

  // A head card's ablate toggle. Returns the head's new state so the card can show it without a full redraw.
  function onAblate(layer, head) {
    state.ablate = toggleAblation(state.ablate, layer, head, state.ablMode);
    changed();
    return findAblation(state.ablate, layer, head);
  }

  function dropAblation(a) {
    state.ablate = state.ablate.filter((x) => x !== a);
    render();
  }

  function dropEdit(e) {
    state.edits = state.edits.filter((x) => x !== e);
    render();
  }

  function perturbFromForm() {
    const amount = Number.parseFloat($("perturb-amount").value);
    const pos = $("perturb-position").value;
    state.perturb = {
      position: pos === "" ? null : Number(pos),
      kind: $("perturb-kind").value === "token" ? "token" : "shift",
      amount: Number.isFinite(amount) ? amount : 1,
      token: $("perturb-token").value.trim(),
    };
  }

  function bindExperiments() {
    $("perturb-form").addEventListener("submit", (e) => {
      e.preventDefault();
      perturbFromForm();
      state.perturbOn = true;
      app.perturb.asked = null; // the button always asks again
      changed();
    });
    for (const id of ["perturb-position", "perturb-kind", "perturb-amount", "perturb-token"]) {
      $(id).addEventListener("change", () => {
        perturbFromForm();
        changed();
      });
    }
    $("perturb-off").addEventListener("click", () => {
      state.perturbOn = false;
      changed();
      $("perturb-run").focus();
    });
    $("abl-mode").addEventListener("change", (e) => {
      state.ablMode = e.target.value === "mean" ? "mean" : "zero";
      state.ablate = state.ablate.map((a) => ({ ...a, mode: state.ablMode }));
      changed();
    });
    $("iv-clear").addEventListener("click", () => {
      state.ablate = [];
      state.edits = [];
      render();
    });
    $("edit-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const focus = app.view ? app.view.focus : null;
      const weight = Number.parseFloat($("edit-weight").value);
      const query = Number($("edit-query").value);
      const key = Number($("edit-key").value);
      const bad = !focus || !(weight >= 0 && weight <= 1) || !Number.isInteger(query) || !Number.isInteger(key);
      $("edit-weight").setAttribute("aria-invalid", bad ? "true" : "false");
      $("edit-error").textContent = bad ? "The weight must be a number from 0 to 1." : "";
      if (bad) return;
      state.edits = addEdit(state.edits, { layer: focus[0], head: focus[1], query, key, weight });
      changed();
    });
    $("pin-a").addEventListener("click", () => {
      if (!app.single) return;
      state.pin = pinRequest(app.single);
      changed();
      renderComparePanel();
    });
    $("unpin").addEventListener("click", () => {
      state.pin = null;
      changed();
      renderComparePanel();
      $("pin-a").focus();
    });
  }

  return { bindExperiments, renderExperiments, refreshExperiments, onAblate };
}
