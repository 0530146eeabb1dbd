// The store's reducer (static/js/store.js, answers.js) on what a person does to the model and the heads grid's
// page, called directly on plain states (tests/test_js.py runs this file with node's test runner). The page behind
// them is walked in Chromium by tests/browser/test_page.py and tests/browser/test_inview_explore.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod } from "./lib.mjs";

// A /api/models entry that takes a heads option, with `layers` layers.
const entry = (name, layers, heads) => ({
  name,
  layers,
  heads,
  options: { heads, seed: 0 },
  default_text: `${name} text`,
  reads: ["text", "tokens", "options"],
  default_masks: null,
  description: "",
});

// An answer of `layers` layers of `heads` heads each (of the layers `shown`, the ones a streamed answer's head holds)
// on one token.
function answer(model, layers, heads, shown = [...Array(layers).keys()]) {
  return {
    model,
    tokens: ["a"],
    eligible: [[true]],
    reasons: null,
    config: { n_layers: layers, n_heads: heads, n_kv_heads: heads, batch: null },
    masks: { causal: false, padding: null, window: null, blocked: [] },
    layers: shown.map((index) => ({
      index,
      heads: Array.from({ length: heads }, (_, h) => ({ index: h, kv_group: h, weights: [[1]], scores: [[0]] })),
    })),
  };
}

// The reducer with every state it is given and returns frozen all the way down: one that changed its input throws.
async function pureReducer() {
  const S = await mod("store.js");
  const freeze = (o) => {
    if (o && typeof o === "object" && !Object.isFrozen(o)) {
      Object.freeze(o);
      Object.values(o).forEach(freeze);
    }
    return o;
  };
  return { S, reduce: (s, a) => freeze(S.reducer(freeze(s), a)) };
}

test("the model in use chosen again changes nothing and runs nothing; another model starts afresh", async () => {
  const { S, reduce } = await pureReducer();
  const St = await mod("state.js");
  const random = entry("random", 1, 4);
  const other = entry("other", 1, 2);
  let s = reduce(S.initialState(), S.act.modelsLoaded([random, other]));
  s = reduce(s, S.act.restored(St.stateForModel(random)));
  s = reduce(s, S.act.runSucceeded(answer("random", 1, 4), { model: "random" }, { masks: s.ui.masks }));
  // the person's own settings: heads, a causal mask, words run, and words typed but not run yet
  s = reduce(s, S.act.optionSet("heads", 8));
  s = reduce(s, S.act.causalSet(true));
  s = reduce(s, S.act.draftTyped("text", "my own words"));
  s = reduce(s, S.act.sequenceSubmitted("run-button"));
  s = reduce(s, S.act.draftTyped("text", "words not run yet"));
  const set = s;
  for (const again of [
    S.act.modelChosen("random", "model-select"),
    S.act.modelChosen("random", "train-open-a", { text: "my own words" }), // what it already has
    S.act.modelChosen("random", "model-select", { options: { heads: 8 } }),
  ]) {
    assert.ok(reduce(set, again) === set, `${JSON.stringify(again)} changed the state`);
  }
  eq(
    [set.ui.model, set.ui.options.heads, set.ui.masks.causal, set.ui.text, set.draft.text],
    ["random", 8, true, "my own words", "words not run yet"],
  );
  // the same model asked for other words (a snapshot opened on its probe): a fresh start on those words
  const reopened = reduce(set, S.act.modelChosen("random", "train-open-a", { text: "the probe" }));
  eq([reopened.ui.text, reopened.ui.options.heads, reopened.run.want], ["the probe", 4, set.run.want + 1]);
  // another model: its own defaults and a run
  const changed = reduce(set, S.act.modelChosen("other", "model-select"));
  eq(
    [changed.ui.model, changed.ui.text, changed.ui.options.heads, changed.draft.text, changed.run.want],
    ["other", "other text", 2, "other text", set.run.want + 1],
  );
});

test("a heads page past the last comes back to the last once an answer shows fewer heads", async () => {
  const { S, reduce } = await pureReducer();
  const St = await mod("state.js");
  const deep = entry("deep", 6, 12);
  const sent = (s) => ({ masks: s.ui.masks });
  // the ui a link gives, with the model's own where it names none (main.js restoredUi)
  const linked = (query) => {
    const base = St.stateForModel(deep);
    const ui = St.decodeState(query, () => deep.options);
    return { ...ui, options: { ...base.options, ...ui.options }, masks: ui.masks ?? base.masks };
  };
  let s = reduce(S.initialState(), S.act.modelsLoaded([deep]));
  // a link to every layer's third page (72 heads: pages 0, 1 and 2) answered whole
  s = reduce(s, S.act.restored(linked("?m=deep&t=a&layer=all&page=2")));
  s = reduce(s, S.act.runSucceeded(answer("deep", 6, 12), { model: "deep" }, sent(s)));
  eq([s.ui.page, s.good.page], [2, 2]);
  // 2 heads a layer (12 heads, one page): page 0, and the link says no page
  s = reduce(s, S.act.optionSet("heads", 2));
  s = reduce(s, S.act.runSucceeded(answer("deep", 6, 2), { model: "deep" }, sent(s)));
  eq([s.ui.page, s.good.page, St.encodeState(s.ui).includes("page=")], [0, 0, false]);

  // a link's page past the last (9 of 3 pages) comes back to the last, which the link then names
  s = reduce(s, S.act.restored(linked("?m=deep&t=a&layer=all&page=9&heads=12")));
  s = reduce(s, S.act.runSucceeded(answer("deep", 6, 12), { model: "deep" }, sent(s)));
  eq([s.ui.page, new URLSearchParams(St.encodeState(s.ui)).get("page")], [2, "2"]);

  // streamed, all 72 heads: the layer shown first (12 heads) keeps the page for the layers still to come
  s = reduce(s, S.act.sequenceSubmitted("run-button"));
  let head = reduce(s, S.act.runSucceeded(answer("deep", 6, 12, [0]), { model: "deep" }, sent(s), true));
  eq([head.ui.page, head.run.rest], [2, "loading"]);
  s = reduce(head, S.act.runRest(answer("deep", 6, 12)));
  eq([s.ui.page, s.good.page, s.run.rest], [2, 2, null]);
  // 4 heads a layer, streamed: the page waits for the other layers, and 24 heads in all are one page
  s = reduce(s, S.act.optionSet("heads", 4));
  head = reduce(s, S.act.runSucceeded(answer("deep", 6, 4, [0]), { model: "deep" }, sent(s), true));
  eq(head.ui.page, 2);
  s = reduce(head, S.act.runRest(answer("deep", 6, 4)));
  eq([s.ui.page, s.good.page, St.encodeState(s.ui).includes("page=")], [0, 0, false]);
});
