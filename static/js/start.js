// The top of the views (templates/start.html, data-view="start"): a first visit's short path, four steps that each
// set up a view and bring the panel that answers it into sight, and a row that jumps to every panel. A first visit
// is a page opened with no state in its link and nothing in localStorage saying the path was hidden; hidden, it
// stays hidden (localStorage) and "Start here" in the row brings it back. An example from the examples menu opens
// scrolled to its answer the same way (examples.js `answer`).
//
// Its own parts it finds in its root. Being a guide to the whole page, it also looks the other views' panels up in
// the document, as no view does: the jump row's panels (bindJumps, and `render` hiding the jump to a hidden one),
// a step's answer (panelOf) and the views it keeps in sight while they settle (scrollToAnswer).

import { act } from "./actions.js";
import { DEFAULT_ANSWER, EXAMPLES, examplesFor, exampleText } from "./examples.js";
import { modelInfo } from "./selectors.js";
import { openHolding, steer } from "./workspaces.js";
import { within } from "./dom.js";

export const HIDDEN_KEY = "attnlab.start.hidden"; // localStorage: "1" once the path was hidden
export const FOLLOW_MS = 15000; // how long a scroll keeps its panel in sight while the page above it settles
// each step's panel: a selector, its enclosing panel is what comes into sight
export const STEP_ANSWERS = {
  example: DEFAULT_ANSWER,
  mask: "#eligibility",
  head: '[data-view="retrieval"]',
  claim: "#claims-panel",
};

// The panel a selector names: the element's own panel section, or the element.
export function panelOf(selector) {
  const el = document.querySelector(selector);
  return el ? el.closest("section.panel") || el : null;
}

// A panel's name for the jump row: its heading's leading words, before any ":" or "·" the view adds.
export function panelName(section) {
  const h = section.querySelector("h2");
  if (!h) return "";
  const first = [...h.childNodes].find((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
  return (first ? first.textContent : h.textContent).split(/[:·]/)[0].trim();
}

// Whether the path opens on its own: no state in the link and not hidden before.
export function firstVisit(search, stored) {
  return ![...new URLSearchParams(search).keys()].length && stored !== "1";
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

let stopFollowing = () => {};

// Bring the panel `selector` names into sight now, and again whenever the page redraws or changes height above it,
// until the person scrolls (or anything but this scrolls the page), types or presses, or FOLLOW_MS passes.
export function scrollToAnswer(selector) {
  stopFollowing();
  openHolding(panelOf(selector)); // its workspace first, a new history entry
  steer(true);
  let aimed = null; // the scroll position this put the page at, and where the panel's top landed
  let landed = 0;
  const go = () => {
    const panel = panelOf(selector);
    if (!panel || !panel.getClientRects().length) return;
    panel.scrollIntoView({ block: "start" });
    aimed = window.scrollY;
    landed = panel.getBoundingClientRect().top;
  };
  // a scroll that keeps the panel where it landed, or one to the page's end (the page got shorter under it), is the
  // page's; any other is the person's, or another view's
  const moved = () => {
    if (aimed == null || Math.abs(window.scrollY - aimed) <= 2) return;
    const top = panelOf(selector)?.getBoundingClientRect().top;
    const end = document.documentElement.scrollHeight - window.innerHeight;
    if ((top != null && Math.abs(top - landed) <= 2) || window.scrollY >= end - 2) aimed = window.scrollY;
    else stop();
  };
  // while it follows, this aims, not the browser's scroll anchoring (which holds whatever element it picked)
  document.documentElement.style.overflowAnchor = "none";
  const resized = new ResizeObserver(go);
  resized.observe(document.getElementById("views"));
  const drawn = new PerformanceObserver((list) => {
    if (list.getEntriesByName("attnlab:drawn").length) go();
  });
  drawn.observe({ type: "mark" });
  const events = ["wheel", "touchstart", "keydown", "pointerdown"];
  const stop = () => {
    resized.disconnect();
    drawn.disconnect();
    clearTimeout(timer);
    for (const e of events) window.removeEventListener(e, stop, true);
    window.removeEventListener("scroll", moved);
    document.documentElement.style.overflowAnchor = "";
    steer(false);
    stopFollowing = () => {};
  };
  const timer = setTimeout(stop, FOLLOW_MS);
  for (const e of events) window.addEventListener(e, stop, true);
  window.addEventListener("scroll", moved, { passive: true });
  stopFollowing = stop;
  go();
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
    for (const b of root.querySelectorAll("button[data-jump]")) {
      const panel = panelOf(b.dataset.jump);
      b.hidden = !panel || panel.hidden || !!panel.closest("[hidden]:not([data-workspace])");
    }
  });
}

export function bind(root, store) {
  const part = within(root);
  showPath(part, firstVisit(location.search, stored()));
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
  // an example opens scrolled to its answer; read before the controls' own listener empties the menu
  document.addEventListener(
    "change",
    (e) => {
      if (!(e.target instanceof HTMLSelectElement) || e.target.id !== "example-select") return;
      const ex = examplesFor(store.getState().models)[Number(e.target.value)];
      if (ex) scrollToAnswer(ex.answer || DEFAULT_ANSWER);
    },
    true,
  );
}

// One button a panel of the views (in the template's order), one tab stop for the row: arrows move along it.
function bindJumps(row) {
  const sections = [...document.querySelectorAll("#views section.panel")].filter((p) => !p.closest(".start"));
  sections.forEach((section, i) => {
    if (!section.id) section.id = `panel-${i}`;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "jump";
    b.dataset.jump = `#${section.id}`;
    b.textContent = panelName(section) || `Panel ${i + 1}`;
    b.tabIndex = -1;
    b.addEventListener("click", () => scrollToAnswer(b.dataset.jump));
    row.append(b);
  });
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
