// A failed run, told once (data-view="errors" on the banner): the message sits where the person acted, at the top of
// that panel or under that control, and the control the error names is marked (controls.js). The banner is the one
// live region (role="alert") that reads it out: visually hidden while that message is on screen, and otherwise (a
// failure nobody's control caused, or one whose control is in the closed drawer on a phone: attnlab.css) a line
// floating at the foot of the screen. It never sits in the flow, so an error does not push the page down. The state was already
// rolled back by the store.
//
// This view draws the banner, its root, and nothing else. The message beside the control is the page's
// (actionerror.js, which main.js runs after the views drew: it looks the control up in the document and says on the
// banner where the message went), and so is the banner's "Show in the controls", which opens the drawer (drawer.js).

import { act } from "./actions.js";

export function deps(s) {
  return [s.run.error];
}

export function render(root, s) {
  const e = s.run.error;
  root.hidden = !e;
  root.dataset.code = e ? e.code : "";
  root.querySelector("[data-role=message]").textContent = e ? e.message : "";
  root.querySelector("[data-role=hint]").textContent = e ? e.hint : "";
}

export function bind(root, store) {
  root.querySelector("[data-role=dismiss]").addEventListener("click", () => store.dispatch(act.errorDismissed()));
}
