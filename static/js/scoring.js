// The two controls of Masks that say how scores become weights (the template's <div data-view="scoring">,
// templates/scoring.html): whether scores are scaled by 1/√d_k before the softmax (the request's `scale`), and what a
// row whose every key is masked gets (`all_masked`: refused with a message, or weights and context of 0). `feature`
// is its one declaration (features.js): its settings, link keys, actions, reducer cases and body fields.

import { within } from "./dom.js";

export const ALL_MASKED = ["error", "zero"]; // what /api/attention's `all_masked` takes; "error" is the default

const actions = {
  allMaskedSet: (value) => ({ type: "allMaskedSet", value }),
  scaleSet: (on) => ({ type: "scaleSet", on }),
};

export const feature = {
  ui: { allMasked: "error", scale: true },
  link: {
    write(ui, p) {
      if (ui.allMasked !== "error") p.set("all_masked", ui.allMasked);
      if (!ui.scale) p.set("scale", "0");
    },
    read: (p) => ({ allMasked: p.get("all_masked") === "zero" ? "zero" : "error", scale: p.get("scale") !== "0" }),
  },
  actions,
  reduce: {
    allMaskedSet: (s, a, { runWith }) =>
      runWith(s, { allMasked: a.value }, `all-masked rows: ${a.value}`, "all-masked"),
    scaleSet: (s, a, { runWith }) => runWith(s, { scale: a.on }, `scaling ${a.on ? "on" : "off"}`, "scale"),
  },
  request: (ui) => ({ all_masked: ui.allMasked, scale: ui.scale }),
  body: ["all_masked", "scale"],
  reach: "every", // every analysis computes its weights as the view does; neither changes an answer's size
  errors: { all_masked: "all-masked" },
};

export function deps(s) {
  return [s.ui.allMasked, s.ui.scale];
}

export function render(root, s) {
  const part = within(root);
  part("all-masked").value = s.ui.allMasked;
  part("scale").checked = s.ui.scale;
}

export function bind(root, { dispatch }) {
  const part = within(root);
  part("all-masked").addEventListener("change", (e) => dispatch(actions.allMaskedSet(e.target.value)));
  part("scale").addEventListener("change", (e) => dispatch(actions.scaleSet(e.target.checked)));
}
