// The chapter's mechanics panels: KV-cache decoding (POST /api/decode), cost and memory (POST /api/cost), the audit
// record (/api/attention with include ["audit"]) and the scaling sweep (POST /api/scale-sweep). Each asks the API on
// its own, latest request wins, and redraws its own panel when it answers. main.js hands in the context
// ({state, app, actions}); this module never imports main.js. The panels' settings live in state, so the URL
// carries them.

import { fetchAttention, fetchCost, fetchDecode, fetchScaleSweep } from "./api.js";
import { fetchLatest } from "./analysis-panels.js";
import { auditFilename, renderAudit } from "./audit.js";
import { renderCost, renderMeasured } from "./cost.js";
import { PLAY_MS, clampStep, decodeHead, renderDecodeStep, renderKvCache } from "./decode.js";
import { download } from "./exporter.js";
import { COST_FIELDS, DTYPES, clampVariance } from "./state.js";
import { auditRequest, costRequest, decodeRequest, sweepRequest } from "./requests.js";
import { renderSweep } from "./sweep.js";
import { renderNextWords } from "./tokens.js";

const $ = (id) => document.getElementById(id);
export const SWEEP_DEBOUNCE_MS = 250;

function idle(slot) {
  if (slot.controller) slot.controller.abort();
  Object.assign(slot, { key: null, asked: null, result: null, status: "idle", message: "", controller: null });
}

function newSlot() {
  return { key: null, asked: null, result: null, status: "idle", message: "", controller: null };
}

// Ask unless this exact request was the last one asked (an answer or an error stands until something changes).
function askOnce(slot, fetcher, req, render) {
  const key = JSON.stringify(req);
  if (slot.asked === key) return;
  slot.asked = key;
  fetchLatest(slot, fetcher, req, render);
}

// ctx.actions needs: info, render, updateUrl, openHead.
export function createMechanics({ state, app, actions }) {
  const updateUrl = (...a) => actions.updateUrl(...a);
  Object.assign(app, {
    decode: newSlot(), cost: newSlot(), measure: newSlot(), audit: newSlot(), sweep: newSlot(), nextWords: newSlot(),
  });
  let playTimer = null;
  let sweepTimer = null;

  // ---- decoding ------------------------------------------------------------------------------------------------

  function refreshDecode() {
    const slot = app.decode;
    if (!state.decodeOn || !app.single) {
      stopPlay();
      if (slot.status !== "idle") {
        idle(slot);
        renderDecodePanel();
      }
      return;
    }
    askOnce(slot, fetchDecode, decodeRequest(app.single), renderDecodePanel);
  }

  function decodeResult() {
    const slot = app.decode;
    return slot.status === "error" ? null : slot.result;
  }

  function shownStep() {
    const r = decodeResult();
    return r ? clampStep(state.decodeStep, r.steps.length) : 0;
  }

  function renderDecodePanel() {
    const slot = app.decode;
    const r = decodeResult();
    const status = $("decode-status");
    status.classList.toggle("bad", slot.status === "error");
    status.textContent =
      slot.status === "error"
        ? slot.message
        : slot.status === "loading"
          ? "decoding…"
          : state.decodeOn
            ? ""
            : "Press “Decode step by step” to run the sequence through a KV cache, one position at a time.";
    $("decode-off").hidden = !state.decodeOn;
    const n = r ? r.steps.length : 0;
    const t = shownStep();
    const nav = !!r && n > 0;
    for (const id of ["decode-prev", "decode-next", "decode-play", "decode-slider"]) $(id).disabled = !nav;
    if (nav) {
      $("decode-prev").disabled = t <= 0;
      $("decode-next").disabled = t >= n - 1;
      const slider = $("decode-slider");
      slider.max = String(n - 1);
      slider.value = String(t);
      slider.setAttribute("aria-valuetext", `step ${t + 1} of ${n}: “${r.steps[t].token}”`);
      $("decode-step-label").textContent = `step ${t + 1} of ${n}`;
    } else {
      $("decode-step-label").textContent = "";
    }
    const play = $("decode-play");
    play.textContent = playTimer ? "❚❚ Pause" : "▶ Play";
    play.setAttribute("aria-pressed", playTimer ? "true" : "false");
    $("decode-controls").hidden = !state.decodeOn;
    const focus = state.focus || (app.view ? app.view.focus : null);
    const head = r ? decodeHead(r, focus) : [0, 0];
    renderDecodeStep($("decode-step"), { result: r, step: t, head, onPick: pickHead });
    renderKvCache($("kv-cache"), { result: r, step: t });
  }

  function pickHead(layer, head) {
    actions.openHead(layer, head);
    renderDecodePanel();
    const b = $("decode-step").querySelector(`.dec-mini[data-layer="${layer}"][data-head="${head}"]`);
    b?.focus();
  }

  function setStep(t) {
    const r = decodeResult();
    if (!r) return;
    state.decodeStep = clampStep(t, r.steps.length);
    updateUrl();
    renderDecodePanel();
  }

  function stopPlay() {
    if (playTimer) clearInterval(playTimer);
    playTimer = null;
  }

  function togglePlay() {
    const r = decodeResult();
    if (!r) return;
    if (playTimer) {
      stopPlay();
      renderDecodePanel();
      return;
    }
    if (shownStep() >= r.steps.length - 1) state.decodeStep = 0; // play from the start once at the end
    playTimer = setInterval(() => {
      const res = decodeResult();
      if (!res || shownStep() >= res.steps.length - 1) {
        stopPlay();
        renderDecodePanel();
        return;
      }
      setStep(shownStep() + 1);
    }, PLAY_MS);
    renderDecodePanel();
  }

  // ---- cost ----------------------------------------------------------------------------------------------------

  function baseCost() {
    return app.result ? costRequest(app.result.config, app.result.tokens.length, {}, false) : null;
  }

  function currentCost(measure = false) {
    return app.result ? costRequest(app.result.config, app.result.tokens.length, state.cost, measure) : null;
  }

  function refreshCost() {
    const req = currentCost(false);
    if (!req) return;
    askOnce(app.cost, fetchCost, req, renderCostPanel);
    const m = app.measure;
    // a measurement belongs to the shape it measured: another shape clears it
    if (m.status !== "idle" && m.shape !== JSON.stringify(req)) {
      idle(m);
      m.shape = null;
    }
  }

  function writeCostForm() {
    const req = currentCost(false);
    if (!req) return;
    for (const k of COST_FIELDS) {
      const input = $(`cost-${k}`);
      if (document.activeElement !== input) input.value = String(req[k] ?? "");
      input.classList.toggle("changed", k in state.cost);
    }
    const dt = $("cost-dtype");
    dt.value = req.dtype;
    dt.classList.toggle("changed", "dtype" in state.cost);
    $("cost-reset").disabled = !Object.keys(state.cost).length;
  }

  function renderCostPanel() {
    writeCostForm();
    const slot = app.cost;
    renderCost(
      { status: $("cost-status"), table: $("cost-table"), plot: $("cost-plot"), note: $("cost-note") },
      { result: slot.status === "error" ? null : slot.result, status: slot.status, message: slot.message },
    );
    const m = app.measure;
    renderMeasured($("cost-measured"), { result: m.result, status: m.status, message: m.message });
  }

  function costFromForm() {
    const base = baseCost();
    if (!base) return;
    const next = {};
    for (const k of COST_FIELDS) {
      const v = Number.parseInt($(`cost-${k}`).value, 10);
      if (Number.isInteger(v) && v >= 1 && v !== base[k]) next[k] = v;
    }
    const dtype = $("cost-dtype").value;
    if (DTYPES.includes(dtype) && dtype !== base.dtype) next.dtype = dtype;
    state.cost = next;
  }

  function measure() {
    const req = currentCost(true);
    if (!req) return;
    const m = app.measure;
    m.shape = JSON.stringify({ ...req, measure: false });
    m.asked = null;
    askOnce(m, fetchCost, req, renderCostPanel);
  }

  // ---- audit ---------------------------------------------------------------------------------------------------

  function refreshAudit() {
    // an audit describes the run it was taken of: another run clears it
    const a = app.audit;
    if (a.status !== "idle" && app.request && a.asked !== JSON.stringify(auditRequest(app.request))) {
      idle(a);
      renderAuditPanel();
    }
  }

  async function fetchAudit(req, signal) {
    const result = await fetchAttention(req, signal);
    download(auditFilename(result.model), new Blob([JSON.stringify(result.audit, null, 1)], { type: "application/json" }));
    return result;
  }

  function exportAudit() {
    if (!app.request) return;
    const a = app.audit;
    a.asked = null; // the button always asks again (and downloads again)
    askOnce(a, fetchAudit, auditRequest(app.request), renderAuditPanel);
  }

  function renderAuditPanel() {
    const a = app.audit;
    renderAudit($("audit-summary"), {
      audit: a.status === "error" ? null : a.result?.audit,
      status: a.status,
      message: a.message,
      model: a.result?.model,
    });
  }

  // ---- the scaling sweep ---------------------------------------------------------------------------------------

  function refreshSweep() {
    if (!state.sweep) return;
    askOnce(app.sweep, fetchScaleSweep, sweepRequest(state.sweep), renderSweepPanel);
  }

  function renderSweepPanel() {
    const slot = app.sweep;
    const v = state.sweep ? state.sweep.variance : 1;
    if (document.activeElement !== $("sweep-variance")) $("sweep-variance").value = String(v);
    if (document.activeElement !== $("sweep-variance-range")) $("sweep-variance-range").value = String(v);
    $("sweep-draw").hidden = !!state.sweep;
    renderSweep(
      { status: $("sweep-status"), plot: $("sweep-plot"), summary: $("sweep-summary") },
      { result: slot.status === "error" ? null : slot.result, status: slot.status, message: slot.message },
    );
  }

  function setVariance(raw, now = false) {
    const v = clampVariance(Number.parseFloat(raw));
    state.sweep = { variance: v };
    updateUrl();
    clearTimeout(sweepTimer);
    const go = () => {
      refreshSweep();
      renderSweepPanel();
    };
    if (now) go();
    else sweepTimer = setTimeout(go, SWEEP_DEBOUNCE_MS);
  }

  // ---- next-word predictions under the tokens --------------------------------------------------------------------

  // A model that predicts tokens (one with a vocabulary: induction) says what comes next in `config.next_word`, but
  // only when the run went through its last layer; a run that stopped early (one layer shown) asks for them once
  // more, without the matrices.
  function refreshNextWords() {
    const r = app.result;
    const slot = app.nextWords;
    const m = actions.info();
    const c = r ? r.config : null;
    if (!r || c.next_word?.length || !m?.vocab || c.layers_computed >= c.n_layers) {
      if (slot.status !== "idle") idle(slot);
      return;
    }
    const { layer: _layer, ...rest } = app.request;
    askOnce(slot, fetchAttention, { ...rest, include: [] }, renderNextWordsPanel);
  }

  function renderNextWordsPanel() {
    const r = app.result;
    if (!r) return;
    const slot = app.nextWords;
    const late = slot.status === "ready" && JSON.stringify(slot.result?.tokens) === JSON.stringify(r.tokens);
    const words = r.config.next_word?.length ? r.config.next_word : late ? slot.result.config.next_word : [];
    renderNextWords($("next-words"), r.tokens, words);
  }

  // ---- all panels ----------------------------------------------------------------------------------------------

  function renderMechanics() {
    refreshNextWords();
    renderNextWordsPanel();
    refreshDecode();
    refreshCost();
    refreshAudit();
    refreshSweep();
    renderDecodePanel();
    renderCostPanel();
    renderAuditPanel();
    renderSweepPanel();
  }

  function bindMechanics() {
    $("decode-run").addEventListener("click", () => {
      state.decodeOn = true;
      state.decodeStep = 0;
      app.decode.asked = null; // the button always asks again
      updateUrl();
      refreshDecode();
      renderDecodePanel();
    });
    $("decode-off").addEventListener("click", () => {
      state.decodeOn = false;
      state.decodeStep = null;
      updateUrl();
      refreshDecode();
      renderDecodePanel();
      $("decode-run").focus();
    });
    $("decode-prev").addEventListener("click", () => setStep(shownStep() - 1));
    $("decode-next").addEventListener("click", () => setStep(shownStep() + 1));
    $("decode-play").addEventListener("click", togglePlay);
    $("decode-slider").addEventListener("input", (e) => {
      stopPlay();
      setStep(Number(e.target.value));
    });
    $("cost-form").addEventListener("submit", (e) => e.preventDefault());
    for (const id of [...COST_FIELDS.map((k) => `cost-${k}`), "cost-dtype"]) {
      $(id).addEventListener("change", () => {
        costFromForm();
        updateUrl();
        refreshCost();
        renderCostPanel();
      });
    }
    $("cost-reset").addEventListener("click", () => {
      state.cost = {};
      updateUrl();
      refreshCost();
      renderCostPanel();
    });
    $("cost-measure").addEventListener("click", measure);
    $("audit-export").addEventListener("click", exportAudit);
    $("sweep-draw").addEventListener("click", () => {
      setVariance(state.sweep ? state.sweep.variance : 1, true);
      $("sweep-variance").focus();
    });
    $("sweep-variance").addEventListener("change", (e) => setVariance(e.target.value, true));
    $("sweep-variance-range").addEventListener("input", (e) => {
      $("sweep-variance").value = e.target.value;
      setVariance(e.target.value);
    });
  }

  return { bindMechanics, renderMechanics, renderDecodePanel };
}
