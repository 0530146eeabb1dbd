// The controls panel (the template's <aside data-view="controls">): the form shows ui, and every input dispatches
// one named action. Pure render from the state; bind() wires the inputs once.
//
// It looks its elements up in the whole document (its `$`), as the page's other page-level modules (main.js,
// workspaces.js, standalone.js) do and no view does: it is the page's form, whose fields the other parts of the page
// name by id (the drawer's toggle and scrim in the header, the field an error names: errors.js `placeFor`).

import { DEFAULT_ANSWER, examplesFor, exampleText } from "./examples.js";
import { act } from "./actions.js";
import { offered } from "./capabilities.js";
import { layerKindsLine, modelLabel, referenceLine } from "./modelinfo.js";
import { modelInfo } from "./selectors.js";
import { errorControls } from "./features.js";
import { scrollToAnswer } from "./reveal.js";

const $ = (id) => document.getElementById(id);

// Which control a field of an error names: the server's field path -> the element to mark (a page feature's field:
// the control its declaration names, features.js).
export const FIELD_CONTROLS = {
  ...errorControls(),
  text: "sequence-input",
  tokens: "sequence-input",
  model: "model-select",
  layer: "layer-select",
  include: "layer-select",
};

// The option fields of the template (the options fieldset's inputs, opt-NAME): {name: element}.
function optionFields() {
  return Object.fromEntries(
    [...document.querySelectorAll("#random-options [id^=opt-]")].map((el) => [el.id.slice(4), el]),
  );
}

// The control to mark for an error's field ("options.heads" -> "opt-heads"); null when none names it.
export function controlFor(field) {
  if (!field) return null;
  const option = /^options\.(\w+)/.exec(field);
  if (option) return document.getElementById(`opt-${option[1]}`) ? `opt-${option[1]}` : null;
  for (let f = field; f; f = f.includes(".") ? f.slice(0, f.lastIndexOf(".")) : "") {
    const bare = f.replace(/\[\d+\]/g, "");
    if (FIELD_CONTROLS[bare]) return FIELD_CONTROLS[bare];
    if (!f.includes(".")) break;
  }
  return null;
}

// Model menu labels: the current heads count for the model in use (random's heads are an option).
export function deps(s) {
  return [s.ui, s.models, s.draft, s.run.error, s.run.result];
}

export function render(root, s, dispatch) {
  const ui = s.ui;
  const m = modelInfo(s);
  fillModels(s);
  $("model-select").value = ui.model;
  $("model-description").textContent = m ? m.description : "";
  $("model-reference").textContent = referenceLine(m);
  $("model-reference").hidden = !$("model-reference").textContent;
  $("model-layers").textContent = layerKindsLine(m);
  $("model-layers").hidden = !$("model-layers").textContent;
  if (document.activeElement !== $("sequence-input")) $("sequence-input").value = s.draft.text;
  root.querySelectorAll("input[name=view]").forEach((r) => {
    r.checked = r.value === ui.view;
  });
  const fields = optionFields();
  $("random-options").hidden = !Object.keys(fields).some((k) => k in ui.options);
  // the box a failed run names keeps what the person typed (marked invalid, the message beside it) while the state,
  // the views and the link are back at the last run that worked
  const failed = s.run.error ? controlFor(s.run.error.field) || s.run.error.where : null;
  for (const [k, el] of Object.entries(fields)) {
    if (el.type === "checkbox") el.checked = !!ui.options[k];
    else if (el.id !== failed) el.value = ui.options[k] ?? "";
  }
  const layers = m ? m.layers : 1;
  const sel = $("layer-select");
  const want = [...Array.from({ length: layers }, (_, i) => String(i)), ...(layers > 1 ? ["all"] : [])];
  if ([...sel.options].map((o) => o.value).join() !== want.join()) {
    sel.replaceChildren(
      ...want.map((v) =>
        Object.assign(document.createElement("option"), {
          value: v,
          textContent: v === "all" ? "all layers" : `layer ${v}`,
        }),
      ),
    );
  }
  sel.value = String(ui.layer);
  sel.disabled = layers <= 1;
  markInvalid(root, s.run.error);
}

// aria-invalid on the control the last error names (or the one the person acted on), nowhere else (a box whose own
// check failed, data-local-error, keeps its mark until it is fixed).
function markInvalid(root, error) {
  const id = error
    ? controlFor(error.field) || (error.where && $(error.where) && root.contains($(error.where)) ? error.where : null)
    : null;
  for (const el of root.querySelectorAll("[aria-invalid=true]:not([data-local-error])"))
    if (el.id !== id) el.removeAttribute("aria-invalid");
  if (id && $(id)) {
    $(id).setAttribute("aria-invalid", "true");
    $(id).setAttribute("aria-errormessage", "error-message");
  }
}

function fillModels(s) {
  const sel = $("model-select");
  // a model with no example text needs numbers typed in as x: the page offers that through the number editors
  const models = s.models.filter(offered);
  const labels = models.map((m) => modelLabel(m, s.ui));
  if ([...sel.options].map((o) => o.textContent).join("\n") !== labels.join("\n")) {
    sel.replaceChildren(
      ...models.map((m, i) =>
        Object.assign(document.createElement("option"), { value: m.name, textContent: labels[i] }),
      ),
    );
  }
  const ex = $("example-select");
  const names = s.models.map((m) => m.name);
  const list = examplesFor(s.models);
  if (ex.options.length === 1 && s.models.length) {
    list.forEach((e, i) => {
      if (!names.includes(e.model)) return;
      if (
        e.repeat &&
        !exampleText(
          e,
          s.models.find((m) => m.name === e.model),
        )
      )
        return;
      ex.append(Object.assign(document.createElement("option"), { value: String(i), textContent: e.label }));
    });
  }
}

export function bind(root, store) {
  const { dispatch, getState } = store;
  const ui = () => getState().ui;
  $("run-form").addEventListener("submit", (e) => {
    e.preventDefault();
    dispatch(act.draftTyped("text", $("sequence-input").value));
    dispatch(act.sequenceSubmitted(e.submitter?.id === "run-button" ? "run-button" : "sequence-input"));
  });
  const box = $("sequence-input");
  box.addEventListener("input", (e) => dispatch(act.draftTyped("text", e.target.value)));
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $("run-form").requestSubmit();
    }
  });
  $("model-select").addEventListener("change", (e) => dispatch(act.modelChosen(e.target.value, "model-select")));
  $("example-select").addEventListener("change", (e) => {
    const s = getState();
    const ex = examplesFor(s.models)[Number(e.target.value)];
    e.target.value = "";
    if (!ex) return;
    scrollToAnswer(ex.answer || DEFAULT_ANSWER); // the example opens scrolled to its answer (reveal.js)
    dispatch(act.exampleChosen(ex, exampleText(ex, modelInfo(s, ex.model))));
  });
  root
    .querySelectorAll("input[name=view]")
    .forEach((r) => r.addEventListener("change", () => dispatch(act.viewSet(r.value))));
  $("layer-select").addEventListener("change", (e) =>
    dispatch(act.layerSet(e.target.value === "all" ? "all" : Number(e.target.value))),
  );
  for (const [k, el] of Object.entries(optionFields())) {
    el.addEventListener("change", () => {
      let v;
      if (el.type === "checkbox") v = el.checked;
      else {
        // an emptied box: the model's default where that is none (kv_heads: as many as heads), else the last value
        const n = Number.parseInt(el.value, 10);
        const model = modelInfo(getState());
        v = Number.isFinite(n) ? n : model?.options?.[k] === null ? null : ui().options[k];
      }
      dispatch(act.optionSet(k, v));
    });
  }
  $("copy-link").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(location.href);
      $("share-status").textContent = "Link copied: it opens this exact view.";
    } catch {
      $("share-status").textContent = `Copy this link: ${location.href}`;
    }
  });
  // the PNG, JSON, NPZ and HTML downloads are the exporter view's (exporter.js)
  bindDrawer(root);
}

// The drawer on a narrow screen (the CSS's NARROW): the button opens the controls over the views as a modal panel.
// While it is open the rest of the page is inert (focus stays inside, a tap there does not reach it); it closes by
// its ✕ button, a tap on the scrim beside it, Escape, or once an example is picked or Run pressed, and focus goes back
// to the button that opened it.
export const NARROW = "(max-width: 900px)";
const OUTSIDE_DRAWER = [".top", "#views"]; // inert while the drawer is open (the live regions stay heard)

export function bindDrawer(root) {
  const toggle = $("controls-toggle");
  const scrim = $("drawer-scrim");
  const narrow = window.matchMedia(NARROW);
  const isOpen = () => document.body.classList.contains("drawer-open");
  const setOpen = (open, { returnFocus = true } = {}) => {
    if (open === isOpen()) return;
    document.body.classList.toggle("drawer-open", open);
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
    root.setAttribute("aria-modal", open ? "true" : "false");
    root.setAttribute("role", open ? "dialog" : "complementary");
    scrim.hidden = !open;
    for (const sel of OUTSIDE_DRAWER) document.querySelector(sel)?.toggleAttribute("inert", open);
    if (open) $("model-select").focus();
    else if (returnFocus && (root.contains(document.activeElement) || document.activeElement === document.body))
      toggle.focus({ preventScroll: true }); // the answer stays in view
  };
  toggle.addEventListener("click", () => setOpen(!isOpen()));
  $("controls-close").addEventListener("click", () => setOpen(false));
  scrim.addEventListener("click", () => setOpen(false));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && isOpen()) {
      e.preventDefault();
      setOpen(false);
    }
  });
  // what the person came for is on the views: an example picked or Run pressed closes the drawer over them
  $("example-select").addEventListener("change", () => setOpen(false));
  $("run-form").addEventListener("submit", () => setOpen(false));
  // wide again (a phone turned, a window widened): no drawer, nothing left inert
  narrow.addEventListener("change", () => {
    if (!narrow.matches) setOpen(false, { returnFocus: false });
  });
  // focus that leaves the drawer by Tab (inert keeps it out of the page; the browser's own bar is beyond) wraps
  root.addEventListener("keydown", (e) => {
    if (e.key !== "Tab" || !isOpen()) return;
    const stops = [...root.querySelectorAll("button, select, textarea, input, summary, a[href]")].filter(
      (el) =>
        !el.disabled && el.getClientRects().length && !el.closest("[hidden], details:not([open]) > :not(summary)"),
    );
    if (!stops.length) return;
    const first = stops[0];
    const last = stops[stops.length - 1];
    if (e.shiftKey && document.activeElement === first) {
      e.preventDefault();
      last.focus();
    } else if (!e.shiftKey && document.activeElement === last) {
      e.preventDefault();
      first.focus();
    }
  });
}
