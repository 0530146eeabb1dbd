// The page's workspaces: a few groups of views a person recognises, one shown at a time, each with its own link
// (?ws=NAME) and its root <div data-workspace="NAME"> in the template's <main id="views">. WORKSPACES is the one
// declaration of where every view sits: at start `mount` moves each view's panel (the root's own section.panel, or
// the root) into its workspace's column, in the table's order. Only the shown workspace's views draw (main.js asks
// `drawsNow`); the others draw from the answer already held when they are opened. A link opens on the workspace that
// holds what it names: `ws` itself, a lesson (the workspace of the view it sets up), or the first workspace whose
// `keys` the link sets (`long`, `pert`, ...). The tab bar switches without a reload; Back returns. It owns the page's
// layout, so it looks the view roots and the workspaces up in the document, as main.js does and no view does.
// Adding a workspace is one row of WORKSPACES: its root, its columns and its tab are made from the row, and its
// views are each a module and its element in a template that index.html includes (a page feature's control: one
// line of features.js FEATURES too); nothing else names it.
//
//   name    the link's ?ws= value and the root's data-workspace
//   label   the tab's words
//   main    the views of the main column, by their data-view or data-panel name
//   side    the views beside it at 1200 px and wider (the answer to a click in the main column), below it on a phone
//   keys    the link keys of the panels it holds: a link that sets one opens here

import { LESSONS } from "./lessons.js";

export const WORKSPACES = [
  {
    name: "explore",
    label: "Explore",
    main: ["tokens", "heads", "overview"],
    side: ["focus", "tophead", "retrieval", "eligibility"],
    keys: [],
  },
  {
    name: "test",
    label: "Test",
    main: ["experiments", "patch", "contrast"],
    side: [],
    keys: ["pert", "abl", "edit", "pin", "patch", "contrast"],
  },
  {
    name: "inside",
    label: "Inside the model",
    main: ["headtypes", "qkterms", "rollout", "flow", "stats"],
    side: [],
    keys: ["hsort", "hfind", "hmin", "habl", "hbase", "hlens", "hseed", "rollout"],
  },
  {
    name: "mechanics",
    label: "Mechanics",
    main: ["mechanics", "cost", "sweep", "audit"],
    side: [],
    keys: ["dec", "gen", "cost", "sweep"],
  },
  { name: "lessons", label: "Lessons", main: ["lesson"], side: [], keys: [] },
  { name: "long", label: "Long input", main: ["deepzoom"], side: [], keys: ["long"] },
  { name: "train", label: "Train", main: ["train"], side: [], keys: [] },
  { name: "vision", label: "Vision", main: ["vision"], side: [], keys: [] },
];

export const DEFAULT_WORKSPACE = "explore";
// A lesson's card sits at the top of the workspace of the view it sets up: the large head, the heads and the
// eligibility grid (Explore) unless named here, or unless its setup sets a link key of another workspace (ex-10's
// `pert` opens Test, where Test a claim draws the bars it asks about).
export const LESSON_WORKSPACES = { "kv-cache": "mechanics", "ex-12": "mechanics" };

const names = new Set(WORKSPACES.map((w) => w.name));
let shown = DEFAULT_WORKSPACE;
const opened = new Set(); // listeners: (name) after a workspace is shown

// The workspace a lesson opens on.
export function lessonWorkspace(id) {
  const lesson = LESSONS.find((l) => l.id === id);
  if (!lesson) return "lessons";
  if (Object.hasOwn(LESSON_WORKSPACES, id)) return LESSON_WORKSPACES[id];
  if (lesson.workspace) return lesson.workspace;
  const keys = [...new URLSearchParams(lesson.setup || "").keys()];
  return WORKSPACES.find((w) => w.keys.some((k) => keys.includes(k)))?.name || DEFAULT_WORKSPACE;
}

// The workspace a query string opens on (pure).
export function workspaceOf(search) {
  const p = new URLSearchParams(search);
  const ws = p.get("ws");
  if (ws && names.has(ws)) return ws;
  const lesson = p.get("lesson");
  if (lesson) return lessonWorkspace(lesson);
  for (const w of WORKSPACES) if (w.keys.some((k) => p.has(k))) return w.name;
  return DEFAULT_WORKSPACE;
}

// `qs` (a query string without "?") with the shown workspace's `ws` key, left out where the rest of the link opens
// on it anyway (a panel's own link stays the page's).
export function withWorkspace(qs) {
  const p = new URLSearchParams(qs);
  p.delete("ws");
  if (workspaceOf(p.toString()) !== shown) p.set("ws", shown);
  return p.toString();
}

function rootOf(name) {
  return document.querySelector(`[data-workspace="${name}"]`);
}

// The view roots `name` names (data-view or data-panel), as the block that moves: its panel section, or itself.
function blockOf(name) {
  const root = document.querySelector(`#views [data-view="${name}"], #views [data-panel="${name}"]`);
  return root ? root.closest("section.panel") || root : null;
}

// Each workspace's root (a main and a side column) after `after`, and every view into its column, in the table's
// order; a heading just above a view travels with it; the wrappers the template grouped them in, left empty, go.
export function mount(after) {
  let at = after;
  for (const w of WORKSPACES) {
    const root = document.createElement("div");
    root.className = "workspace";
    root.id = `ws-${w.name}`;
    root.dataset.workspace = w.name;
    root.setAttribute("role", "tabpanel");
    root.setAttribute("aria-label", w.label);
    for (const col of ["main", "side"]) {
      const div = document.createElement("div");
      div.className = `ws-${col}`;
      div.dataset.col = col;
      root.append(div);
    }
    at.after(root);
    at = root;
    for (const [col, views] of [
      ["main", w.main],
      ["side", w.side],
    ]) {
      const into = root.querySelector(`[data-col="${col}"]`);
      for (const v of views) {
        const block = blockOf(v);
        if (!block) continue;
        const head = block.previousElementSibling;
        if (head?.classList.contains("group-title")) into.append(head);
        into.append(block);
      }
    }
    root.classList.toggle("ws-has-side", w.side.length > 0);
  }
  for (const el of document.querySelectorAll("#views > .two")) if (!el.children.length) el.remove();
}

// Whether a view's root draws now: outside every workspace, or inside the one shown.
export function drawsNow(root) {
  const ws = root.closest("[data-workspace]");
  return !ws || ws.dataset.workspace === shown;
}

// The workspace an element sits in (null: outside them all).
export function holding(el) {
  return el?.closest("[data-workspace]")?.dataset.workspace ?? null;
}

export function onOpen(fn) {
  opened.add(fn);
}

// Show workspace `name`: its root shown, every other hidden, its tab selected, the link's `ws` key written (a new
// history entry when `push`), and the listeners told (main.js draws its views).
export function open(name, { push = false } = {}) {
  if (!names.has(name)) return;
  const was = shown;
  shown = name;
  for (const w of WORKSPACES) {
    const root = rootOf(w.name);
    if (root) root.hidden = w.name !== name;
  }
  for (const tab of document.querySelectorAll("[data-ws-tab]")) {
    const on = tab.dataset.wsTab === name;
    tab.setAttribute("aria-selected", on ? "true" : "false");
    tab.tabIndex = on ? 0 : -1;
  }
  const qs = withWorkspace(location.search.slice(1));
  const url = qs ? `?${qs}` : location.pathname;
  if (push && was !== name) history.pushState({ ws: name }, "", url);
  else if (location.search !== (qs ? `?${qs}` : "")) history.replaceState(history.state, "", url);
  if (was !== name) window.scrollTo(0, 0);
  for (const fn of opened) fn(name);
}

// Open the workspace that holds `el` (a hidden one), a new history entry.
export function openHolding(el) {
  const name = holding(el);
  if (name && name !== shown) open(name, { push: true });
}

// A head opened from the table (or a quick button) is drawn in the large head's panel, in the workspace of the heads
// (Explore): open it (Back returns to the table) and bring that panel into view (its top at the viewport's top when
// it is above), smoothly unless the person asked for reduced motion. The keyboard focus moves to the large head,
// the table's row being hidden with its workspace; it stays on the row's button where the table is shown beside it.
export function revealLargeHead() {
  const panel = document.querySelector("section[data-view=focus]");
  if (!panel) return;
  const from = document.activeElement;
  openHolding(panel);
  if (from && from !== document.body && !from.getClientRects().length)
    document.getElementById("focus-plot")?.focus({ preventScroll: true });
  const r = panel.getBoundingClientRect();
  if (r.top >= 0 && r.bottom <= window.innerHeight) return;
  const still = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  panel.scrollIntoView({
    block: r.height > window.innerHeight ? "start" : "nearest",
    behavior: still ? "auto" : "smooth",
  });
}

// The tab bar: one tab a workspace, a link of its own (a new tab opens it); arrows, Home and End move along it.
export function bindTabs(bar) {
  const tabs = WORKSPACES.map((w) => {
    const a = document.createElement("a");
    a.href = `?ws=${w.name}`;
    a.className = "ws-tab";
    a.textContent = w.label;
    a.dataset.wsTab = w.name;
    a.setAttribute("data-testid", `ws-tab-${w.name}`);
    a.setAttribute("role", "tab");
    a.setAttribute("aria-controls", `ws-${w.name}`);
    a.addEventListener("click", (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      open(w.name, { push: true });
    });
    return a;
  });
  bar.append(...tabs);
  bar.addEventListener("keydown", (e) => {
    const i = tabs.indexOf(document.activeElement);
    if (i < 0) return;
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
    if (to == null) return;
    e.preventDefault();
    const tab = tabs[(to + tabs.length) % tabs.length];
    tab.focus();
    tab.click();
  });
  window.addEventListener("popstate", () => open(workspaceOf(location.search)));
}

// The fields of ui whose change redraws every head: a new sequence, the textbook's numbers, a model's options (the
// random layer's heads), another layer, another page of heads (the grid's height changes), the display's settings,
// a source, a batch.
const HEADS_FIELDS = [
  "text",
  "matrices",
  "options",
  "layer",
  "page",
  "view",
  "palette",
  "scoreScale",
  "scale",
  "allMasked",
];
const INPUT_FIELDS = ["source", "batch", "item"];

// What an action changes, the element that shows it, and the places acted on that show it themselves: after the
// action, that element is brought into the viewport when it is in the workspace shown and out of sight (a phone,
// where the answer sits below the grid), unless the person acted in a place that draws the change itself (a cell
// blocked in the large head is hatched there: the large head stays in sight).
export const ANSWERS = [
  [(s) => s.ui.focus, '[data-view="focus"]'],
  ...[...HEADS_FIELDS, ...INPUT_FIELDS].map((field) => [(s) => s.ui[field], "#heads-grid"]),
  [(s) => s.ui.masks, "#eligibility", ["focus-plot"]],
  [(s) => s.ui.sourcePadded, "#eligibility"],
  [(s) => s.ui.pair, "#tophead-panel"],
  [(s) => s.ui.lesson?.feedback, "#lesson-feedback"],
  // the controls' settings that redraw every head (a classic bug, the sinks hidden, the count of positions, the
  // precision): the heads, above the controls' lower fields once the page is scrolled down to reach them
  [(s) => s.ui.bug, '[data-view="heads"]'],
  [(s) => s.ui.sinks, '[data-view="heads"]'],
  [(s) => s.ui.from1, '[data-view="heads"]'],
  [(s) => s.ui.dtype, '[data-view="heads"]'],
  // a token patched: its grid under the form, once the patching answers (the form's scoring fields can push it
  // below the fold on a phone)
  [(s) => s.panels.patch?.result, "#patch-grid"],
  // a patching cell opened: its detail under the grid (below the fold on a phone)
  [(s) => s.ui.patch?.cell, "#patch-cell"],
  // a weight edit added under the large head: the line of the edits in force under its form
  [(s) => s.ui.edits, "#edit-shown"],
  // a panel's button pressed (its slot's nonce counts the presses): the panel's answer, under its button
  [(s) => s.panels["cost.measure"]?.nonce, "#cost-measured"],
  [(s) => s.panels["cost.lengths"]?.nonce, "#cost-lengths-out"],
  [(s) => s.panels.audit?.nonce, "#audit-summary"],
  [(s) => s.panels.qkterms?.nonce, "#qk-body"],
];

function outOfSight(el) {
  const r = el.getBoundingClientRect();
  return r.bottom <= 0 || r.top >= window.innerHeight;
}

// The lesson's card at the top of its workspace's main column, right above the view it sets up (the index of
// lessons when none is open); a lesson opened from the index opens its workspace.
function placeLesson(id, openIt) {
  const block = blockOf("lesson");
  const ws = id ? lessonWorkspace(id) : "lessons";
  const col = rootOf(ws)?.querySelector('[data-col="main"]');
  if (!block || !col) return;
  if (col.firstElementChild !== block) col.prepend(block);
  if (openIt && ws !== shown) open(ws, { push: true });
}

// Subscribed after the views' draw: the lesson's card follows its lesson, and an action's answer comes into sight.
let steered = false; // a step of the start path (reveal.js scrollToAnswer) is bringing its own answer into sight

export function steer(on) {
  steered = on;
}

// The answer is brought into sight when the action changes it, and again once the run the action asked is drawn
// (the views drawn above it may have moved it); not while the start path brings its own.
export function follow(store) {
  placeLesson(store.getState().ui.lesson?.id ?? null, false);
  let aim = null; // the selector of the last action's answer, until its run is drawn
  let due = null; // that selector again, until every view of the run is drawn
  const bring = (selector) => {
    const el = steered ? null : document.querySelector(selector);
    if (el && drawsNow(el) && el.getClientRects().length && outOfSight(el)) el.scrollIntoView({ block: "nearest" });
  };
  store.subscribe((s, prev) => {
    const id = s.ui.lesson?.id ?? null;
    if (id !== (prev.ui.lesson?.id ?? null)) placeLesson(id, !!id);
    if (!prev.run.result) return; // the link's state restored, not an action
    if (prev.ui.model !== s.ui.model || (s.run.where === "example-select" && s.run.want !== prev.run.want)) {
      aim = "#heads-grid"; // another model or an example: every head is new (its other answers start afresh)
      bring(aim);
      return;
    }
    // a run's answer is not an action: the fields it hands back (the masks as sent) are the ones asked already
    const answer = s.run.answered !== prev.run.answered;
    for (const [read, selector, drawnAt = []] of answer ? [] : ANSWERS) {
      if (read(s) === read(prev) || drawnAt.includes(s.run.where)) continue;
      aim = selector;
      bring(selector);
    }
    if (aim && s.run.status !== "loading" && s.run.answered === s.run.want && s.run !== prev.run) {
      const selector = aim;
      aim = null;
      due = selector;
      requestAnimationFrame(() => bring(selector));
    }
  });
  // the views out of sight draw after the paint (sight.js): one that shrank there (fewer heads) can leave the answer
  // above the viewport, so it is brought again once every view is drawn
  window.addEventListener("attnlab:drawn", () => {
    if (due) bring(due);
    due = null;
  });
}
