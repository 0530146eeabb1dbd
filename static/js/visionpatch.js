// Patching from a second image in the Vision workspace (vision.js runs it): which image is the other one (a shipped
// digit or photograph, or the person's own file, sent as base64 as the image shown is), the POST /api/patch body, and
// for per-head patching (hook z) the layer x head grid of recovered shares as a small table whose best cell is named
// in words. Per-position patching (resid_pre) is drawn over the image, as thumbnails (vision.js drawPatched).

import { node } from "./dom.js";

// What the workspace patches, by hook: one activation per cell of the grid /api/patch answers.
export const VISION_HOOKS = {
  resid_pre: "each patch's residual stream, layer by layer (layer × position)",
  z: "each head's output, layer by layer (layer × head)",
};

// The other image from the patching controls: `choice` is "digit" (then `digit` is its number), a photograph's name,
// or "file" (then `upload` is the person's file as {body: {image}, label}, or null before one is chosen). Null when
// there is no image to send.
export function otherImage(choice, digit, upload) {
  if (choice === "file") return upload || null;
  if (choice === "digit") {
    const n = Number(digit);
    if (String(digit).trim() === "" || !Number.isInteger(n) || n < 0) return null;
    return { body: { sample: `digit-${n}` }, label: `digit-${n}` };
  }
  return choice ? { body: { sample: choice }, label: choice } : null;
}

// The /api/patch body: the image shown (`clean`, its /api/attention fields) is the clean input and `other` the
// corrupted one; each cell's activation at `hook` is copied from the clean run in turn, and the final output's
// distance from the clean one read (the metric a model of no vocabulary has).
export function patchBody(model, clean, other, hook = "resid_pre") {
  return {
    clean: { model, ...clean.body },
    corrupted: { model, ...other.body },
    hook,
    metric: { kind: "output_distance" },
  };
}

// A recovered share as a cell's strength: 0 to 1 (below 0, a cell that takes the output further away, reads as 0).
export function share(value) {
  return value == null || !Number.isFinite(value) ? 0 : Math.min(1, Math.max(0, value));
}

// The cell that brings back the most: the largest recovered share ({layer, head, value}), or null when none is above 0
// (ranked as the patching panel's bestCell ranks, which keeps a largest share at or below 0 too, for Enter to open).
export function bestHead(recovered) {
  let best = null;
  recovered.forEach((row, layer) =>
    row.forEach((v, head) => {
      if (v != null && v > 0 && (!best || v > best.value)) best = { layer, head, value: v };
    }),
  );
  return best;
}

// The per-head answer in words: how far apart the two images leave the output, and which head brings back most.
export function headLine(got, otherLabel, cleanLabel) {
  const best = bestHead(got.recovered);
  const where = best
    ? `head ${best.head} of layer ${best.layer} brings back the most (${best.value.toFixed(3)} of the difference)`
    : "no head alone brings it any of the way back";
  return `From ${otherLabel} to ${cleanLabel}: the final output is ${got.corrupted_metric.toFixed(3)} away; ${where}.`;
}

// The layer x head grid as a table: a row per layer, a button per head holding its recovered share (its background
// as strong as the share is next to the largest, as the veils read weights next to the row's largest), the best cell
// marked. A button chooses that layer and head for the image above.
export function headTable(got) {
  const best = bestHead(got.recovered);
  const top = best ? share(best.value) : 0;
  const heads = got.columns;
  const head = node("tr");
  head.append(
    node("th", { scope: "col" }, ""),
    ...Array.from({ length: heads }, (_, h) => node("th", { scope: "col" }, `head ${h}`)),
  );
  const rows = got.recovered.map((values, layer) => {
    const tr = node("tr");
    tr.append(node("th", { scope: "row" }, `layer ${layer}`));
    values.forEach((v, h) => {
      const text = v == null ? "–" : v.toFixed(2);
      const b = node("button", { type: "button", className: "vision-cell" }, text);
      b.dataset.layer = String(layer);
      b.dataset.head = String(h);
      b.dataset.share = String(share(v));
      b.style.setProperty("--share", String(top > 0 ? share(v) / top : 0)); // the strongest the largest share
      const isBest = best && best.layer === layer && best.head === h;
      if (isBest) b.classList.add("vision-best");
      if (top > 0 && share(v) / top > 0.55) b.classList.add("vision-strong"); // light text on the strong accent
      b.setAttribute("aria-label", `layer ${layer} head ${h}: ${text} recovered${isBest ? ", the most" : ""}`);
      const td = node("td");
      td.append(b);
      tr.append(td);
    });
    return tr;
  });
  const table = node("table", { className: "vision-headgrid" });
  table.append(node("caption", { className: "small muted" }, "Share of the difference each head brings back"));
  table.append(node("thead"), node("tbody"));
  table.tHead.append(head);
  table.tBodies[0].append(...rows);
  return table;
}
