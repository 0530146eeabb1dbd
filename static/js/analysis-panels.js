// The head-types table and the top-heads list: each asks the API on its own (POST /api/heads, /api/heads/top) and
// redraws on its own when it answers, so the rest of the page never waits on them. main.js owns the state; it hands
// it in as a context object ({state, app, actions}) so that this module never imports main.js.

import { describeError, fetchHeadTypes, fetchTopHeads } from "./api.js";
import { COLUMNS, measuredOn, renderBest, renderHeadTypes } from "./headtypes.js";
import { headTypesRequest, topHeadsRequest } from "./requests.js";
import { TOP_K, renderTopHeads } from "./tophead.js";

const $ = (id) => document.getElementById(id);

// What the head-types filter row asks for, read from state.
export function headTypesFilter(state) {
  return { text: state.hfind, score: state.hscore, min: state.hmin };
}

// One panel's request at a time: a newer request aborts the older one, and only the newest answer lands in
// `slot` ({result, status, message, key, controller}); `render` redraws the panel at each step.
export function fetchLatest(slot, fetcher, req, render, onResult = () => {}) {
  if (slot.controller) slot.controller.abort();
  const controller = new AbortController();
  slot.controller = controller;
  slot.status = "loading";
  render();
  fetcher(req, controller.signal)
    .then((result) => {
      if (slot.controller !== controller) return;
      Object.assign(slot, { result, status: "ready", message: "" });
      onResult(result);
    })
    .catch((err) => {
      if (slot.controller !== controller || (err && err.name === "AbortError")) return;
      Object.assign(slot, { result: null, status: "error", message: describeError(err).message, key: null });
    })
    .finally(() => {
      if (slot.controller !== controller) return;
      slot.controller = null;
      render();
    });
}

// ctx.actions needs: run, render, updateUrl.
export function createAnalysisPanels({ state, app, actions }) {
  const run = (...a) => actions.run(...a);
  const render = (...a) => actions.render(...a);
  const updateUrl = (...a) => actions.updateUrl(...a);

  function refreshHeadTypes() {
    const ht = app.headTypes;
    const req = headTypesRequest(app.single);
    const key = JSON.stringify(req);
    if (ht.key === key) return;
    ht.key = key;
    const seqLen = app.result.tokens.length;
    if (ht.result && ht.result.model !== req.model) ht.result = null;
    fetchLatest(ht, fetchHeadTypes, req, renderHeadTypesPanel, () => {
      ht.seqLen = seqLen;
    });
  }

  function refreshTopHeads() {
    const t = app.top;
    const pair = state.pair;
    const ready = app.single && app.result && pair && pair.every((v) => v != null);
    const total = ready ? app.result.config.n_layers * app.result.config.n_heads : 0;
    const req = ready ? topHeadsRequest(app.single, pair, Math.min(TOP_K, total)) : null;
    const key = req ? JSON.stringify(req) : null;
    if (t.key === key) return;
    t.key = key;
    if (t.controller) t.controller.abort();
    t.controller = null;
    if (!req) {
      Object.assign(t, { result: null, status: "idle", message: "" });
      renderTopPanel();
      return;
    }
    fetchLatest(t, fetchTopHeads, req, renderTopPanel, (result) => {
      if (app.pendingOpen && result.heads.length) {
        // an example that names a pair opens the head that links them most
        app.pendingOpen = false;
        const best = result.heads[0];
        queueMicrotask(() => openHead(best.layer, best.head, result.query));
      }
    });
  }

  function renderHeadTypesPanel() {
    const ht = app.headTypes;
    const panel = $("headtypes-panel");
    panel.dataset.state = ht.status;
    const result = ht.result;
    const rows = result ? result.heads : [];
    const multiLayer = result ? result.n_layers > 1 : false;
    const focus = state.focus || (app.view ? app.view.focus : null);
    const status = {
      idle: "",
      loading: "scoring every head…",
      ready: result ? `${rows.length} head${rows.length === 1 ? "" : "s"} · ${result.n_layers} layer${result.n_layers === 1 ? "" : "s"}` : "",
      error: "could not score the heads",
    }[ht.status];
    $("headtypes-status").textContent = status;
    const shown = renderHeadTypes(
      $("headtypes"),
      { rows, sort: state.hsort, dir: state.hdir, filter: headTypesFilter(state), focus, multiLayer },
      { sort: onHeadSort, open: (l, h) => openHead(l, h) },
    );
    $("ht-count").textContent = rows.length ? `${shown} of ${rows.length} shown` : "";
    renderBest($("headtypes-best"), rows, multiLayer, (l, h) => openHead(l, h));
    // no rows yet (or none to be had): say why instead of drawing an empty table
    for (const sel of [".ht-best", ".ht-filter", ".ht-scroll", ".ht-legend"]) panel.querySelector(sel).hidden = !rows.length;
    const empty = $("headtypes-empty");
    const failed = ht.status === "error";
    empty.hidden = rows.length > 0;
    empty.classList.toggle("bad", failed);
    empty.textContent = ht.status === "error" ? ht.message : "Scoring every head…";
    $("headtypes-measured").textContent = result ? measuredOn(result, ht.seqLen) : "";
    const probe = $("headtypes-probe");
    probe.hidden = !(result && result.probe_tokens);
    if (result && result.probe_tokens) {
      const key = result.probe_tokens.join(" ");
      const box = $("headtypes-probe-tokens");
      if (box.dataset.key !== key) {
        box.dataset.key = key;
        box.replaceChildren(
          ...result.probe_tokens.map((t, i) => {
            const chip = document.createElement("span");
            chip.className = `probe-token${i >= result.probe_tokens.length / 2 ? " second" : ""}`;
            chip.textContent = t;
            return chip;
          }),
        );
      }
    }
    const legend = $("headtypes-legend");
    if (!legend.childElementCount) {
      for (const c of COLUMNS) {
        const dt = document.createElement("dt");
        dt.textContent = c.label;
        const dd = document.createElement("dd");
        dd.textContent = c.help;
        legend.append(dt, dd);
      }
    }
  }

  function onHeadSort(column) {
    const current = state.hsort || "head";
    const dir = state.hsort ? state.hdir : "asc";
    if (column === current) {
      state.hsort = column;
      state.hdir = dir === "asc" ? "desc" : "asc";
    } else {
      state.hsort = column;
      state.hdir = column === "head" ? "asc" : "desc";
    }
    if (state.hsort === "head" && state.hdir === "asc") state.hsort = null;
    updateUrl();
    renderHeadTypesPanel();
  }

  function renderTopPanel() {
    if (!app.result) return;
    const t = app.top;
    renderTopHeads(
      $("top-heads-panel"),
      {
        tokens: app.result.tokens,
        pair: state.pair,
        top: t.result,
        status: t.status,
        message: t.message,
        multiLayer: app.result.config.n_layers > 1,
        total: app.result.config.n_layers * app.result.config.n_heads,
        focus: state.focus || (app.view ? app.view.focus : null),
      },
      { pair: onPair, open: openHead },
    );
  }

  // Choose the query -> key pair whose top heads are listed; the retrieval diagram follows the query.
  function onPair(q, k) {
    state.pair = q == null && k == null ? null : [q, k];
    if (q != null) state.query = q;
    render();
    refreshTopHeads();
  }

  // Open a head from the head-types table or the top-heads list: its layer in the Layer menu, the head large.
  function openHead(layer, head, query) {
    state.focus = [layer, head];
    if (query != null) state.query = query;
    const multi = app.result && app.result.config.n_layers > 1;
    const scroll = () => $("focus-plot").scrollIntoView({ block: "nearest", behavior: "smooth" });
    if (multi && state.layer !== layer) {
      state.layer = layer;
      state.page = 0;
      app.skipDiff = true;
      app.lastAction = "";
      run().then(scroll);
      return;
    }
    render();
    scroll();
  }

  return { refreshHeadTypes, refreshTopHeads, renderHeadTypesPanel, renderTopPanel, onHeadSort, onPair, openHead };
}
