// The controls as a drawer on a narrow screen (the CSS's NARROW): the header's button opens them over the views as a
// modal panel. While it is open the rest of the page is inert (focus stays inside, a tap there does not reach it); it
// closes by its ✕ button, a tap on the scrim beside it, Escape, or once an example is picked or Run pressed, and
// focus goes back to the button that opened it. The error banner's "Show in the controls" opens it at the message a failed
// run put beside one of its fields (actionerror.js).
//
// It is the page's, not a view's: main.js binds it once with the controls' root and the banner's; the button and the
// scrim sit in the page outside both, and what it makes inert is the rest of the page, so it looks those up in the
// document, as main.js and workspaces.js do.

import { within } from "./dom.js";

export const NARROW = "(max-width: 900px)";
const OUTSIDE_DRAWER = [".top", "#views"]; // inert while the drawer is open (the live regions stay heard)

export function bindDrawer(root, banner) {
  const part = within(root);
  const toggle = document.getElementById("controls-toggle");
  const scrim = document.getElementById("drawer-scrim");
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
    if (open) part("model-select").focus();
    else if (returnFocus && (root.contains(document.activeElement) || document.activeElement === document.body))
      toggle.focus({ preventScroll: true }); // the answer stays in view
  };
  toggle.addEventListener("click", () => setOpen(!isOpen()));
  part("controls-close").addEventListener("click", () => setOpen(false));
  scrim.addEventListener("click", () => setOpen(false));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && isOpen()) {
      e.preventDefault();
      setOpen(false);
    }
  });
  // what the person came for is on the views: an example picked or Run pressed closes the drawer over them
  part("example-select").addEventListener("change", () => setOpen(false));
  part("run-form").addEventListener("submit", () => setOpen(false));
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
  // the failed run's message is beside a field in the closed drawer: open it there
  banner.querySelector("[data-role=show]").addEventListener("click", () => {
    toggle.click();
    part("action-error")?.scrollIntoView({ block: "nearest" });
  });
}
