// The analysis panels the template declares. An element <section data-panel="NAME"> is drawn by the module
// ./NAME.js, whose `panel` export is the panel's one declaration; main.js imports it and registers it here before
// the store is made, and the store's slots, the link (state.js), the requests (panels.js panelSpecs, sent by
// effects.js through api.js `analyse`) and the busy indicator read it from here. Adding an analysis to the page is
// its view module and its element in the template. A declaration:
//
//   analysis   the API analysis it asks: POST /api/ANALYSIS (GET /api/analyses lists them)
//   words      what the busy indicator calls it while it loads ("Updating WORDS…")
//   setting    the panel's own settings, kept in ui[NAME] and in the link under `key`: {key, encode(value) -> string,
//              decode(string) -> value, dropOnModel}; null (the default) until the panel is asked for. Kept on a
//              model change, unless dropOnModel (a setting that describes the old model's run)
//   request(s, value, slot)   the body to send now, from the state, the settings and the slot (null: nothing to
//              ask; the slot clears)
//   debounce, keep, nonce   as panels.js's specs: wait for a slider (ms), keep the old answer while the next loads,
//              ask again on a button press (act.panelAsked(slot, {fields}) counts the press)
//   asked(s, value)   the fields a button press records in the slot (act.panelAsked(slot, {fields})); a press
//              while a run is on its way is recorded again from the run that answers (answers.js askedDuringRun)
//   after(result)   what an answer calls for outside the page state (a download)
//   parts      {PART: a declaration of analysis (the panel's by default), words, request, debounce, keep, nonce,
//              asked, after}: a second request of the panel's, with a slot of its own, s.panels["NAME.PART"]
//   render(root, slot, s, dispatch)   draws the panel from its slot ({result, status, message}) and the state
//   deps(s)    what else in the state it draws from (its slots and its setting always count)
//   bind(root, store)   its event listeners, once; needsPlotly: drawn once plotly is loaded
//   take(action, setting, state)   an action the panel takes as its own while its setting is set (a lesson's
//              answer): {value: its new setting, only: the action does nothing else}, or null (store.js asks)
// Pure: no DOM, no fetch.

const panels = new Map(); // name -> declaration, in the template's order

export function register(name, panel) {
  panels.set(name, panel);
}

// [[name, declaration]] of every panel registered.
export function registered() {
  return [...panels.entries()];
}

// {name, value, only} from the first registered panel whose `take` takes action `a` in state `s`, or null.
export function takenBy(s, a) {
  for (const [name, p] of panels) {
    const t = p.take && s.ui[name] != null ? p.take(a, s.ui[name], s) : null;
    if (t) return { name, ...t };
  }
  return null;
}

export function panelOf(name) {
  return panels.get(name) || null;
}

// [[slot, declaration]] of every slot the registered panels ask into: a panel's own (its name) and each of its
// parts' ("NAME.PART"); each declaration carries `panel`, the name of the panel whose setting it reads.
export function slots() {
  const out = [];
  for (const [name, p] of panels) {
    out.push([name, { ...p, panel: name }]);
    for (const [part, q] of Object.entries(p.parts || {})) {
      out.push([`${name}.${part}`, { analysis: p.analysis, ...q, panel: name }]);
    }
  }
  return out;
}

export function slotOf(slot) {
  const found = slots().find(([name]) => name === slot);
  return found ? found[1] : null;
}
