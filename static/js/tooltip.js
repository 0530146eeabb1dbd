// The page's one tooltip: lines of text beside the pointer, over every view and in none of them (the template's
// #tooltip, the exported file's, or the one in the shadow root a notebook widget draws in: the root of the element
// under the pointer). It is the page's, so it looks the tooltip up in that root; a view (heads.js) shows its lines
// through it and looks nothing up outside its own root.

import { node } from "./dom.js";

// The tooltip of the document, or of the shadow root, that `event` happened in.
function tooltipOf(event) {
  const root = event && event.target && event.target.getRootNode ? event.target.getRootNode() : document;
  return (root.getElementById ? root : document).getElementById("tooltip");
}

// `lines` (one <div> each) in the tooltip beside `event`'s pointer; hidden when `lines` is null.
export function showTip(lines, event) {
  const tip = tooltipOf(event);
  tip.hidden = !lines;
  if (!lines) return;
  tip.replaceChildren(...lines.map((l) => node("div", {}, l)));
  const x = Math.min(window.innerWidth - 300, event.clientX + 14);
  tip.style.left = `${Math.max(0, x) + window.scrollX}px`;
  tip.style.top = `${event.clientY + window.scrollY + 14}px`;
}
