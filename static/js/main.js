// attnlab's page: one store (store.js), effects that ask the API (effects.js), and views.
//
// Every element of the template with a `data-view` attribute is drawn by the module of that name: it exports
// `render(root, state, dispatch)` (a pure function of the state: it draws into its own root and never changes the
// state), optionally `deps(state)` (the parts of the state it reads: it is redrawn only when one of them changes)
// and `bind(root, store)` (its event listeners, once). An element with a `data-panel` attribute is an analysis
// panel: the module of that name exports its one declaration, `panel` (registry.js), registered before the store is
// made. A view that reads a size exports `measure(root)` (dom.js noteWidth), called before any view of the draw
// writes. A view whose draw is slow may export `sketch(root, state, dispatch)`: a quick first picture of what it
// will draw (true when it made one), painted with the views in sight; its render then comes first after that paint.
// Adding an analysis panel: its module and its element in the template. The views in sight draw first; the ones
// below the fold once those are painted (sight.js). Each view sits in one workspace (workspaces.js WORKSPACES):
// only the shown workspace's views draw, the others when they are opened, from the answers already held.
//
// It owns the whole document, so it looks elements up in it: the view roots (found once, each handed to its view),
// the workspaces' tab bar, #views (busy while a run is on its way, stale after a failed one) and the element that
// had the focus before a redraw. A view looks only inside the root it is given; what spans several views is the
// page's and bound here: the controls' drawer (drawer.js) and a failed run's message beside its control
// (actionerror.js).

import { placeErrors } from "./actionerror.js";
import { fetchModels } from "./api.js";
import { correctCodeNote, renderCorrectCode } from "./bugs.js";
import { numbersOf, offered, optionsOf } from "./capabilities.js";
import { startEffects } from "./effects.js";
import { loadPlotly } from "./plotly.js";
import { countFrom1 } from "./positions.js";
import { shownHeld } from "./selectors.js";
import { withLinkedSnapshot } from "./trainmodel.js";
import { afterPaint, inSight, nextTask, split } from "./sight.js";
import { decodeState, encodeState, stateForModel } from "./state.js";
import { bindDrawer } from "./drawer.js";
import { register } from "./registry.js";
import { act, createStore, initialState, reducer } from "./store.js";
import { bindTabs, drawsNow, follow, mount, onOpen, open, withWorkspace, workspaceOf } from "./workspaces.js";

let store = null; // made once the panels are registered: their slots and settings are part of its state
let pageViews = []; // every view, once loaded (init): what is drawn again once plotly is here

// The state the page draws from now (null before the store is made): a view drawn from it into a root of its own
// (a copy of its markup anywhere, in the document or not) shows what the page shows.
export function pageState() {
  return store ? store.getState() : null;
}

// The views in the template's order, except that those that plot with plotly draw last: plotly measures text as it
// plots, which makes the browser lay the page out there and then; after every other view's writes, that happens once.
async function loadViews() {
  const roots = [...document.querySelectorAll("[data-view], [data-panel]")];
  const views = await Promise.all(
    roots.map(async (root) => {
      const name = root.dataset.view || root.dataset.panel;
      const mod = await import(`./${name}.js`);
      const view = root.dataset.view ? mod : panelView(name, mod.panel);
      return { root, name, mod: view, last: null, coded: codedSections(root, view) };
    }),
  );
  return [...views.filter((v) => !v.mod.needsPlotly), ...views.filter((v) => v.mod.needsPlotly)];
}

// A registered panel as a view: drawn from its slot when its slots (its own, its parts'), its setting or what its
// `deps` name changes.
function panelView(name, panel) {
  register(name, panel);
  const parts = Object.keys(panel.parts || {}).map((part) => `${name}.${part}`);
  return {
    slots: [name, ...parts],
    render: (root, s, dispatch) => panel.render(root, s.panels[name], s, dispatch),
    deps: (s) => [s.panels[name], s.ui[name], ...parts.map((p) => s.panels[p]), ...(panel.deps ? panel.deps(s) : [])],
    bind: panel.bind,
    needsPlotly: panel.needsPlotly,
  };
}

// The sections of a view that show analysis slots, each with its slots' names: a panel's own root (its slot and its
// parts'), and each element of a view marked data-slots="NAME ..." (the analyses panels.js PANEL_SPECS asks). Each
// says when its answer runs the correct code rather than the view's classic bug (bugs.js correctCodeNote).
function codedSections(root, view) {
  if (view.slots) return [[root, view.slots]];
  const marked = [...(root.matches("[data-slots]") ? [root] : []), ...root.querySelectorAll("[data-slots]")];
  return marked.map((el) => [el, el.dataset.slots.split(" ")]);
}

function sameDeps(a, b) {
  return !!a && !!b && a.length === b.length && a.every((x, i) => x === b[i]);
}

// What identifies a focused element across a redraw: its id, or its role in a view (a token chip's index, a grid
// cell's query and key, a head card's ablate button).
export function focusKey(el) {
  if (!el || el === document.body) return null;
  if (el.id) return `#${el.id}`;
  const d = el.dataset;
  const parts = [el.getAttribute("data-testid"), d.index, d.layer, d.head, d.q, d.k, d.item, d.focus, d.query, d.key];
  return parts.some((p) => p != null) ? JSON.stringify(parts) : null;
}

function findByKey(key) {
  if (!key) return null;
  if (key.startsWith("#")) return document.getElementById(key.slice(1));
  const want = key;
  for (const el of document.querySelectorAll("[data-testid], [data-index], [data-item], [data-focus], [data-q]")) {
    if (focusKey(el) === want) return el;
  }
  return null;
}

// A view that plots with plotly waits for it (plotly.js): its draw is held, and so is the mark, until plotly is here.
// `asked`: plotly's script is asked for (once). It runs once the page's first
// run is answered and drawn as far as it can be without it: in the task after the paint of the views in sight (a
// large head sketched there is plotted after), or at once when a view in sight has nothing to show but its plot.
// Asked with the run instead, its 60-190 ms of the main thread ran while the server computed the first layer and the
// page read it in, on the same cores.
// `layers`: a streamed run's other layers are in and their "attnlab:layers" mark is still owed.
// `inSight`: a view held is in sight, which holds the "attnlab:visible" mark too; `wasInSight`, while the views held
// are drawn once plotly is here: whether one was (else the views in sight were marked visible already).
const plotly = { ready: !!window.Plotly, asked: false, held: false, inSight: false, wasInSight: null, layers: false };

// The views due that were out of sight (sight.js), nearest first: drawn in tasks of their own once the views in
// sight are painted. `visible` and `drawn`: the marks owed for the action drawn, made once what they promise is.
const waiting = { views: [], going: false };
// A task of views waiting ends past STEP_MS, or as soon as the person does something where the browser can tell
// (isInputPending); where it cannot, after a shorter one. Each task's end lets a frame be painted, a page's worth of
// layout and paint: at 512 tokens, tasks of 200 ms drew every view 400 ms later than tasks of 2 s.
const pending = navigator.scheduling?.isInputPending ? () => navigator.scheduling.isInputPending() : null;
const STEP_MS = pending ? 500 : 100;
const owed = { visible: false, drawn: false };

// The views whose deps changed since they last drew, each as [view, deps]; a view that plots with plotly is held
// (drawn with these deps or newer once plotly is here) and `held` lists it.
function dueViews(views, s, held = []) {
  const due = [];
  for (const v of views) {
    if (!drawsNow(v.root)) continue; // in a hidden workspace: due when it is opened
    const deps = v.mod.deps ? v.mod.deps(s) : null;
    if (deps && sameDeps(deps, v.last)) continue;
    due.push([v, deps]);
  }
  return due.filter(([v]) => !(v.mod.needsPlotly && !plotly.ready && held.push(v)));
}

function render(v, s, deps) {
  v.last = deps;
  const t0 = performance.now();
  v.mod.render(v.root, s, store.dispatch);
  const bug = s.run.request?.demo_bug ?? null;
  for (const [el, names] of v.coded) {
    renderCorrectCode(
      el,
      correctCodeNote(
        bug,
        names.map((n) => s.panels[n]?.key ?? null),
      ),
    );
  }
  performance.measure(`attnlab:view:${v.name}`, { start: t0 });
}

// The view's sketch (its quick first picture), when it has one and makes one: timed as its draws are.
function sketch(v, s) {
  const t0 = performance.now();
  if (!v.mod.sketch?.(v.root, s, store.dispatch)) return false;
  performance.measure(`attnlab:view:${v.name}`, { start: t0 });
  return true;
}

// keep focus where the person was: a redraw that replaces the focused element focuses its successor
function keepingFocus(fn) {
  const active = document.activeElement;
  const key = focusKey(active);
  fn();
  if (key && !document.contains(active)) findByKey(key)?.focus({ preventScroll: true });
}

function draw(views, s, prev) {
  const replay = !prev && plotly.ready && plotly.wasInSight === false; // drawn again once plotly is here: seen before
  if (countFrom1(s.ui.from1)) for (const v of views) v.last = null; // every printed position changes
  const held = [];
  const { now, later } = split(dueViews(views, s, held), new Set(waiting.views));
  if (held.length) plotly.held = true;
  const sketched = [];
  keepingFocus(() => {
    // every size a view reads is read before any view writes: the page is laid out once, after the draws
    for (const [v] of now) v.mod.measure?.(v.root);
    let wrote = false;
    for (const item of now) {
      // one drawn above may have pushed it out of sight (the heads' grid, first drawn, is 770 px tall at 512)
      if (wrote && !inSight(item[0])) {
        later.unshift(item);
        continue;
      }
      // a view that sketches what it draws (a large head's first plot): the sketch in this paint, its draw first
      // after it
      if (sketch(item[0], s)) sketched.push(item);
      else render(item[0], s, item[1]);
      wrote = true;
    }
  });
  // where the views in sight have put them: a view held for plotly that is in sight holds the visible mark, unless
  // it sketched what it will plot (read at each draw: a large head held before the run is in has nothing to sketch)
  plotly.inSight = held.filter((v) => inSight(v) && !sketch(v, s)).length > 0;
  waiting.views = [...sketched, ...later].map(([v]) => v);
  const coming = s.run.status === "loading" || s.run.answered !== s.run.want;
  const qs = withWorkspace(encodeState(s.ui));
  if (s.run.want > 0 && location.search !== `?${qs}`) history.replaceState(null, "", `?${qs}`); // once the link is read
  // the marks of an action: once per action, so not while the action's run is still to come (asked for, in its
  // debounce or in flight), only when its answer is drawn; for a streamed run, when the layer shown is (its other
  // layers come after: "attnlab:layers" once they are drawn too). "attnlab:visible" once every view in sight is
  // painted, "attnlab:drawn" once every view is (the analysis panels follow on their own).
  if (coming) owed.visible = owed.drawn = false; // the action drawn is superseded
  const rest = !!prev && restEvent(prev, s);
  const arrived = !!prev && !shownHeld(prev) && shownHeld(s); // a layer switched to while it was on its way
  if (
    s.run.result &&
    !coming &&
    shownHeld(s) &&
    (!prev || (prev.run !== s.run && !rest) || prev.ui !== s.ui || arrived)
  ) {
    if (!plotly.inSight && !replay) owed.visible = true;
    if (!plotly.held) owed.drawn = true;
  }
  if (rest && !s.run.rest) plotly.layers = true; // owed: marked once every view has drawn them
  if (!waiting.views.length) drawnMarks(s);
  if (!waiting.going && (waiting.views.length || owed.visible)) {
    waiting.going = true;
    afterPaint(step);
  }
  // plotly for the views held, once a run is answered: at once when one in sight has nothing else to show, else
  // after the paint (step)
  if (answered(s) && (plotly.inSight || !waiting.going)) askPlotly();
  busy(s);
}

// One task after the paint: the owed "attnlab:visible" mark, then the views waiting, nearest first, for up to
// STEP_MS or until the person does something (one at least), then another task while any waits; the marks of
// every view drawn once none does. ("attnlab:drawn" comes before "attnlab:visible" when no view waited.)
function step() {
  const s = store.getState();
  if (owed.visible) {
    owed.visible = false;
    performance.mark("attnlab:visible");
  }
  // the views in sight are painted: the waiting ones that plot (a large head sketched in that paint comes first)
  // are held for plotly, which is asked for now
  if (waiting.views.some((v) => v.mod.needsPlotly && !plotly.ready)) plotly.held = true;
  if (answered(s)) askPlotly();
  const t0 = performance.now();
  const more = () => performance.now() - t0 < STEP_MS && !pending?.();
  keepingFocus(() => {
    for (let first = true; waiting.views.length && (first || more()); first = false) {
      const v = waiting.views.shift();
      const [due] = dueViews([v], s);
      if (due) {
        try {
          v.mod.measure?.(v.root);
          render(v, s, due[1]);
        } catch (err) {
          reportError(err); // the page's error, as a throw in a draw was; the views after it still draw
        }
      }
    }
  });
  if (waiting.views.length) return nextTask(step);
  waiting.going = false;
  drawnMarks(s);
  busy(s);
}

// The marks owed once every view is drawn: "attnlab:drawn" for the action, "attnlab:layers" for a streamed run's
// other layers.
function drawnMarks(s) {
  if (owed.drawn && !plotly.held) {
    owed.drawn = false;
    performance.mark("attnlab:drawn");
    window.dispatchEvent(new Event("attnlab:drawn")); // workspaces.js follow: an answer redrawn out of sight
  }
  if (plotly.layers && !plotly.held && !s.run.rest && s.run.answered === s.run.want) {
    plotly.layers = false;
    performance.mark("attnlab:layers");
  }
}

// The views are busy while a run is to come or its other layers are, and while a view waits to draw: in the queue
// after the paint, or held until plotly is here. The page's own classes for a run on its way or failed go with it.
function busy(s) {
  const on = s.run.status === "loading" || !!s.run.rest || waiting.views.length > 0 || plotly.held ? "true" : "false";
  const views = document.getElementById("views");
  if (views.getAttribute("aria-busy") !== on) views.setAttribute("aria-busy", on);
  // the page dimmed a little while a run is on its way (attnlab.css), and marked stale once one failed and the
  // views still show the last run that worked
  document.body.classList.toggle("busy", s.run.status === "loading");
  views.classList.toggle("stale", s.run.status === "error" && !!s.run.result);
}

// Whether the change from `prev` to `s` is a streamed run's other layers arriving (or failing to), nothing else.
function restEvent(prev, s) {
  return (
    !!prev.run.rest &&
    prev.run !== s.run &&
    s.run.base === prev.run.base &&
    s.run.want === prev.run.want &&
    s.run.status === prev.run.status
  );
}

async function init() {
  // the models list is asked while the views load, not after
  const asked = fetchModels().then(
    (models) => ({ models }),
    (err) => ({ err }),
  );
  const tabs = document.getElementById("ws-tabs");
  mount(tabs);
  bindTabs(tabs);
  open(workspaceOf(location.search));
  const views = await loadViews();
  pageViews = views;
  store = createStore(reducer, initialState());
  for (const v of views) v.mod.bind?.(v.root, store);
  const rootOf = (name) => views.find((v) => v.name === name).root;
  bindDrawer(rootOf("controls"), rootOf("errors"));
  store.subscribe((s, prev) => draw(views, s, prev));
  placeErrors(store, rootOf("errors")); // the message beside the control a failed run names, once the views drew
  // each action that changed the state, named on the window as an "attnlab:action" event (detail: its type), for
  // whatever embeds or drives the page (the browser tests read which actions a control performed)
  store.subscribe((_s, _prev, a) => dispatchEvent(new CustomEvent("attnlab:action", { detail: a.type })));
  follow(store);
  // the views of the workspace opened, from the answers held: no action of the state, so no mark of one
  onOpen(() => draw(views, store.getState(), store.getState()));
  startEffects(store);
  const { models, err } = await asked;
  if (err) {
    const { describeError } = await import("./api.js");
    store.dispatch(act.modelsFailed(describeError(err)));
    return;
  }
  const listed = await withLinkedSnapshot(models, location.search); // a link to a training run's snapshot
  store.dispatch(act.modelsLoaded(listed));
  store.dispatch(act.restored(restoredUi(listed)));
}

// Whether views are held for plotly and the page has its first run's answer (or its failure) to draw, and no
// other run on its way: what askPlotly waits for.
function answered(s) {
  return plotly.held && s.run.want > 0 && s.run.status !== "loading" && s.run.answered === s.run.want;
}

// plotly's script asked for and run, once; the views held for it drawn when it is here.
function askPlotly() {
  if (plotly.asked) return;
  plotly.asked = true;
  const drawHeld = () => {
    plotly.ready = true;
    if (!plotly.held) return;
    plotly.wasInSight = plotly.inSight;
    plotly.held = plotly.inSight = false;
    draw(pageViews, store.getState(), null);
    plotly.wasInSight = null;
  };
  loadPlotly().then(drawHeld, (e) => {
    console.error(e.message); // the views that plot stay empty; every other view draws
    drawHeld();
  });
}

// The state a link names, on top of its model's defaults; the first model's defaults without one. A link to a model
// with no numbers of its own (it runs numbers typed in as x) opens the number editors' model with the link's numbers.
export function restoredUi(models) {
  const find = (name) => models.find((m) => m.name === name);
  const fromUrl = decodeState(location.search, (name) => optionsOf(find(name)));
  const named = fromUrl && find(fromUrl.model);
  const editor = models.find((m) => numbersOf(m) && offered(m));
  if (named && !offered(named) && editor) return { ...stateForModel(editor), matrices: fromUrl.matrices };
  if (named) {
    const base = stateForModel(named);
    const ui = { ...fromUrl, options: { ...base.options, ...fromUrl.options }, masks: fromUrl.masks ?? base.masks };
    if (!ui.text) ui.text = base.text;
    return ui;
  }
  return stateForModel(find("textbook") || models.find(offered) || models[0]);
}

init();
