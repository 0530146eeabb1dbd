// The "Hide sinks" control of Display (the template's <div data-view="sinks">): which key columns every map hides
// (none, the first token, the special tokens the tokenizer added, or positions typed in) and whether each row is
// renormalised over the keys left. The server does the hiding (the `sinks` body field, requests.js); a choice it
// refuses (a model that adds no special tokens, a position past the keys) comes back as its 422, shown at the
// control by the error banner (controls.js FIELD_CONTROLS). Pure render from the state; bind() wires the inputs.

import { act } from "./actions.js";
import { parseSinks } from "./state.js";
import { firstPosition, pos, typedPos } from "./positions.js";
import { within } from "./dom.js";

// The select's value for a state's sinks: "none" | "first" | "special" | "positions".
export function sinksChoice(sinks) {
  return sinks == null ? "none" : Array.isArray(sinks) ? "positions" : sinks;
}

// What the maps hide, in words, from the server's answer (`sinks` {hidden, renormalised}, null without sinks).
export function sinksLine(answer, tokens = []) {
  if (!answer) return "";
  const keys = Array.from(answer.hidden, (k) => (tokens[k] != null ? `${pos(k)} “${tokens[k]}”` : String(pos(k))));
  const n = keys.length;
  return `Hiding key${n === 1 ? "" : "s"} ${keys.join(", ") || "none"}${answer.renormalised ? ", each row renormalised over the rest" : " (rows not renormalised)"}.`;
}

export function deps(s) {
  return [s.ui.sinks, s.ui.renorm, s.run.result];
}

export function render(root, s) {
  const part = within(root);
  const choice = sinksChoice(s.ui.sinks);
  if (document.activeElement !== part("sinks-select")) part("sinks-select").value = choice;
  const box = part("sinks-positions");
  box.hidden = choice !== "positions" && document.activeElement !== box && !box.dataset.open;
  if (Array.isArray(s.ui.sinks) && document.activeElement !== box) box.value = s.ui.sinks.map(pos).join(",");
  box.placeholder = [0, 3].map(pos).join(",");
  part("sinks-renorm").checked = s.ui.renorm;
  part("sinks-renorm").disabled = choice === "none" && !box.dataset.open;
  const r = s.run.result;
  part("sinks-shown").textContent = sinksLine(r?.sinks, r?.source_tokens || r?.tokens);
}

export function bind(root, { dispatch, getState }) {
  const part = within(root);
  const box = part("sinks-positions");
  const error = part("sinks-error");
  const say = (text) => {
    error.textContent = text;
    error.hidden = !text;
    if (text) box.setAttribute("aria-invalid", "true");
    else box.removeAttribute("aria-invalid");
  };
  const send = (sinks) => dispatch(act.sinksSet(sinks, getState().ui.renorm, "sinks-select"));
  const fromBox = () => {
    // typed in the count shown (positions.js): from 1, "1,4" is the API's [0, 3]
    const typed = parseSinks(box.value);
    const first = firstPosition();
    if (!typed || typed[0] < first) {
      const eg = [0, 3].map(pos).join(",");
      say(`Key positions as whole numbers from ${first} with commas, e.g. ${eg} (got “${box.value}”).`);
      return;
    }
    const sinks = typed.map(typedPos);
    say("");
    delete box.dataset.open;
    send(sinks);
  };
  part("sinks-select").addEventListener("change", (e) => {
    const v = e.target.value;
    say("");
    if (v === "positions") {
      // the positions wait for the box: typed, then Enter or leaving it sends them
      box.dataset.open = "1";
      box.hidden = false;
      box.focus();
      if (box.value.trim()) fromBox();
      return;
    }
    delete box.dataset.open;
    send(v === "none" ? null : v);
  });
  box.addEventListener("change", fromBox);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      fromBox();
    }
  });
  part("sinks-renorm").addEventListener("change", (e) => {
    const ui = getState().ui;
    if (ui.sinks) dispatch(act.sinksSet(ui.sinks, e.target.checked, "sinks-renorm"));
  });
}
