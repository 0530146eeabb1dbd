// What a run of /api/attention does to the state as it goes: started, its progress, its answer (settled into ui,
// one batch item cut out, the diff from the last answer, an example's pair placed), a failure (ui rolled back to
// the last run that worked) or an answer too large for every layer at once. The reducers of store.js's `run`.

import { itemResult } from "./batch.js";
import { resolvePair } from "./examples.js";
import { keepValid } from "./interventions.js";
import { diffResults } from "./masks.js";
import { slots } from "./registry.js";
import { pageIn } from "./selectors.js";

export const answerReducers = {
  // a new run: the layers of the last one still on their way are not waited for any more
  runStarted: (s, a) => ({
    ...s,
    run: { ...s.run, status: "loading", started: s.run.want, asking: a.asking, progress: null, rest: null },
  }),
  // how far the run is, while it loads: the server's stage (queued, layers: done of total, writing), then
  // receiving: done of total bytes (total 0: not announced)
  runProgress: (s, a) =>
    s.run.status === "loading" || s.run.rest
      ? { ...s, run: { ...s.run, progress: { stage: a.stage, done: a.done, total: a.total, ahead: a.ahead ?? null } } }
      : s,
  layersTooMany: (s, a) => ({ ...s, run: { ...s.run, oneLayer: a.key } }),
  runSucceeded: (s, a) => {
    const r = s.run;
    // the layer shown of a streamed answer: the grid's page waits for every layer (runRest)
    const ui = settle({ ...s.ui, ...a.sent }, a.result, !a.partial);
    const result = itemResult(a.result, ui.item);
    const layerIndex = ui.layer === "all" ? (ui.focus ? ui.focus[0] : 0) : ui.layer;
    const diff = r.skipDiff ? null : diffResults(r.result, a.result, layerIndex);
    let next = {
      ...s,
      ui,
      good: ui,
      run: {
        ...r,
        status: "ready",
        answered: r.started,
        asking: null,
        progress: null,
        result,
        base: result, // what the views of one layer drew from: the layers that come after it leave it as it is
        rest: a.partial ? "loading" : null,
        full: a.result,
        request: a.request,
        prev: r.result,
        diff,
        skipDiff: false,
        notice: ui.layer === "all" ? "" : r.notice,
        error: null,
        lastAction: r.action,
      },
    };
    next = placePendingPair(next, a.result);
    return askedDuringRun(next);
  },
  // every layer is in (a streamed answer's tail): the answer whole, with the layer objects the views drew kept, so
  // that only what shows the other layers draws again
  runRest: (s, a) => {
    if (!s.run.rest) return s;
    const fresh = itemResult(a.result, s.ui.item);
    const drawn = new Map(s.run.result.layers.map((l) => [l.index, l]));
    const result = { ...fresh, layers: fresh.layers.map((l) => drawn.get(l.index) ?? l) };
    const run = { ...s.run, rest: null, progress: null, result, full: a.result };
    const page = pageIn(result, s.ui);
    if (page === s.ui.page) return { ...s, run };
    return { ...s, ui: { ...s.ui, page }, good: s.good && { ...s.good, page }, run };
  },
  // the layer shown came and the others did not (the connection dropped): the page keeps what it holds, and says so
  restFailed: (s, a) => ({
    ...s,
    run: {
      ...s.run,
      rest: null,
      progress: null,
      notice: `The other layers did not arrive (${a.error.message}); the page holds layer${s.run.result.layers.length === 1 ? "" : "s"} ${s.run.result.layers.map((l) => l.index).join(", ")}. Change anything to run again.`,
    },
  }),
  runFailed: (s, a) => {
    const error = { ...a.error, where: s.run.where, action: s.run.action };
    // roll the controls and the URL back to the last run that worked; the boxes keep what was typed
    const ui = s.good ? { ...s.good } : s.ui;
    return askedDuringRun({
      ...s,
      ui,
      run: {
        ...s.run,
        status: "error",
        answered: s.run.started,
        asking: null,
        progress: null,
        error,
        diff: null,
        skipDiff: false,
      },
    });
  },
  runTooLarge: (s, a) => {
    // every layer at once is more than the server sends: show one layer and say why
    const layer = s.ui.focus ? s.ui.focus[0] : 0;
    const notice =
      "Every layer at once is more than the server sends in one response (its ATTNLAB_MAX_RESULT_VALUES limit, " +
      `which whoever runs the server can raise). The page shows layer ${layer}; pick another in the Layer menu. ` +
      `The head-types table below still covers every layer. (The server said: ${a.message})`;
    // and ask again (want + 1), for that layer alone, credited to the same action
    return {
      ...s,
      ui: { ...s.ui, layer, page: 0 },
      run: { ...s.run, want: s.run.want + 1, skipDiff: true, notice, oneLayer: a.key ?? s.run.oneLayer },
    };
  },
};

// The analyses asked while a run was wanted or in flight (store.js panelAsked marks them `waiting`) recorded what
// they ask from the last run; once the run they waited for (or a later one) has answered, they ask it of the run
// now on screen: what their `asked` reads of it (registry.js). A failed run rolls back to the last good one, and
// they ask that.
export function askedDuringRun(s) {
  const answered = s.run.answered;
  if (answered !== s.run.want) return s; // another run is already wanted: wait for that one
  const waits = (name) => s.panels[name]?.waiting != null && s.panels[name].waiting <= answered;
  const declared = slots().filter(([name, d]) => d.asked && waits(name));
  if (!declared.length) return s;
  const panels = { ...s.panels };
  for (const [name, d] of declared) panels[name] = { ...panels[name], waiting: null, ...d.asked(s, s.ui[d.panel]) };
  return { ...s, panels };
}

// Keep ui inside what a new result allows (a query past the end, a head that no longer exists, a pair that
// falls off, interventions on heads that are gone, and, with `whole` (every layer shown is in), a heads page past
// the last: fewer heads than before, a smaller model's or a link's page).
export function settle(ui, result, whole = true) {
  const S = result.tokens.length;
  const K = result.source_tokens ? result.source_tokens.length : S;
  const out = { ...ui };
  // a query past the end goes back to the default (the last real position), not to the last one, which may be padding
  if (out.query != null && out.query >= S) out.query = null;
  if (out.pair && (out.pair[0] >= S || out.pair[1] >= K)) out.pair = null;
  const { n_layers: L, n_heads: H } = result.config;
  if (out.layer !== "all" && out.layer >= L) out.layer = 0;
  if (out.focus) {
    const [l, h] = out.focus;
    const layer = result.layers.find((x) => x.index === l);
    if (!layer || h >= layer.heads.length) out.focus = null;
  }
  out.item = Math.min(out.item, (result.config.batch || 1) - 1);
  if (whole) out.page = pageIn(result, out);
  out.ablate = keepValid(out.ablate, L, H);
  out.edits = keepValid(out.edits, L, H).filter((e) => e.query < S && e.key < S);
  return out;
}

// An example that names a pair by its words ("it" -> "animal") gets it placed on the model's own tokens.
function placePendingPair(s, result) {
  const want = s.pending.pair;
  if (!want) return s;
  const out = { ...s, pending: { ...s.pending, pair: null } };
  if (want.model !== result.model) return out;
  const pair = resolvePair(result.tokens, want);
  if (!pair) return out;
  return { ...out, ui: { ...out.ui, pair, query: pair[0] }, good: { ...out.good, pair, query: pair[0] } };
}
