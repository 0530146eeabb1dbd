// The "Compute in" control of Display (the template's <div data-view="dtype">): the precision /api/attention computes
// the run in (`dtype`), and how far the run's weights are from the same run in float32 (the answer's
// config.max_diff_vs_float32). Pure render from the state; bind() wires the select.

import { act } from "./actions.js";

export function deps(s) {
  return [s.ui.dtype, s.run.result];
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
}

export function bind(root, { dispatch }) {
  root.querySelector("#dtype-select").addEventListener("change", (e) => dispatch(act.dtypeSet(e.target.value)));
}
