// The top of the views (templates/start.html, data-view="start"): a first visit's short path, four steps that each
// set up a view and bring the panel that answers it into sight, and a row that jumps to every panel. A first visit
// is a page opened with no state in its link and nothing in localStorage saying the path was hidden; hidden, it
// stays hidden (localStorage) and "Start here" in the row brings it back. An example from the examples menu opens
// scrolled to its answer the same way (examples.js `answer`).
//
// It draws into its root and finds its parts there (dom.js `within`). Bringing a panel into sight, and knowing the
// page's panels for the jump row, is the page's (reveal.js): a step, a jump and an example (controls.js) all use it.

import { act } from "./actions.js";
import { DEFAULT_ANSWER, EXAMPLES, examplesFor, exampleText } from "./examples.js";
import { modelInfo } from "./selectors.js";
import { jumpTargets, panelShown, scrollToAnswer } from "./reveal.js";
import { within } from "./dom.js";

export const HIDDEN_KEY = "attnlab.start.hidden"; // localStorage: "1" once the path was hidden
// each step's panel: a selector, its enclosing panel is what comes into sight
export const STEP_ANSWERS = {
  example: DEFAULT_ANSWER,
  mask: "#eligibility",
  head: '[data-view="retrieval"]',
  claim: "#claims-panel",
};

// Whether the path opens on its own: no state in the link and not hidden before. `read` gives the stored mark, and
// is called only for a link without state: a renderer's first read of localStorage loads it from disk (11.7 ms in
// one profiled 512-token first draw, before its run was asked), for a link whose answer it cannot change.
export function firstVisit(search, read) {
  return ![...new URLSearchParams(search).keys()].length && read() !== "1";
}

function stored() {
  try {
    return localStorage.getItem(HIDDEN_KEY);
  } catch {
    return null; // storage refused (a private window): every visit is a first one
  }
}

function remember() {
  try {
    localStorage.setItem(HIDDEN_KEY, "1");
  } catch {
    // nothing to remember it in
  }
}

// What each step does to the state before its panel comes into sight.
function runStep(step, { dispatch, getState }) {
  const s = getState();
  if (step === "example") {
    const ex = EXAMPLES.find((e) => e.model === "textbook" && modelInfo(s, e.model)) || examplesFor(s.models)[0];
    if (ex) dispatch(act.exampleChosen(ex, exampleText(ex, modelInfo(s, ex.model))));
  } else if (step === "mask") {
    dispatch(act.causalSet(!s.ui.masks.causal));
  } else if (step === "head") {
    const [layer, head] = s.ui.focus || [s.ui.layer === "all" ? 0 : s.ui.layer, 0];
    dispatch(act.headOpened(layer, head, null, "start-head"));
  } else if (step === "claim") {
    if (!s.ui.masks.causal) dispatch(act.causalSet(true));
    const S = s.run.result ? s.run.result.tokens.length : 0;
    // a middle position: the positions before it are protected, the ones after it may move
    const position = S > 2 ? Math.floor((S - 1) / 2) : null;
    dispatch(act.perturbSet({ ...getState().ui.perturb, position, kind: "direction", amount: 1 }, true));
  }
  scrollToAnswer(STEP_ANSWERS[step]);
}

function showPath(part, open) {
  part("start-panel").hidden = !open;
  part("start-reopen").hidden = open;
}

export function deps(s) {
  return [s.run.result, s.models];
}

// The jump row follows the panels the other views show or hide in this draw: read once they have all written.
export function render(root) {
  queueMicrotask(() => {
    for (const b of root.querySelectorAll("button[data-jump]")) b.hidden = !panelShown(b.dataset.jump);
  });
}

export function bind(root, store) {
  const part = within(root);
  showPath(part, firstVisit(location.search, stored));
  part("start-dismiss").addEventListener("click", () => {
    remember();
    showPath(part, false);
    part("start-reopen").focus();
  });
  part("start-reopen").addEventListener("click", () => {
    showPath(part, true);
    part("start-panel").querySelector("button[data-step]").focus();
  });
  for (const b of root.querySelectorAll("button[data-step]")) {
    b.addEventListener("click", () => runStep(b.dataset.step, store));
  }
  bindJumps(root.querySelector('[data-role="jumps"]'));
}

// One button a panel of the views (in the template's order), one tab stop for the row: arrows move along it.
function bindJumps(row) {
  for (const { selector, name } of jumpTargets()) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "jump";
    b.dataset.jump = selector;
    b.textContent = name;
    b.tabIndex = -1;
    b.addEventListener("click", () => scrollToAnswer(b.dataset.jump));
    row.append(b);
  }
  const shown = () => [...row.querySelectorAll("button")].filter((b) => !b.hidden);
  const stop = (b) => {
    for (const x of row.querySelectorAll("button")) x.tabIndex = x === b ? 0 : -1;
  };
  if (row.firstChild) stop(row.firstChild);
  row.addEventListener("focusin", (e) => e.target instanceof HTMLButtonElement && stop(e.target));
  row.addEventListener("keydown", (e) => {
    const all = shown();
    const at = all.indexOf(document.activeElement);
    if (at < 0) return;
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: all.length - 1 }[e.key];
    if (to == null) return;
    e.preventDefault();
    all[Math.max(0, Math.min(all.length - 1, to))].focus();
  });
}
