// The mask controls (the template's <div data-view="maskcontrols">, maskcontrols.html): causal, a sliding window, the
// blocked cells' count and their Clear button, and the eligible pairs each mask leaves. Each control dispatches one
// of the masks' actions, whose declaration (setting, link keys, reducer cases, body field) is masks.js `feature`.
// A token marked padding and a cell blocked are the tokens' and the grids' (tokens.js, eligibility.js, focus.js).

import { act } from "./actions.js";
import { pairLines } from "./masks.js";
import { modelInfo } from "./selectors.js";
import { batchOf, sourceOf } from "./sourcebatch.js";
import { markGiveaways } from "./giveaway.js";
import { within } from "./dom.js";

export function deps(s) {
  return [s.ui, s.models, s.run.result];
}

export function render(root, s) {
  const part = within(root);
  const masks = s.ui.masks;
  part("mask-causal").checked = masks.causal;
  part("mask-window-on").checked = masks.window != null;
  if (masks.window != null && document.activeElement !== part("mask-window"))
    part("mask-window").value = String(masks.window);
  const n = masks.blocked.length;
  part("blocked-count").textContent = n ? `${n} cell${n === 1 ? "" : "s"} blocked` : "no cells blocked";
  part("blocked-clear").disabled = n === 0;
  // causal, a window and padding compare positions of one sequence: a source leaves them out; a batch pads itself
  const m = modelInfo(s);
  const batch = batchOf(s.ui, m);
  const source = sourceOf(s.ui, m);
  const note = part("mask-note");
  note.hidden = !(batch || source);
  note.textContent = source
    ? "With a source, only blocked cells and the source's padding apply: causal and window compare positions of one sequence."
    : batch
      ? "In a batch each item's padding comes from its length; causal, window and blocked cells apply to every item."
      : "";
  for (const id of ["mask-causal", "mask-window-on", "mask-window"]) part(id).disabled = !!source;
  renderPairs(part("pair-counts"), s.run.result?.pairs);
  markGiveaways(root, s, ["pairs"]); // an open lesson that asks for a count keeps them out of sight
}

// The eligible-pair counts beside the mask controls; hidden when the result has none (a batch, a source).
export function renderPairs(el, pairs) {
  const lines = pairLines(pairs);
  el.hidden = !lines.length;
  el.replaceChildren(
    ...lines.map((l) => {
      const li = document.createElement("li");
      li.dataset.mask = l.name;
      li.dataset.count = String(l.count);
      li.dataset.total = String(l.total);
      li.textContent = l.text;
      return li;
    }),
  );
}

// A window size from the box: a whole number of at least 1, or null (the box then says why).
export function parseWindow(raw) {
  const w = Number(raw);
  return Number.isInteger(w) && w >= 1 ? w : null;
}

export function bind(root, { dispatch }) {
  const part = within(root);
  part("mask-causal").addEventListener("change", (e) => dispatch(act.causalSet(e.target.checked)));
  const box = part("mask-window");
  const windowChanged = () => {
    const on = part("mask-window-on").checked;
    const w = parseWindow(box.value);
    const msg = part("window-error");
    if (on && w == null) {
      // a window of 0, -5 or 2.5 is not quietly made 1: the box says what it takes
      box.setAttribute("aria-invalid", "true");
      box.dataset.localError = "1";
      msg.textContent = `The window must be a whole number of positions, 1 or more (got “${box.value}”).`;
      msg.hidden = false;
      return;
    }
    box.removeAttribute("aria-invalid");
    delete box.dataset.localError;
    msg.hidden = true;
    dispatch(act.windowSet(on, w));
  };
  part("mask-window-on").addEventListener("change", windowChanged);
  box.addEventListener("change", () => {
    part("mask-window-on").checked = true;
    windowChanged();
  });
  part("blocked-clear").addEventListener("click", () => dispatch(act.blockedCleared()));
}
