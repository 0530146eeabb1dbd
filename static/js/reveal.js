// Bringing a panel of the views into sight: the start path's steps (start.js), its row of jumps to every panel, and an
// example picked from the examples menu (controls.js) each open the workspace that holds their panel and scroll to
// it, and keep it in sight while the page above it settles (the views drawn by the run they asked move it).
//
// It is the page's, as workspaces.js is: it looks the panels up in the document by their selector (a view's or a
// panel's element, or an id inside one), and lists the views' panels for the jump row.

import { openHolding, steer } from "./workspaces.js";

export const FOLLOW_MS = 15000; // how long a scroll keeps its panel in sight while the page above it settles

// The panel a selector names: the element's own panel section, or the element.
export function panelOf(selector) {
  const el = document.querySelector(selector);
  return el ? el.closest("section.panel") || el : null;
}

// A panel's name for the jump row: its heading's leading words, before any ":" or "·" the view adds.
export function panelName(section) {
  const h = section.querySelector("h2");
  if (!h) return "";
  const first = [...h.childNodes].find((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
  return (first ? first.textContent : h.textContent).split(/[:·]/)[0].trim();
}

// The views' panels (their section.panel elements, in the template's order, the start path's own left out), each as
// {selector, name} for the start path's row of jumps; a panel with no id is given one.
export function jumpTargets() {
  const sections = [...document.querySelectorAll("#views section.panel")].filter((p) => !p.closest(".start"));
  return sections.map((section, i) => {
    if (!section.id) section.id = `panel-${i}`;
    return { selector: `#${section.id}`, name: panelName(section) || `Panel ${i + 1}` };
  });
}

// Whether the panel `selector` names is there and shown (its workspace may be closed: a jump opens it).
export function panelShown(selector) {
  const panel = panelOf(selector);
  return !!panel && !panel.hidden && !panel.closest("[hidden]:not([data-workspace])");
}

let stopFollowing = () => {};

// Bring the panel `selector` names into sight now, and again whenever the page redraws or changes height above it,
// until the person scrolls (or anything but this scrolls the page), types or presses, or FOLLOW_MS passes.
export function scrollToAnswer(selector) {
  stopFollowing();
  openHolding(panelOf(selector)); // its workspace first, a new history entry
  steer(true);
  let aimed = null; // the scroll position this put the page at, and where the panel's top landed
  let landed = 0;
  const go = () => {
    const panel = panelOf(selector);
    if (!panel || !panel.getClientRects().length) return;
    panel.scrollIntoView({ block: "start" });
    aimed = window.scrollY;
    landed = panel.getBoundingClientRect().top;
  };
  // a scroll that keeps the panel where it landed, or one to the page's end (the page got shorter under it), is the
  // page's; any other is the person's, or another view's
  const moved = () => {
    if (aimed == null || Math.abs(window.scrollY - aimed) <= 2) return;
    const top = panelOf(selector)?.getBoundingClientRect().top;
    const end = document.documentElement.scrollHeight - window.innerHeight;
    if ((top != null && Math.abs(top - landed) <= 2) || window.scrollY >= end - 2) aimed = window.scrollY;
    else stop();
  };
  // while it follows, this aims, not the browser's scroll anchoring (which holds whatever element it picked)
  document.documentElement.style.overflowAnchor = "none";
  const resized = new ResizeObserver(go);
  resized.observe(document.getElementById("views"));
  const drawn = new PerformanceObserver((list) => {
    if (list.getEntriesByName("attnlab:drawn").length) go();
  });
  drawn.observe({ type: "mark" });
  const events = ["wheel", "touchstart", "keydown", "pointerdown"];
  const stop = () => {
    resized.disconnect();
    drawn.disconnect();
    clearTimeout(timer);
    for (const e of events) window.removeEventListener(e, stop, true);
    window.removeEventListener("scroll", moved);
    document.documentElement.style.overflowAnchor = "";
    steer(false);
    stopFollowing = () => {};
  };
  const timer = setTimeout(stop, FOLLOW_MS);
  for (const e of events) window.addEventListener(e, stop, true);
  window.addEventListener("scroll", moved, { passive: true });
  stopFollowing = stop;
  go();
}
