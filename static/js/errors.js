// A failed run, told where it matters (data-view="errors" on the banner): the banner at the top is the live region
// (role="alert"); the same message sits where the person acted, at the top of that panel or under that control;
// the control the error names is marked (controls.js). The state was already rolled back by the store.

import { node } from "./dom.js";
import { act } from "./store.js";

const $ = (id) => document.getElementById(id);

export function deps(s) {
  return [s.run.error];
}

// Where the message about an action done at `where` (an element id) goes: {parent, after}, or null.
export function placeFor(where) {
  const el = where ? $(where) : null;
  if (!el) return null;
  const panel = el.closest(".panel");
  const head = panel ? panel.querySelector(":scope > .panel-head") : null;
  if (head) return { parent: panel, after: head };
  const anchor = el.closest("label, .row, fieldset, .seg, details") || el;
  return { parent: anchor.parentElement, after: anchor };
}

export function render(root, s) {
  const e = s.run.error;
  for (const old of document.querySelectorAll(".act-error")) old.remove();
  root.hidden = !e;
  root.dataset.code = e ? e.code : "";
  root.querySelector("[data-role=message]").textContent = e ? e.message : "";
  root.querySelector("[data-role=hint]").textContent = e ? e.hint : "";
  if (!e) return;
  const place = placeFor(e.where);
  if (!place) return;
  const box = node("div", { className: "act-error", id: "action-error" });
  box.setAttribute("data-testid", "action-error");
  box.append(
    node("strong", {}, e.action ? `“${e.action}” did not run. ` : "That did not run. "),
    node("span", {}, e.message),
    node("span", { className: "hint" }, ` ${e.hint}`),
    node("span", { className: "muted small" }, " The page is back at the last run that worked."),
  );
  place.after.after(box);
  // on screen where the person is: scrolled to only when it landed outside the view
  const r = box.getBoundingClientRect();
  if (r.top < 0 || r.bottom > window.innerHeight) box.scrollIntoView({ block: "nearest" });
}

export function bind(root, store) {
  root.querySelector("[data-role=dismiss]").addEventListener("click", () => store.dispatch(act.errorDismissed()));
}
