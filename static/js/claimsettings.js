// The settings of "Test a claim" (its view is experiments.js, its charts claims.js): the change to one position's
// input (direction, shift, value or token, and how much), that position, the batch item or cross-attention side it is
// in, and whether the panel runs. `feature` is their one declaration (features.js): defaults, link keys, action,
// reducer case, what a model change keeps. What POST /api/perturb is sent is its spec's in panels.js (requests.js
// perturbRequest and its batch and source forms), from these. A module of its own, importing nothing, so that the
// page's actions, gathered from it, do not bring the panel's drawing code along (the exported file runs them too).

export const CHANGE_KINDS = ["shift", "token"];
export const PERTURB_SIDES = ["query", "source"]; // /api/perturb's side with a source: a query or a source position

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// "q,direction,1" / "q,shift,1" / "q,value,1" / "3,token,dog" -> the perturbation the claims panel runs; null when unreadable.
export function parsePerturb(raw) {
  const m = /^(q|\d+),(direction|shift|value|token),(.*)$/s.exec(raw || "");
  if (!m) return null;
  const position = m[1] === "q" ? null : whole(m[1]);
  if (m[2] !== "token") {
    const amount = Number.parseFloat(m[3]);
    return Number.isFinite(amount) ? { position, kind: m[2], amount, token: "" } : null;
  }
  return m[3] ? { position, kind: "token", amount: 1, token: m[3] } : null;
}

const actions = {
  perturbSet: (perturb, on) => ({ type: "perturbSet", perturb, on }), // on: run it (a press asks again), off, or as is
};

export const feature = {
  ui: {
    perturbOn: false, // the "Test a claim" panel runs (and reruns after each change) once asked to
    // position null = the retrieval query; amount: the direction's norm or the shift; with a batch, `item` the item
    // whose position changes (absent or null = the item the views show); with a cross-attention source, `side`
    // (PERTURB_SIDES; absent = query) the sequence `position` is in
    perturb: { position: null, kind: "direction", amount: 1, token: "" },
  },
  link: {
    write(ui, p) {
      if (!ui.perturbOn) return;
      const pt = ui.perturb;
      const value = pt.kind === "token" ? pt.token : String(pt.amount);
      p.set("pert", `${pt.position ?? "q"},${pt.kind},${value}`);
      if (ui.batch && pt.item != null) p.set("pitem", String(pt.item));
      if (ui.source && pt.side) p.set("pside", pt.side);
    },
    read(p) {
      const pert = parsePerturb(p.get("pert"));
      if (!pert) return {};
      const pitem = whole(p.get("pitem"));
      if (pitem != null && pitem >= 0) pert.item = pitem;
      if (PERTURB_SIDES.includes(p.get("pside"))) pert.side = p.get("pside");
      return { perturbOn: true, perturb: pert };
    },
  },
  // the claim's settings stay on a model change; its position was the old input's
  keep: (ui) => ({ perturbOn: ui.perturbOn, perturb: { ...ui.perturb, position: null } }),
  actions,
  reduce: {
    perturbSet: (s, a, { setUi, setPanel }) => {
      const next = setUi(s, { perturb: a.perturb, perturbOn: a.on ?? s.ui.perturbOn });
      return a.on ? setPanel(next, "perturb", { nonce: s.panels.perturb.nonce + 1 }) : next;
    },
  },
};
