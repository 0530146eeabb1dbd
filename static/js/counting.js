// The "Count positions from 1" control of Display (the template's <div data-view="counting">): every position the
// page prints, and every position a person types, counts from 1 as the chapter does (positions.js). Pure render from
// the state; bind() wires the checkbox.

import { act } from "./actions.js";

export function deps(s) {
  return [s.ui.from1];
}

export function render(root, s) {
  root.querySelector("#count-from1").checked = !!s.ui.from1;
}

export function bind(root, { dispatch }) {
  root.querySelector("#count-from1").addEventListener("change", (e) => dispatch(act.countSet(e.target.checked)));
}
