// The lesson panel (data-panel="lesson"): /?lesson=ID opens one of lessons.js's guided tasks. It sets up the view
// the lesson names (as a link would), asks, checks the learner's answer against the live answer on screen, says
// "Correct." or what to look at, and shows the chapter's printed output (where attnlab knows it) beside attnlab's.
// The list links every lesson as ?lesson=ID, for a teacher to share. A lesson counts positions from 1, as the
// chapter does (it opens with Display · "Count positions from 1" on); while it is unanswered, what would give its
// answer away (its `hides`, giveaway.js GIVEAWAYS) is hidden by the view that shows it, in that view's own root; a
// touch device reads "tap" where a mouse reads "hover". A cell lesson takes a click on a cell of the
// large head or the eligibility grid as its answer (the cell is not blocked meanwhile); a head lesson takes a head
// opened from its card (the head still opens). Its setting, ui.lesson = {id, hides, picked, feedback, shown}, is in the
// link as `lesson=ID`. The panel's one declaration (`panel`, read by registry.js) on top of pure helpers.

import { act } from "./actions.js";
import { optionsOf } from "./capabilities.js";
import { node, within } from "./dom.js";
import { renderFigure } from "./lessonfigure.js";
import { touchWords } from "./lessonread.js";
import {
  LESSONS,
  attnlabValue,
  checkAnswer,
  lessonOf,
  liveAnswer,
  modelOfSetup,
  notReady,
  sampleAnswers,
  setupOf,
} from "./lessons.js";
import { decodeState, stateForModel } from "./state.js";
import { keptHidden } from "./giveaway.js";

const NAME = "lesson"; // the panel's name: its setting is ui.lesson, its link key `lesson`
const CLICK_SOURCES = ["focus-plot", "eligibility"]; // where a cell click answers a cell lesson

// Whether this device is touched rather than pointed at (no hover): its lessons say "tap".
function touchDevice() {
  return typeof matchMedia === "function" && matchMedia("(hover: none)").matches;
}

// The setting of a lesson just opened; null for an id no lesson has.
export function freshLesson(id) {
  const lesson = lessonOf(id);
  return lesson ? { id, hides: lesson.hides || [], picked: null, feedback: null, shown: false } : null;
}

// The page state a lesson opens: its link read on top of its model's defaults, as main.js reads a link, with the
// lesson open; null when this server does not serve the lesson's model.
export function lessonUi(models, lesson) {
  const find = (name) => models.find((m) => m.name === name);
  const ui = decodeState(`?${setupOf(lesson, models)}`, (name) => optionsOf(find(name)));
  const info = ui && find(ui.model);
  if (!info) return null;
  const base = stateForModel(info);
  const masks = ui.masks ?? base.masks;
  return {
    ...ui,
    text: ui.text || base.text,
    options: { ...base.options, ...ui.options },
    masks,
    from1: true,
    [NAME]: freshLesson(lesson.id),
  };
}

// An answer a click gives the open lesson, or null when the click is not one it asks for.
export function clickAnswer(lesson, a) {
  if (a.type === "cellToggled" && lesson.ask === "cell" && CLICK_SOURCES.includes(a.where)) return { q: a.q, k: a.k };
  if (a.type === "headOpened" && lesson.ask === "head") return { layer: a.layer, head: a.head };
  return null;
}

// What the store asks the panel of every action (store.js): a click the open lesson takes as its answer gives the
// lesson's new setting, checked at once; `only`: the action does nothing else (a cell answer blocks no cell).
export function take(a, value, s) {
  const lesson = value && lessonOf(value.id);
  const answer = lesson && clickAnswer(lesson, a);
  if (!answer) return null;
  return { value: { ...value, picked: answer, feedback: checkAnswer(lesson, answer, s) }, only: lesson.ask === "cell" };
}

// The picked answer in words.
export function pickedWords(lesson, picked, tokens = []) {
  if (lesson.ask === "cell")
    return picked
      ? `query “${tokens[picked.q] ?? picked.q + 1}” → key “${tokens[picked.k] ?? picked.k + 1}”`
      : "click a cell in the large head or the eligibility grid";
  if (lesson.ask === "head") return picked ? `layer ${picked.layer}, head ${picked.head}` : "click a head card";
  return "";
}

// The answer control for a lesson's kind: a number box, a menu of its choices, or a line saying what was clicked.
function answerControl(lesson) {
  if (lesson.ask === "number")
    return node("input", {
      id: "lesson-answer",
      type: "text",
      inputMode: "decimal",
      autocomplete: "off",
      spellcheck: false,
    });
  if (lesson.ask === "shape")
    return node("input", {
      id: "lesson-answer",
      type: "text",
      autocomplete: "off",
      spellcheck: false,
      placeholder: "e.g. 2 3 4",
    });
  if (lesson.ask === "choice") {
    const sel = node("select", { id: "lesson-answer" });
    sel.append(
      node("option", { value: "" }, "choose…"),
      ...lesson.choices.map(([v, words]) => node("option", { value: v }, words)),
    );
    return sel;
  }
  return node("output", { id: "lesson-answer" });
}

function renderLesson(root, value, s) {
  const part = within(root);
  const lesson = value && lessonOf(value.id);
  const touch = touchDevice();
  const words = (text) => touchWords(text, touch);
  part("lesson-task").hidden = !lesson;
  root.dataset.hides = keptHidden(s); // each view that shows one of them hides it in its own root (giveaway.js)
  renderFigure(part("lesson-figure"), lesson, s.models);
  for (const a of root.querySelectorAll("[data-lesson]"))
    a.toggleAttribute("aria-current", a.dataset.lesson === value?.id);
  if (!lesson) {
    root.dataset.lessonId = "";
    return;
  }
  if (root.dataset.lessonId !== lesson.id) {
    root.dataset.lessonId = lesson.id;
    part("lesson-name").textContent = lesson.title;
    part("lesson-prompt").textContent = words(lesson.prompt);
    part("lesson-note").textContent = words(lesson.note || "");
    part("lesson-note").hidden = !lesson.note;
    const control = answerControl(lesson);
    control.setAttribute("data-testid", "lesson-answer");
    control.setAttribute("aria-labelledby", "lesson-prompt");
    part("lesson-answer-slot").replaceChildren(control);
    part("lesson-link").href = `?lesson=${encodeURIComponent(lesson.id)}`;
    part("lesson-link").textContent = `?lesson=${lesson.id}`;
  }
  const wait = notReady(lesson, s);
  const served = !!lesson.live || s.models.some((m) => m.name === modelOfSetup(setupOf(lesson, s.models)));
  part("lesson-served").hidden = served || !s.models.length;
  part("lesson-served").textContent = served ? "" : `Not checked here: ${wait}`;
  if (lesson.ask === "cell" || lesson.ask === "head")
    part("lesson-answer").textContent = words(pickedWords(lesson, value.picked, s.run.result?.tokens));
  if (lesson.ask === "toggle") part("lesson-answer").textContent = "your change, made with the page's own controls";
  const fb = part("lesson-feedback");
  fb.textContent = value.feedback ? words(value.feedback.text) : "";
  fb.dataset.ok = value.feedback ? String(value.feedback.ok) : "";
  const shown = !!(value.feedback?.ok || value.shown);
  part("lesson-compare").hidden = !shown;
  if (shown) {
    part("lesson-chapter").textContent = lesson.chapter ?? "no printed output for this task";
    part("lesson-attnlab").textContent = attnlabValue(lesson, s) || "(once this view is computed)";
  }
}

// The answer the learner has given now: typed, chosen, clicked, or (a toggle) the page itself.
function answerOf(part, lesson, value) {
  if (lesson.ask === "number" || lesson.ask === "choice" || lesson.ask === "shape") return part("lesson-answer").value;
  if (lesson.ask === "toggle") return null;
  return value.picked;
}

function bind(root, store) {
  const part = within(root);
  const list = part("lesson-list");
  list.replaceChildren(
    ...LESSONS.flatMap((l, i) => {
      const a = node("a", { href: `?lesson=${encodeURIComponent(l.id)}` }, l.title);
      a.dataset.lesson = l.id;
      const li = node("li");
      li.append(a);
      // a group's heading (the training lessons') above its first lesson
      const heading = l.group && l.group !== LESSONS[i - 1]?.group;
      return heading ? [node("li", { className: "lesson-group" }, l.group), li] : [li];
    }),
  );
  const value = () => store.getState().ui[NAME];
  const open = (id) => {
    const s = store.getState();
    const ui = lessonUi(s.models, lessonOf(id));
    root.dataset.lessonId = "";
    store.dispatch(ui ? act.restored(ui) : act.panelSet(NAME, freshLesson(id)));
    part("lesson-task").scrollIntoView?.({ block: "nearest" });
  };
  list.addEventListener("click", (e) => {
    const a = e.target instanceof Element ? e.target.closest("a[data-lesson]") : null;
    if (!a || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return; // a new tab opens the link
    e.preventDefault();
    open(a.dataset.lesson);
  });
  const check = () => {
    const v = value();
    const lesson = v && lessonOf(v.id);
    if (lesson)
      store.dispatch(
        act.panelSet(NAME, { ...v, feedback: checkAnswer(lesson, answerOf(part, lesson, v), store.getState()) }),
      );
  };
  part("lesson-check").addEventListener("click", check);
  part("lesson-answer-slot").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && e.target instanceof HTMLInputElement) {
      e.preventDefault();
      check();
    }
  });
  part("lesson-reveal").addEventListener(
    "click",
    () => value() && store.dispatch(act.panelSet(NAME, { ...value(), shown: true })),
  );
  part("lesson-close").addEventListener("click", () => {
    store.dispatch(act.panelSet(NAME, null));
    store.dispatch(act.countSet(false)); // the lesson counted from 1; the page goes back to the API's count
  });
  // what a script (or a test) can ask of the open lesson: a right and a wrong answer from the live answer, a check
  root.lessonAnswers = () => {
    const lesson = value() && lessonOf(value().id);
    const r = lesson && liveAnswer(lesson, store.getState());
    return r ? sampleAnswers(lesson, r) : null;
  };
  root.lessonCheck = (answer) => {
    const lesson = value() && lessonOf(value().id);
    return lesson ? checkAnswer(lesson, answer, store.getState()) : null;
  };
  // a link that names only a lesson (?lesson=ID) opens its setup once the models are known; one whose model this
  // server does not serve opens the lesson over the defaults, saying so
  const params = new URLSearchParams(location.search);
  let wanted = lessonOf(params.get(NAME));
  const linked = params.has("m");
  store.subscribe((s, prev, a) => {
    if (!wanted || a?.type !== "restored") return;
    const lesson = wanted;
    wanted = null;
    const ui = linked ? null : lessonUi(s.models, lesson);
    if (ui) store.dispatch(act.restored(ui));
    else if (!s.ui[NAME]) store.dispatch(act.panelSet(NAME, freshLesson(lesson.id)));
  });
}

export const panel = {
  words: "the lesson",
  setting: { key: NAME, encode: (v) => v.id, decode: (raw) => freshLesson(raw), dropOnModel: false },
  request: () => null, // it asks nothing of its own: it checks the run on screen
  take,
  render: (root, value, s) => renderLesson(root, s.ui[NAME], s),
  deps: (s) => [
    s.run.result,
    s.run.status,
    s.run.answered,
    s.models,
    s.ui.model,
    s.ui.perturbOn,
    s.panels?.perturb?.result,
    s.trained, // what a training lesson reads (trainmeasures.js)
  ],
  bind,
};
