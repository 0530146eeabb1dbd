// The controls panel (the template's <aside data-view="controls">): the form shows ui, and every input dispatches
// one named action. Pure render from the state; bind() wires the inputs once. It looks its elements up inside its
// root (dom.js `within`), as every view does; the drawer it becomes on a phone (its toggle and scrim are in the
// header) is the page's (drawer.js), and so is the message a failed run puts beside one of its fields
// (actionerror.js, which asks `controlFor` which field that is).

import { DEFAULT_ANSWER, examplesFor, exampleText } from "./examples.js";
import { act } from "./actions.js";
import { offered } from "./capabilities.js";
import { layerKindsLine, modelLabel, referenceLine } from "./modelinfo.js";
import { modelInfo } from "./selectors.js";
import { errorControls } from "./features.js";
import { within } from "./dom.js";
import { scrollToAnswer } from "./reveal.js";

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

// The option fields of the template (the options fieldset's inputs, opt-NAME) in `root`: {name: element}.
function optionFields(root) {
  return Object.fromEntries([...root.querySelectorAll("#random-options [id^=opt-]")].map((el) => [el.id.slice(4), el]));
}

// The control to mark for an error's field ("options.heads" -> "opt-heads", when `root` holds it); null when none
// names it.
export function controlFor(field, root) {
  if (!field) return null;
  const option = /^options\.(\w+)/.exec(field);
  if (option) return within(root)(`opt-${option[1]}`) ? `opt-${option[1]}` : null;
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
  const part = within(root);
  const ui = s.ui;
  const m = modelInfo(s);
  fillModels(s, part);
  part("model-select").value = ui.model;
  part("model-description").textContent = m ? m.description : "";
  part("model-reference").textContent = referenceLine(m);
  part("model-reference").hidden = !part("model-reference").textContent;
  part("model-layers").textContent = layerKindsLine(m);
  part("model-layers").hidden = !part("model-layers").textContent;
  if (document.activeElement !== part("sequence-input")) part("sequence-input").value = s.draft.text;
  root.querySelectorAll("input[name=view]").forEach((r) => {
    r.checked = r.value === ui.view;
  });
  const fields = optionFields(root);
  part("random-options").hidden = !Object.keys(fields).some((k) => k in ui.options);
  // the box a failed run names keeps what the person typed (marked invalid, the message beside it) while the state,
  // the views and the link are back at the last run that worked
  const failed = s.run.error ? controlFor(s.run.error.field, root) || s.run.error.where : null;
  for (const [k, el] of Object.entries(fields)) {
    if (el.type === "checkbox") el.checked = !!ui.options[k];
    else if (el.id !== failed) el.value = ui.options[k] ?? "";
  }
  const layers = m ? m.layers : 1;
  const sel = part("layer-select");
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
  const part = within(root);
  const id = error ? controlFor(error.field, root) || (error.where && part(error.where) ? error.where : null) : null;
  for (const el of root.querySelectorAll("[aria-invalid=true]:not([data-local-error])"))
    if (el.id !== id) el.removeAttribute("aria-invalid");
  if (id && part(id)) {
    part(id).setAttribute("aria-invalid", "true");
    part(id).setAttribute("aria-errormessage", "error-message");
  }
}

function fillModels(s, part) {
  const sel = part("model-select");
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
  const ex = part("example-select");
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
  const part = within(root);
  const { dispatch, getState } = store;
  const ui = () => getState().ui;
  part("run-form").addEventListener("submit", (e) => {
    e.preventDefault();
    dispatch(act.draftTyped("text", part("sequence-input").value));
    dispatch(act.sequenceSubmitted(e.submitter?.id === "run-button" ? "run-button" : "sequence-input"));
  });
  const box = part("sequence-input");
  box.addEventListener("input", (e) => dispatch(act.draftTyped("text", e.target.value)));
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      part("run-form").requestSubmit();
    }
  });
  part("model-select").addEventListener("change", (e) => dispatch(act.modelChosen(e.target.value, "model-select")));
  part("example-select").addEventListener("change", (e) => {
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
  part("layer-select").addEventListener("change", (e) =>
    dispatch(act.layerSet(e.target.value === "all" ? "all" : Number(e.target.value))),
  );
  for (const [k, el] of Object.entries(optionFields(root))) {
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
  part("copy-link").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(location.href);
      part("share-status").textContent = "Link copied: it opens this exact view.";
    } catch {
      part("share-status").textContent = `Copy this link: ${location.href}`;
    }
  });
  // the PNG, JSON, NPZ and HTML downloads are the exporter view's (exporter.js)
}
