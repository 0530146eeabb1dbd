// The head-types panel's settings (its view is headtypes.js, the probe's two fields probe.js): the column its table is
// sorted on and which way, its text and score filters, whether each head's ablation effect and shuffled baseline are
// measured, and the probe's segment lengths and seed. `feature` is their one declaration (features.js): their
// defaults, link keys, actions and reducer cases, and what a model change or an example keeps of them. It is a module
// of its own, importing nothing, because the views that dispatch these actions import the page's actions, which are
// gathered from this declaration. What the panel asks (POST /api/heads) is its spec's in panels.js, from these.

export const HEAD_SORTS = [
  "head",
  "previous_token",
  "duplicate_token",
  "induction",
  "bracket_match",
  "mean_distance",
  "entropy",
  "ablation_effect",
];
export const MAX_LENGTHS = 8; // as many lengths as /api/heads takes

// "17, 24 31" -> [17, 24, 31]; "" -> [] (the server's default); null when a part is not a whole number of at
// least 2, a length is given twice, or there are more than MAX_LENGTHS.
export function parseLengths(text) {
  const parts = String(text)
    .split(/[\s,]+/)
    .filter(Boolean);
  if (parts.length > MAX_LENGTHS) return null;
  const lengths = [];
  for (const part of parts) {
    if (!/^\d{1,4}$/.test(part)) return null;
    const n = Number(part);
    if (n < 2 || lengths.includes(n)) return null;
    lengths.push(n);
  }
  return lengths;
}

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// The sort after a click on `column`'s header: a new column sorts descending (the head column ascending, which is
// layer order, no sort at all); the same column again turns the direction around.
export function sortAfter(ui, column) {
  const current = ui.hsort || "head";
  const dir = ui.hsort ? ui.hdir : "asc";
  let hsort = column;
  let hdir = column === current ? (dir === "asc" ? "desc" : "asc") : column === "head" ? "asc" : "desc";
  if (hsort === "head" && hdir === "asc") hsort = null;
  if (!hsort) hdir = "desc";
  return { hsort, hdir };
}

const actions = {
  headFilterSet: (fields) => ({ type: "headFilterSet", fields }), // any of the settings below but the sort
  headSorted: (column) => ({ type: "headSorted", column }),
};

export const feature = {
  ui: {
    hsort: null, // head-types column sorted on; null = layer order
    hdir: "desc",
    hfind: "", // head-types text filter, e.g. "L1" or "L1H3"
    hscore: "", // head-types score filter: a column key, with hmin its threshold
    hmin: 0.5,
    hablate: false, // head types: each head's ablation effect measured too (one more forward per head)
    hbase: false, // head types: each score's shuffled baseline measured too (how far each head stands above chance)
    hlens: [], // head types: the probe's segment lengths; [] = the server's default (several lengths)
    hseed: 0, // head types: the probe's seed
  },
  link: {
    write(ui, p) {
      if (ui.hsort) p.set("hsort", ui.hdir === "asc" ? `${ui.hsort}.asc` : ui.hsort);
      if (ui.hfind) p.set("hfind", ui.hfind);
      if (ui.hscore) p.set("hmin", `${ui.hscore}:${ui.hmin}`);
      if (ui.hablate) p.set("habl", "1");
      if (ui.hbase) p.set("hbase", "1");
      if (ui.hlens.length) p.set("hlens", ui.hlens.join(","));
      if (ui.hseed) p.set("hseed", String(ui.hseed));
    },
    read(p) {
      const out = {};
      const [sortBy, dir] = (p.get("hsort") || "").split(".");
      if (HEAD_SORTS.includes(sortBy)) {
        out.hsort = sortBy;
        out.hdir = dir === "asc" ? "asc" : "desc";
      }
      out.hfind = (p.get("hfind") || "").slice(0, 40);
      const [score, min] = (p.get("hmin") || "").split(":");
      const threshold = Number.parseFloat(min);
      if (HEAD_SORTS.includes(score) && score !== "head" && Number.isFinite(threshold)) {
        out.hscore = score;
        out.hmin = threshold;
      }
      out.hablate = p.get("habl") === "1";
      out.hbase = p.get("hbase") === "1";
      out.hlens = parseLengths(p.get("hlens") || "") || [];
      out.hseed = Math.max(0, whole(p.get("hseed")) ?? 0);
      return out;
    },
  },
  // the sort stays on a model change (the same columns); the filters and the probe were the old model's
  keep: (ui) => ({ hsort: ui.hsort, hdir: ui.hdir }),
  // an example that names a column (examples.js `sort`) opens the table sorted on it, highest first
  example: (ex) => (ex.sort ? { hsort: ex.sort, hdir: "desc" } : {}),
  actions,
  reduce: {
    headFilterSet: (s, a, { setUi }) => setUi(s, a.fields),
    headSorted: (s, a, { setUi }) => setUi(s, sortAfter(s.ui, a.column)),
  },
};
