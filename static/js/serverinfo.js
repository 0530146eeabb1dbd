// The header's line on what answered (data-view="serverinfo"): the model and its heads and layers, "textbook · 2
// heads × 1 layer", for the answer on screen.

import { selectView } from "./selectors.js";

export function deps(s) {
  return [s.run.result, s.ui.layer, s.ui.focus];
}

export function render(root, s) {
  const view = selectView(s);
  if (!view) return;
  const r = s.run.result;
  const heads = `${view.nHeads} head${view.nHeads === 1 ? "" : "s"}`;
  const layers = `${r.config.n_layers} layer${r.config.n_layers === 1 ? "" : "s"}`;
  root.textContent = `${r.model} · ${heads} × ${layers}`;
}
