// The "Hide sinks" control of Display (the template's <div data-view="sinks">): which key columns every map hides
// (none, the first token, the special tokens the tokenizer added, or positions typed in) and whether each row is
// renormalised over the keys left. The server does the hiding (the `sinks` body field, requests.js); a choice it
// refuses (a model that adds no special tokens, a position past the keys) comes back as its 422, shown at the
// control by the error banner (controls.js controlFor). Pure render from the state; bind() wires the inputs.
// `feature` is its one declaration (features.js): its settings, link keys, action, reducer case and body field.

import { firstPosition, pos, posList, typedPos } from "./positions.js";
import { within } from "./dom.js";

// "first" | "special" | "0,3" -> what `sinks.hide` gets; null for none or what cannot be read. Positions are whole
// numbers of 0 or more, each once, in order (the server checks them against the keys).
export function parseSinks(raw) {
  const t = (raw || "").trim();
  if (t === "first" || t === "special") return t;
  if (!/^\d+(\s*,\s*\d+)*$/.test(t)) return null;
  return [...new Set(t.split(",").map((v) => Number.parseInt(v, 10)))].sort((a, b) => a - b);
}

// What a sinks change is called in the run's line ("sinks hidden: the first token, rows renormalised").
function sinksWords(sinks, renorm) {
  if (sinks == null) return "sinks shown";
  const hide = Array.isArray(sinks)
    ? `positions ${posList(sinks)}`
    : sinks === "first"
      ? "the first token"
      : "special tokens";
  return `sinks hidden: ${hide}${renorm ? ", rows renormalised" : ""}`;
}

const actions = {
  // every map's hidden key columns, and whether each row is renormalised over the keys left
  sinksSet: (sinks, renorm, where) => ({ type: "sinksSet", sinks, renorm, where }),
};

export const feature = {
  ui: {
    sinks: null, // key columns every map hides (server `sinks.hide`): "first" | "special" | [positions]; null = none
    renorm: true, // with sinks: each row renormalised over the keys left
  },
  link: {
    write(ui, p) {
      if (ui.sinks) p.set("sinks", Array.isArray(ui.sinks) ? ui.sinks.join(",") : ui.sinks);
      if (ui.sinks && !ui.renorm) p.set("renorm", "0"); // without sinks there is nothing to renormalise
    },
    read: (p) => ({ sinks: parseSinks(p.get("sinks")), renorm: p.get("renorm") !== "0" }),
  },
  // the first position is every model's; special tokens and named positions are the old input's
  keep: (ui) => ({ sinks: ui.sinks === "first" ? "first" : null, renorm: ui.renorm }),
  actions,
  reduce: {
    sinksSet: (s, a, { runWith }) =>
      runWith(s, { sinks: a.sinks, renorm: a.renorm }, sinksWords(a.sinks, a.renorm), a.where),
  },
  request: (ui) => (ui.sinks ? { sinks: { hide: ui.sinks, renormalise: ui.renorm !== false } } : {}),
  body: ["sinks"],
  reach: "weights", // /api/heads, decode, perturb and patch return no weights and refuse sinks
  errors: { sinks: "sinks-select" },
};

// The select's value for a state's sinks: "none" | "first" | "special" | "positions".
export function sinksChoice(sinks) {
  return sinks == null ? "none" : Array.isArray(sinks) ? "positions" : sinks;
}

// What the maps hide, in words, from the server's answer (`sinks` {hidden, renormalised}, null without sinks).
export function sinksLine(answer, tokens = []) {
  if (!answer) return "";
  const keys = Array.from(answer.hidden, (k) => (tokens[k] != null ? `${pos(k)} “${tokens[k]}”` : String(pos(k))));
  const n = keys.length;
  return `Hiding key${n === 1 ? "" : "s"} ${keys.join(", ") || "none"}${answer.renormalised ? ", each row renormalised over the rest" : " (rows not renormalised)"}.`;
}

export function deps(s) {
  return [s.ui.sinks, s.ui.renorm, s.run.result];
}

export function render(root, s) {
  const part = within(root);
  const choice = sinksChoice(s.ui.sinks);
  if (document.activeElement !== part("sinks-select")) part("sinks-select").value = choice;
  const box = part("sinks-positions");
  box.hidden = choice !== "positions" && document.activeElement !== box && !box.dataset.open;
  if (Array.isArray(s.ui.sinks) && document.activeElement !== box) box.value = s.ui.sinks.map(pos).join(",");
  box.placeholder = [0, 3].map(pos).join(",");
  part("sinks-renorm").checked = s.ui.renorm;
  part("sinks-renorm").disabled = choice === "none" && !box.dataset.open;
  const r = s.run.result;
  part("sinks-shown").textContent = sinksLine(r?.sinks, r?.source_tokens || r?.tokens);
}

export function bind(root, { dispatch, getState }) {
  const part = within(root);
  const box = part("sinks-positions");
  const error = part("sinks-error");
  const say = (text) => {
    error.textContent = text;
    error.hidden = !text;
    if (text) box.setAttribute("aria-invalid", "true");
    else box.removeAttribute("aria-invalid");
  };
  const send = (sinks) => dispatch(actions.sinksSet(sinks, getState().ui.renorm, "sinks-select"));
  const fromBox = () => {
    // typed in the count shown (positions.js): from 1, "1,4" is the API's [0, 3]
    const typed = parseSinks(box.value);
    const first = firstPosition();
    if (!typed || typed[0] < first) {
      const eg = [0, 3].map(pos).join(",");
      say(`Key positions as whole numbers from ${first} with commas, e.g. ${eg} (got “${box.value}”).`);
      return;
    }
    const sinks = typed.map(typedPos);
    say("");
    delete box.dataset.open;
    send(sinks);
  };
  part("sinks-select").addEventListener("change", (e) => {
    const v = e.target.value;
    say("");
    if (v === "positions") {
      // the positions wait for the box: typed, then Enter or leaving it sends them
      box.dataset.open = "1";
      box.hidden = false;
      box.focus();
      if (box.value.trim()) fromBox();
      return;
    }
    delete box.dataset.open;
    send(v === "none" ? null : v);
  });
  box.addEventListener("change", fromBox);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      fromBox();
    }
  });
  part("sinks-renorm").addEventListener("change", (e) => {
    const ui = getState().ui;
    if (ui.sinks) dispatch(actions.sinksSet(ui.sinks, e.target.checked, "sinks-renorm"));
  });
}
