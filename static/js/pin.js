// The pinned comparison's setting ("Compare with a pinned run": its controls are experiments.js's, its chart
// compare.js's, what POST /api/compare is sent requests.js compareRequest's): the /api/attention body pinned as A.
// `feature` is its one declaration (features.js): default, link key, actions, reducer cases; a model change keeps
// the pin (compare two models or seeds), as a declaration without `keep` does. A module of its own that imports
// nothing, so that the page's actions, gathered from it, bring no view along, and the features' table, which the
// request builders read, is not imported back by it: the run's body as one sequence reaches its reducer as the
// store's `single` (selectors.js singleOf).

// The body pinned as A from the run's body as one sequence: without what only shapes an answer (include, layer).
export function pinBody(single) {
  const { include: _include, layer: _layer, ...rest } = single;
  return rest;
}

// The pinned A body from its JSON; null unless it is an object naming a model or carrying x.
export function parsePin(raw) {
  try {
    const b = JSON.parse(raw);
    if (!b || typeof b !== "object" || Array.isArray(b)) return null;
    if (typeof b.model !== "string" && !Array.isArray(b.x)) return null;
    return pinBody(b);
  } catch {
    return null;
  }
}

const actions = {
  pinned: () => ({ type: "pinned" }), // the run on screen becomes A
  unpinned: () => ({ type: "unpinned" }),
};

export const feature = {
  ui: {
    pin: null, // the /api/attention body pinned as A (no include, no layer); null = nothing pinned
  },
  link: {
    write(ui, p) {
      if (ui.pin) p.set("pin", JSON.stringify(ui.pin));
    },
    read: (p) => (p.has("pin") ? { pin: parsePin(p.get("pin")) } : {}),
  },
  actions,
  reduce: {
    pinned: (s, _a, { setUi, single }) => (s.run.request ? setUi(s, { pin: pinBody(single(s)) }) : s),
    unpinned: (s, _a, { setUi }) => setUi(s, { pin: null }),
  },
};
