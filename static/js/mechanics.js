// The chapter's mechanics group (data-view="mechanics"): its KV-cache decoding panel (POST /api/decode). Its settings
// live in ui (so the URL carries them); what it asks is the store's (panels.js PANEL_SPECS); this module draws and
// dispatches. bind() keeps the play timer's handle (a clock, not state). The group's other panels are registered ones
// (registry.js), each its own module.

import {
  GENERATE_DEFAULT,
  PLAY_MS,
  clampStep,
  decodeHead,
  renderDecodeStep,
  renderKvCache,
  withGenerated,
} from "./decode.js";
import { act } from "./actions.js";
import { can } from "./capabilities.js";
import { pieceQuote } from "./piece.js";
import { modelInfo, selectView } from "./selectors.js";
import { within } from "./dom.js";

export function deps(s) {
  const p = s.panels;
  return [
    s.run.result,
    s.ui.model,
    s.ui.decodeOn,
    s.ui.decodeStep,
    s.ui.decodeGen,
    s.ui.focus,
    s.playing,
    p.decode,
    s.models,
  ];
}

function decodeResult(s) {
  return s.panels.decode.status === "error" ? null : withGenerated(s.panels.decode.result);
}

export function shownStep(s) {
  const r = decodeResult(s);
  return r ? clampStep(s.ui.decodeStep, r.steps.length) : 0;
}

export function render(root, s, dispatch) {
  const part = within(root);
  renderDecode(part, s, dispatch);
}

function renderDecode(part, s, dispatch) {
  const slot = s.panels.decode;
  const r = decodeResult(s);
  const status = part("decode-status");
  status.classList.toggle("bad", slot.status === "error");
  status.textContent =
    slot.status === "error"
      ? slot.message
      : slot.status === "loading"
        ? "decoding…"
        : s.ui.decodeOn
          ? ""
          : "Press “Decode step by step” to run the sequence through a KV cache, one position at a time.";
  part("decode-off").hidden = !s.ui.decodeOn;
  renderGenerate(part, s);
  const n = r ? r.steps.length : 0;
  const t = shownStep(s);
  const nav = !!r && n > 0;
  for (const id of ["decode-prev", "decode-next", "decode-play", "decode-slider"]) part(id).disabled = !nav;
  if (nav) {
    part("decode-prev").disabled = t <= 0;
    part("decode-next").disabled = t >= n - 1;
    const slider = part("decode-slider");
    slider.max = String(n - 1);
    slider.value = String(t);
    slider.setAttribute(
      "aria-valuetext",
      `step ${t + 1} of ${n}: ${pieceQuote(r.steps[t].token)}${r.steps[t].generated ? " (generated)" : ""}`,
    );
    part("decode-step-label").textContent = `step ${t + 1} of ${n}`;
  } else {
    part("decode-step-label").textContent = "";
  }
  const play = part("decode-play");
  play.textContent = s.playing ? "❚❚ Pause" : "▶ Play";
  play.setAttribute("aria-pressed", s.playing ? "true" : "false");
  part("decode-controls").hidden = !s.ui.decodeOn;
  const view = selectView(s);
  const focus = s.ui.focus || (view ? view.focus : null);
  const head = r ? decodeHead(r, focus) : [0, 0];
  renderDecodeStep(part("decode-step"), {
    result: r,
    step: t,
    head,
    onPick: (layer, h) => dispatch(act.headOpened(layer, h, null, "decode-step")),
    onStep: (position) => dispatch(act.decodeStepSet(position)),
    sampling: s.ui.decodeGen?.sampling,
  });
  renderKvCache(part("kv-cache"), { result: r, step: t });
}

// The generate controls: offered for a model that predicts tokens, showing the setting in force (not over a field
// being typed in); the seed is read for sampling only.
function renderGenerate(part, s) {
  const form = part("decode-generate");
  form.hidden = !can(modelInfo(s), "predicts_tokens");
  const gen = s.ui.decodeGen || GENERATE_DEFAULT;
  for (const [id, value] of [
    ["gen-tokens", gen.tokens],
    ["gen-sampling", gen.sampling],
    ["gen-seed", gen.seed],
  ]) {
    if (document.activeElement !== part(id)) part(id).value = String(value);
  }
  part("gen-seed").disabled = part("gen-sampling").value !== "sample";
  part("gen-off").hidden = !s.ui.decodeGen;
}

function readGenerate(part) {
  const tokens = Math.max(1, Math.trunc(Number(part("gen-tokens").value)) || GENERATE_DEFAULT.tokens);
  const sampling = part("gen-sampling").value === "sample" ? "sample" : "greedy";
  const seed = Math.max(0, Math.trunc(Number(part("gen-seed").value)) || 0);
  return { tokens, sampling, seed };
}

export function bind(root, store) {
  const part = within(root);
  const { dispatch, getState } = store;
  part("decode-generate").addEventListener("submit", (e) => {
    e.preventDefault();
    dispatch(act.decodeGenSet(readGenerate(part)));
  });
  part("gen-sampling").addEventListener("change", () => {
    part("gen-seed").disabled = part("gen-sampling").value !== "sample";
  });
  part("gen-off").addEventListener("click", () => {
    dispatch(act.decodeGenSet(null));
    part("gen-run").focus();
  });
  let playing = null; // the timer's handle while the steps play
  const stopPlay = () => {
    if (playing) clearInterval(playing);
    playing = null;
    if (getState().playing) dispatch(act.playSet(false));
  };
  const setStep = (t) => {
    const r = decodeResult(getState());
    if (r) dispatch(act.decodeStepSet(clampStep(t, r.steps.length)));
  };
  part("decode-run").addEventListener("click", () => dispatch(act.decodeSet(true)));
  part("decode-off").addEventListener("click", () => {
    stopPlay();
    dispatch(act.decodeSet(false));
    part("decode-run").focus();
  });
  part("decode-prev").addEventListener("click", () => setStep(shownStep(getState()) - 1));
  part("decode-next").addEventListener("click", () => setStep(shownStep(getState()) + 1));
  part("decode-play").addEventListener("click", () => {
    const r = decodeResult(getState());
    if (!r) return;
    if (playing) {
      stopPlay();
      return;
    }
    if (shownStep(getState()) >= r.steps.length - 1) setStep(0); // play from the start once at the end
    playing = setInterval(() => {
      const s = getState();
      const res = decodeResult(s);
      if (!res || shownStep(s) >= res.steps.length - 1) {
        stopPlay();
        return;
      }
      setStep(shownStep(s) + 1);
    }, PLAY_MS);
    dispatch(act.playSet(true));
  });
  part("decode-slider").addEventListener("input", (e) => {
    stopPlay();
    setStep(Number(e.target.value));
  });
}
