// The analysis panels the template declares. An element <section data-panel="NAME"> is drawn by the module
// ./NAME.js, whose `panel` export is the panel's one declaration; main.js imports it and registers it here before
// the store is made, and the store's slots, the link (state.js), the requests (panels.js panelSpecs, sent by
// effects.js through api.js `analyse`) and the busy indicator read it from here. Adding an analysis to the page is
// its view module and its element in the template. A declaration:
//
//   analysis   the API analysis it asks: POST /api/ANALYSIS (GET /api/analyses lists them)
//   words      what the busy indicator calls it while it loads ("Updating WORDS…")
//   setting    the panel's own settings, kept in ui[NAME] and in the link under `key`: {key, encode(value) -> string,
//              decode(string) -> value}; null (the default) until the panel is asked for. Kept on a model change
//   request(s, value)   the body to send now, from the state and the settings (null: nothing to ask; the slot clears)
//   debounce, keep, nonce   as panels.js's specs: wait for a slider (ms), keep the old answer while the next loads,
//              ask again on a button press
//   render(root, slot, s, dispatch)   draws the panel from its slot ({result, status, message}) and the state
//   bind(root, store)   its event listeners, once; needsPlotly: drawn once plotly is loaded
// Pure: no DOM, no fetch.

const panels = new Map(); // name -> declaration, in the template's order

export function register(name, panel) {
  panels.set(name, panel);
}

// [[name, declaration]] of every panel registered.
export function registered() {
  return [...panels.entries()];
}

export function panelOf(name) {
  return panels.get(name) || null;
}
