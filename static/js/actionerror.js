// A failed run's message where the person acted (errors.js draws the banner that reads it out): at the top of the
// panel that holds the control, or under the control (a control in a grid of fields, the random layer's heads,
// width, ..., under the grid), with the banner told where it went (data-place: beside a control, or alone, floated by
// the CSS; data-drawer: beside a control in the controls, a closed drawer on a phone). The control is the one the
// person acted on (the error's `where`), else the one its field names (controls.js controlFor).
//
// The message has its own ✕, which dismisses the error as the banner's does: beside a control the banner is only the
// live region, visually hidden with its ✕ (screens.css), so without one here the person could not put the message
// away where they read it (at 1440 px, or in the open drawer on a phone).
//
// It is the page's, as main.js's marks of a run on its way or failed are: the control may be in any view, so it looks
// it up in the document, and the messages it placed there before. main.js subscribes it after the views' draw.

import { act } from "./actions.js";
import { controlFor } from "./controls.js";
import { node } from "./dom.js";

// Where the message about an action done at `where` (an element id) goes: {parent, after}, or null.
export function placeFor(where) {
  const el = where ? document.getElementById(where) : null;
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

// The message of error `e` (none when null) in place of the one placed before, and `banner` told where it went; its ✕
// calls `dismiss`.
export function placeError(banner, e, dismiss) {
  for (const old of document.querySelectorAll(".act-error")) old.remove();
  if (!e) return;
  const where = e.where && document.getElementById(e.where) ? e.where : controlFor(e.field, document);
  const place = placeFor(where);
  // the CSS floats the line when there is no place, or while the place is in the closed drawer
  banner.dataset.place = place ? "beside" : "alone";
  banner.dataset.drawer = place && place.parent.closest("#controls") ? "true" : "false";
  if (!place) return;
  const box = node("div", { className: "act-error", id: "action-error" });
  box.setAttribute("data-testid", "action-error");
  const close = node("button", { type: "button", className: "act-error-dismiss" }, "✕");
  close.setAttribute("aria-label", "Dismiss the error");
  close.setAttribute("data-testid", "action-error-dismiss");
  close.addEventListener("click", () => dismiss(where));
  box.append(
    close,
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

// Each new error (or none) of `store`'s run placed, after the views have drawn it. Its ✕ dismisses the error, and
// focus, which was on the ✕ the message took away with it, goes back to the control the message was about.
export function placeErrors(store, banner) {
  const dismiss = (where) => {
    store.dispatch(act.errorDismissed());
    document.getElementById(where)?.focus();
  };
  store.subscribe((s, prev) => {
    if (s.run.error !== prev.run.error) placeError(banner, s.run.error, dismiss);
  });
}
