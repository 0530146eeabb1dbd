// The POST /api/perturb bodies of a run with more than one sequence in it: a batch and a cross-attention run
// (sourcebatch.js). The one-sequence body is requests.js perturbRequest.

import { asRun, changeOf } from "./requests.js";

// The POST /api/perturb body for a batch: the batch as run (texts, its masks, its classic bug: each item's padding
// is the server's), `item` the item whose `position` changes; the answer adds the checks `batch` (every other item
// exactly unchanged) and `padding_invariance` (the item batched equals it alone).
export function perturbBatchRequest(attention, item, position, perturb) {
  const { source: _s, text: _t, ...rest } = asRun(attention);
  return { ...rest, item, position, change: changeOf(perturb) };
}

// The POST /api/perturb body for a cross-attention run: the run as sent (its source, the source's padding, its
// blocked cells, its classic bug), `side` "query" (position is a query) or "source" (a source position); the answer
// checks `source_boundary`.
export function perturbSourceRequest(attention, side, position, perturb) {
  const { texts: _t, ...rest } = asRun(attention);
  const onSource = side === "source";
  // the query side has no value vector of its own (the menu shows direction there): send what the menu shows
  const shown = !onSource && perturb.kind === "value" ? { ...perturb, kind: "direction" } : perturb;
  return { ...rest, side: onSource ? "source" : "query", position, change: changeOf(shown) };
}
