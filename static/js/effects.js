// What the page does outside itself: it watches the store and asks the API. An attention run starts when an action
// asks for one (state.run.want changes), debounced; each analysis panel asks when its request (panels.js
// PANEL_SPECS) changes. Only the newest answer of each lands: a new action aborts the run in flight (its download
// too), a new panel request the panel's last one. The abort controllers and timers live here, not in the state.
//
// A run asks for every layer at once (in the arrays form, float16 when large: api.js), so that a layer switch
// draws from what the page holds (store.js holdsLayer). It comes streamed (frames.js): the layer shown first, drawn
// as soon as it is in, then the other layers of the same forward (state.run.rest while they come). When every layer
// of an input is over the server's result limit, it asks for the layer shown, and remembers that for the input
// (state.run.oneLayer).

import { splitsAtWhitespace } from "./capabilities.js";
import { ApiError, describeError, fetchAttention, fetchProgress, isTooLarge, precisionFor, runName } from "./api.js";
import { splitTokens } from "./masks.js";
import { buildRequest, resultValues, sizeKey } from "./requests.js";
import { batchOf, sourceOf } from "./sourcebatch.js";
import { panelSpecs } from "./panels.js";
import { act } from "./actions.js";
import { clampedMasks, modelInfo, sameInput } from "./selectors.js";

export const DEBOUNCE_MS = 80;
export const PROGRESS_MS = 100;
export const FOLLOW_AFTER_MS = 300; // a run shorter than this never asks for its progress
// how long the server may wait for the run to arrive when asked for its progress: the run's request and the ask
// travel on different connections, and the browser or the server can take the later one first
const ARRIVAL_WAIT_MS = 5000;
export const FOLLOW_MS = 250;

// How many positions the request will have, when the page knows without asking: whitespace models split the text
// here (a batch: its longest text), edited numbers have their rows, an unchanged text has its last result. 0 when
// it does not know: the masks go as they are (by position) and the server checks them.
function sequenceLength(s) {
  const ui = s.ui;
  if (ui.matrices) return ui.matrices.x.length;
  const info = modelInfo(s);
  const texts = batchOf(ui, info);
  if (splitsAtWhitespace(info)) {
    return texts ? Math.max(...texts.map((t) => splitTokens(t).length)) : splitTokens(ui.text).length;
  }
  return sameInput(s) ? s.run.result.tokens.length : 0;
}

// Whether the run on screen is the one the controls ask for: none waits for its debounce, none is in flight (a
// failed one has answered too: the controls are rolled back to the run on screen), and none of its layers is still
// on its way (the analyses then reuse its whole forward from the server's run cache).
export function settled(s) {
  return s.run.status !== "loading" && s.run.answered === s.run.want && !s.run.rest;
}

// The layer a streamed run sends first: the one the large head shows, else the one the Layer menu shows, else 0.
export function firstLayerOf(ui) {
  if (ui.focus) return ui.focus[0];
  return typeof ui.layer === "number" ? ui.layer : 0;
}

export function startEffects(store) {
  let want = store.getState().run.want;
  let timer = null;
  let controller = null;
  const panels = {}; // name -> {controller, timer}

  async function run() {
    if (controller) controller.abort();
    const mine = new AbortController();
    controller = mine;
    const s = store.getState();
    let key = null;
    let following = null;
    try {
      const S = sequenceLength(s);
      const info = modelInfo(s);
      const source = sourceOf(s.ui, info);
      const masks = clampedMasks(s.ui, S, source ? splitTokens(source).length : S);
      const layerShown = buildRequest({ ...s.ui, masks }, info, S); // names the layer shown, when one is
      key = sizeKey(layerShown);
      const { layer: _layer, ...everyLayer } = layerShown;
      let req = layerShown.layer != null && s.run.oneLayer !== key ? everyLayer : layerShown;
      store.dispatch(act.runStarted(req.layer ?? "all"));
      // progress for the busy indicator: the server's stage while it computes (asked every FOLLOW_MS once the run
      // has taken FOLLOW_AFTER_MS), then the download, at most one dispatch every PROGRESS_MS
      const run = runName();
      const asked = performance.now();
      let told = 0;
      let answering = false;
      let asking = false; // one ask at a time: an ask may wait on the server for the run to arrive
      following = setInterval(async () => {
        if (asking || answering || controller !== mine || performance.now() - asked < FOLLOW_AFTER_MS) return;
        asking = true;
        try {
          const p = await fetchProgress(run, mine.signal, ARRIVAL_WAIT_MS);
          if (!answering && controller === mine && p.stage !== "done" && p.stage !== "failed") {
            store.dispatch(act.runProgress(p.stage, p.done, p.total, p.ahead ?? null));
          }
        } catch (err) {
          // a server that does not know the run even after waiting for it (an older server, or one the run never
          // reached): stop asking; the indicator counts seconds
          if (err instanceof ApiError) clearInterval(following);
        } finally {
          asking = false;
        }
      }, FOLLOW_MS);
      let headBytes = 0; // a streamed run: the bytes through its first layer, and its layer count
      let layerCount = 0;
      const progress = (received, expected) => {
        // before the layer shown is in: of its frame; after it: of about as much again for each other layer
        const total = headBytes ? Math.max(received, headBytes * layerCount) : expected;
        answering = true;
        const now = performance.now();
        if (controller !== mine || (now - told < PROGRESS_MS && received !== total)) return;
        told = now;
        store.dispatch(act.runProgress("receiving", received, total));
      };
      const send = (body, onHead = null) =>
        fetchAttention(
          { ...body, precision: precisionFor(resultValues(body, info, S)) },
          mine.signal,
          progress,
          run,
          onHead,
        );
      // every layer of a model with several: streamed, the layer shown first and drawn as soon as it is in (the
      // answer's head), the others after it (the rest of the same forward)
      const streams = req.layer == null && (info?.layers ?? 1) > 1;
      let headed = false;
      const onHead = (head, bytes) => {
        if (controller !== mine) return;
        performance.mark("attnlab:head"); // the layer shown is in (bench/page.py reads these two marks)
        headed = true;
        headBytes = bytes;
        layerCount = head.config.n_layers;
        store.dispatch(act.runSucceeded(head, req, { masks }, true));
      };
      let result;
      performance.mark("attnlab:asked");
      try {
        result = streams ? await send({ ...req, first_layer: firstLayerOf(s.ui) }, onHead) : await send(req);
      } catch (err) {
        // every layer is more than the server sends: the layer shown, and this input asks for one from now on
        if (req === layerShown || !isTooLarge(err) || controller !== mine || headed) throw err;
        store.dispatch(act.layersTooMany(key));
        req = layerShown;
        result = await send(req);
      }
      if (controller !== mine) return;
      store.dispatch(headed ? act.runRest(result) : act.runSucceeded(result, req, { masks }));
    } catch (err) {
      if ((err && err.name === "AbortError") || controller !== mine) return;
      if (store.getState().run.rest) {
        // the layer shown is drawn; the others did not come: what the page holds stays, said in the banner
        store.dispatch(act.restFailed(describeError(err)));
        return;
      }
      const e = describeError(err);
      if (
        err instanceof ApiError &&
        err.code === "too_large" &&
        err.field === "include" &&
        store.getState().ui.layer === "all"
      ) {
        store.dispatch(act.runTooLarge(e.message, key));
      } else {
        store.dispatch(act.runFailed(e));
      }
    } finally {
      clearInterval(following);
      if (controller === mine) controller = null;
    }
  }

  function ask(name, spec, req, key) {
    const slot = panels[name] || (panels[name] = { controller: null, timer: null, asked: null });
    slot.asked = key;
    if (slot.controller) slot.controller.abort();
    clearTimeout(slot.timer);
    const mine = new AbortController();
    slot.controller = mine;
    store.dispatch(act.panelStarted(name, key));
    const go = () =>
      spec
        .fetch(req, mine.signal)
        .then((result) => {
          if (slot.controller !== mine) return;
          store.dispatch(act.panelLoaded(name, key, result));
          if (spec.after) spec.after(result);
          const next = spec.then ? spec.then(store.getState(), result) : null;
          if (next) store.dispatch(next);
        })
        .catch((err) => {
          if (slot.controller !== mine || (err && err.name === "AbortError")) return;
          store.dispatch(act.panelFailed(name, key, describeError(err).message));
        })
        .finally(() => {
          if (slot.controller === mine) slot.controller = null;
        });
    if (spec.debounce) slot.timer = setTimeout(go, spec.debounce);
    else go();
  }

  function syncPanels(s) {
    for (const [name, spec] of Object.entries(panelSpecs())) {
      const req = spec.request(s);
      const slot = s.panels[name];
      if (!req) {
        if (slot.status !== "idle" || slot.key) {
          panels[name]?.controller?.abort();
          if (panels[name]) panels[name].asked = null;
          store.dispatch(act.panelCleared(name));
        }
        continue;
      }
      const key = JSON.stringify(spec.nonce ? [req, slot.nonce] : req);
      // `asked` covers the moment between asking and the store recording it (panelStarted waits in the store's
      // queue while another panel's does its round): without it the last panel of a round was asked twice
      if (slot.key !== key && panels[name]?.asked !== key) ask(name, spec, req, key);
    }
  }

  store.subscribe((s) => {
    if (s.run.want !== want) {
      want = s.run.want;
      clearTimeout(timer);
      // the run in flight answers an older state: stop it (and its download) now, not after the debounce
      if (controller) {
        controller.abort();
        controller = null;
      }
      // the page's first run (the link or the defaults) has nothing to wait for: it is asked once the action's
      // draw is done, in the same task (a timer's task came after the page's paint and plotly's script, 30-70 ms
      // later at 512 tokens); later ones gather quick clicks
      if (s.run.answered) timer = setTimeout(run, DEBOUNCE_MS);
      else {
        const first = (timer = {}); // a later change of `want` replaces it, as clearTimeout stops a timer
        queueMicrotask(() => timer === first && run());
      }
    }
    // panels follow the last good run, and only once no run is asked for or in flight: an analysis asked between
    // a change and its run (the debounce) would otherwise go out with the last run's settings
    if (settled(s)) syncPanels(s);
  });
}
