// A failed run, told once (data-view="errors" on the banner): the message sits where the person acted, at the top of
// that panel or under that control, and the control the error names is marked (controls.js). The banner is the one
// live region (role="alert") that reads it out: visually hidden while that message is on screen, and otherwise (a
// failure nobody's control caused, or one whose control is in the closed drawer on a phone: attnlab.css) a line
// floating at the foot of the screen. It never sits in the flow, so an error does not push the page down. The state was already
// rolled back by the store.
//
// Being about the whole page, it looks elements up in the document, as no view does: the control an error names (by
// id), the messages it placed there before, and the drawer's toggle.

import { controlFor } from "./controls.js";
import { node } from "./dom.js";
import { act } from "./actions.js";

const $ = (id) => document.getElementById(id);

export function deps(s) {
  return [s.run.error];
}

// Where the message about an action done at `where` (an element id) goes: {parent, after}, or null. A control in a
// grid of fields (the random layer's heads, width, ...) has its message under the grid, not in a cell of it.
export function placeFor(where) {
  const el = where ? $(where) : null;
  if (!el) return null;
  const panel = el.closest(".panel");
  const head = panel ? panel.querySelector(":scope > .panel-head") : null;
  if (head) return { parent: panel, after: head };
  let anchor = el.closest("label, .row, fieldset, .seg, details") || el;
  if (anchor.parentElement?.classList.contains("grid2")) anchor = anchor.parentElement;
  return { parent: anchor.parentElement, after: anchor };
}

// Whether a message placed there can be seen now: not inside the controls while they are a closed drawer.
export function canSee(place) {
  const drawer = place.parent.closest("#controls");
  return !drawer || getComputedStyle(drawer).visibility !== "hidden";
}

export function render(root, s) {
  const e = s.run.error;
  for (const old of document.querySelectorAll(".act-error")) old.remove();
  root.hidden = !e;
  root.dataset.code = e ? e.code : "";
  root.querySelector("[data-role=message]").textContent = e ? e.message : "";
  root.querySelector("[data-role=hint]").textContent = e ? e.hint : "";
  if (!e) return;
  const place = placeFor(e.where) || placeFor(controlFor(e.field));
  // the CSS floats the line when there is no place, or while the place is in the closed drawer
  root.dataset.place = place ? "beside" : "alone";
  root.dataset.drawer = place && place.parent.closest("#controls") ? "true" : "false";
  if (!place) return;
  const box = node("div", { className: "act-error", id: "action-error" });
  box.setAttribute("data-testid", "action-error");
  box.append(
    node("strong", {}, e.action ? `“${e.action}” did not run. ` : "That did not run. "),
    node("span", {}, /[.!?]$/.test(e.message) ? e.message : `${e.message}.`),
    node("span", { className: "hint" }, ` ${e.hint}`),
    node("span", { className: "muted small" }, " The page is back at the last run that worked."),
  );
  place.after.after(box);
  if (!canSee(place)) return;
  // on screen where the person is: scrolled to only when it landed outside the view
  const r = box.getBoundingClientRect();
  if (r.top < 0 || r.bottom > window.innerHeight) box.scrollIntoView({ block: "nearest" });
}

export function bind(root, store) {
  root.querySelector("[data-role=dismiss]").addEventListener("click", () => store.dispatch(act.errorDismissed()));
  // the message is beside a control in the closed drawer: open it there
  root.querySelector("[data-role=show]").addEventListener("click", () => {
    $("controls-toggle").click();
    $("action-error")?.scrollIntoView({ block: "nearest" });
  });
}
