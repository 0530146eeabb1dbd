// The store's reducer (static/js/store.js) on what a person does to the model, called directly on plain states
// (tests/test_js.py runs this file with node's test runner). The page behind it is walked in Chromium by
// tests/browser/test_page.py.
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
