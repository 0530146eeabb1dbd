// The "Compute in" control of Display (the template's <div data-view="dtype">): the precision /api/attention computes
// the run in (`dtype`), and how far the run's weights are from the same run in float32 (the answer's
// config.max_diff_vs_float32). Pure render from the state; bind() wires the select. `feature` is its one
// declaration (features.js): its setting, link key, action, reducer case and body field.

import { keptHidden, markGiveaways } from "./giveaway.js";

export const DTYPES = ["float32", "float64", "bfloat16", "float16"]; // what /api/attention computes in (`dtype`)

const actions = {
  dtypeSet: (dtype) => ({ type: "dtypeSet", dtype }), // the precision the run computes in (DTYPES)
};

export const feature = {
  ui: { dtype: null }, // one of DTYPES, the precision the run computes in; null = the server's (ATTNLAB_DTYPE)
  link: {
    write(ui, p) {
      if (ui.dtype) p.set("dtype", ui.dtype);
    },
    read: (p) => (DTYPES.includes(p.get("dtype")) ? { dtype: p.get("dtype") } : {}),
  },
  actions,
  reduce: {
    dtypeSet: (s, a, { runWith }) =>
      DTYPES.includes(a.dtype) ? runWith(s, { dtype: a.dtype }, `computing in ${a.dtype}`, "dtype-select") : s,
  },
  request: (ui) => (ui.dtype ? { dtype: ui.dtype } : {}),
  body: ["dtype"],
  reach: "attention", // every analysis computes in the server's precision
  errors: { dtype: "dtype-select" },
};

export function deps(s) {
  return [s.ui.dtype, s.run.result, keptHidden(s)];
}

// "max difference from float32: 3.1e-3" for a run in another dtype, "" for a float32 run (or none yet).
export function diffLine(config) {
  const d = config?.max_diff_vs_float32;
  if (!config || config.dtype === "float32" || typeof d !== "number") return "";
  return `${config.dtype}: max difference from float32: ${d === 0 ? "0" : d.toExponential(1)} (largest |weight − float32 weight| over the heads shown)`;
}

export function render(root, s) {
  const config = s.run.result?.config;
  root.querySelector("#dtype-select").value = s.ui.dtype || config?.dtype || "float32";
  const line = diffLine(config);
  const out = root.querySelector("#dtype-diff");
  out.textContent = line;
  out.hidden = !line;
  markGiveaways(root, s, ["precision"]); // a lesson that asks how far it lands keeps the difference out of sight
}

export function bind(root, { dispatch }) {
  root.querySelector("#dtype-select").addEventListener("change", (e) => dispatch(actions.dtypeSet(e.target.value)));
}
