// The cross-attention source and the batch boxes (the template's <details data-view="moreinputs">): their text as
// typed (the store's draft), whether the model takes them, and what they do. Typing keeps the text in the draft;
// leaving a changed box runs it; Ctrl+Enter runs as the sequence box does (the form the boxes sit in). Their
// settings, link keys, actions and the body they shape are sourcebatch.js's declaration.

import { act } from "./actions.js";
import { can, namesThat } from "./capabilities.js";
import { modelInfo } from "./selectors.js";
import { batchOf, sourceOf } from "./sourcebatch.js";
import { within } from "./dom.js";

const BOXES = [
  ["source-input", "source"],
  ["batch-input", "batch"],
];

export function deps(s) {
  return [s.ui, s.models, s.draft];
}

export function render(root, s) {
  const part = within(root);
  for (const [id, field] of BOXES) if (document.activeElement !== part(id)) part(id).value = s.draft[field];
  const m = modelInfo(s);
  const canSource = can(m, "cross_attention");
  const canBatch = can(m, "batches");
  const batch = batchOf(s.ui, m);
  const source = sourceOf(s.ui, m);
  part("source-help").textContent = !canSource
    ? `Cross-attention takes its keys and values from a second sequence: on ${namesThat(s.models, "cross_attention").join(", ") || "no model"} here.`
    : batch
      ? "The batch below wins while it has text."
      : source
        ? "Queries come from the sequence above, keys and values from this one: every head is S_q × S_k."
        : "Keys and values from this text instead of the sequence: cross-attention.";
  part("batch-help").textContent = !canBatch
    ? `A batch runs on ${namesThat(s.models, "batches").join(", ") || "no model"}.`
    : batch
      ? `${batch.length} text${batch.length === 1 ? "" : "s"}, padded to the longest; the sequence above is not used.`
      : "Each line one text; they are padded to the longest and run together.";
  part("source-input").setAttribute("aria-disabled", canSource ? "false" : "true");
  part("batch-input").setAttribute("aria-disabled", canBatch ? "false" : "true");
  if (batch || source) root.open = true;
}

export function bind(root, { dispatch }) {
  const part = within(root);
  for (const [id, field] of BOXES) {
    const box = part(id);
    box.addEventListener("input", (e) => dispatch(act.draftTyped(field, e.target.value)));
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        box.form?.requestSubmit(); // the run form the boxes sit in (none for a copy drawn elsewhere)
      }
    });
    box.addEventListener("change", () => dispatch(act.sourceChanged(id)));
  }
}
