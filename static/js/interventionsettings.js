// The interventions' settings (the view is experiments.js, the helpers and drawing interventions.js): the heads
// knocked out and the weights set by hand (in the link as `abl` and `edit`) and the mode a newly knocked-out head
// gets. `feature` is their one declaration (features.js): defaults, link keys, actions, reducer cases, what a model
// change keeps. What POST /api/intervene is sent is its spec's in panels.js (requests.js interveneRequest), from
// these. A module of its own, importing nothing, so that the page's actions, gathered from it, do not bring the
// panel's drawing code along (the exported file runs them too).

export const ABLATE_MODES = ["zero", "mean"];

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// "1.0.zero,1.3.mean" -> [{layer, head, mode}]; unreadable entries are dropped, a head appears once.
export function parseAblations(raw) {
  const out = [];
  for (const part of (raw || "").split(",")) {
    const [l, h, mode] = part.split(".");
    const layer = whole(l);
    const head = whole(h);
    if (layer == null || head == null || layer < 0 || head < 0 || !ABLATE_MODES.includes(mode)) continue;
    if (out.some((a) => a.layer === layer && a.head === head)) continue;
    out.push({ layer, head, mode });
  }
  return out;
}

// "1.2.20.9@0.5,..." -> [{layer, head, query, key, weight}] with weight in [0, 1].
export function parseEdits(raw) {
  const out = [];
  for (const part of (raw || "").split(",")) {
    const [cell, w] = part.split("@");
    const nums = (cell || "").split(".").map(whole);
    const weight = Number.parseFloat(w);
    if (nums.length !== 4 || nums.some((v) => v == null || v < 0) || !(weight >= 0 && weight <= 1)) continue;
    const [layer, head, query, key] = nums;
    out.push({ layer, head, query, key, weight });
  }
  return out;
}

// The ablation of head (layer, head) in `list`, or null.
export function findAblation(list, layer, head) {
  return list.find((a) => a.layer === layer && a.head === head) || null;
}

// Ablate the head if it is not, restore it if it is; a new list in (layer, head) order.
export function toggleAblation(list, layer, head, mode) {
  const next = findAblation(list, layer, head)
    ? list.filter((a) => !(a.layer === layer && a.head === head))
    : [...list, { layer, head, mode }];
  return next.sort((a, b) => a.layer - b.layer || a.head - b.head);
}

// Add an edit, replacing one on the same head and cell.
export function addEdit(list, edit) {
  const same = (e) => e.layer === edit.layer && e.head === edit.head && e.query === edit.query && e.key === edit.key;
  return [...list.filter((e) => !same(e)), { ...edit }].sort(
    (a, b) => a.layer - b.layer || a.head - b.head || a.query - b.query || a.key - b.key,
  );
}

const actions = {
  ablationToggled: (layer, head) => ({ type: "ablationToggled", layer, head }),
  ablationDropped: (layer, head) => ({ type: "ablationDropped", layer, head }),
  ablModeSet: (mode) => ({ type: "ablModeSet", mode }),
  editAdded: (edit) => ({ type: "editAdded", edit }),
  editDropped: (index) => ({ type: "editDropped", index }),
  interventionsCleared: () => ({ type: "interventionsCleared" }),
};

const sameHead = (a) => (x) => x.layer === a.layer && x.head === a.head;

export const feature = {
  ui: {
    ablate: [], // [{layer, head, mode: "zero"|"mean"}]: heads knocked out in /api/intervene
    ablMode: "zero", // the mode a newly ablated head gets
    edits: [], // [{layer, head, query, key, weight}]: single attention weights set by hand
  },
  link: {
    write(ui, p) {
      if (ui.ablate?.length) p.set("abl", ui.ablate.map((a) => `${a.layer}.${a.head}.${a.mode}`).join(","));
      if (ui.edits?.length)
        p.set("edit", ui.edits.map((e) => `${e.layer}.${e.head}.${e.query}.${e.key}@${e.weight}`).join(","));
    },
    read: (p) => ({ ablate: parseAblations(p.get("abl")), edits: parseEdits(p.get("edit")) }),
  },
  // the mode stays on a model change; the heads and weights named are the old model's and go
  keep: (ui) => ({ ablMode: ui.ablMode }),
  actions,
  reduce: {
    ablationToggled: (s, a, { setUi }) =>
      setUi(s, { ablate: toggleAblation(s.ui.ablate, a.layer, a.head, s.ui.ablMode) }),
    ablationDropped: (s, a, { setUi }) => setUi(s, { ablate: s.ui.ablate.filter((x) => !sameHead(a)(x)) }),
    ablModeSet: (s, a, { setUi }) =>
      setUi(s, { ablMode: a.mode, ablate: s.ui.ablate.map((x) => ({ ...x, mode: a.mode })) }),
    editAdded: (s, a, { setUi }) => setUi(s, { edits: addEdit(s.ui.edits, a.edit) }),
    editDropped: (s, a, { setUi }) => setUi(s, { edits: s.ui.edits.filter((_, i) => i !== a.index) }),
    interventionsCleared: (s, _a, { setUi }) => setUi(s, { ablate: [], edits: [] }),
  },
};
