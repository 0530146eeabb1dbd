// The colour controls of Display (the template's <div data-view="palette">, templates/palette.html): the weights'
// colour map (viridis or cividis, colors.js PALETTES) and how the scores' colours are ranged across heads. Every map
// reads them from the state; this view only shows and sets them. `feature` is its one declaration (features.js):
// its settings, link keys, actions and reducer cases; neither changes a request (the maps are drawn on the page).

import { within } from "./dom.js";

export const PALETTE_NAMES = ["viridis", "cividis"];
export const SCORE_SCALES = ["head", "clip", "shared"];

const actions = {
  paletteSet: (palette) => ({ type: "paletteSet", palette }),
  scoreScaleSet: (value) => ({ type: "scoreScaleSet", value }),
};

export const feature = {
  ui: {
    palette: "viridis",
    scoreScale: "head", // scores: "head" (each head its own symmetric range), "clip" (shared, clipped at the 98th
    // percentile of |score|) or "shared" (one range over every head shown)
  },
  link: {
    write(ui, p) {
      if (ui.palette !== "viridis") p.set("palette", ui.palette);
      if (ui.scoreScale && ui.scoreScale !== "head") p.set("sscale", ui.scoreScale);
    },
    read(p) {
      const out = {};
      if (PALETTE_NAMES.includes(p.get("palette"))) out.palette = p.get("palette");
      if (SCORE_SCALES.includes(p.get("sscale"))) out.scoreScale = p.get("sscale");
      return out;
    },
  },
  actions,
  reduce: {
    paletteSet: (s, a, { setUi }) => setUi(s, { palette: a.palette }),
    scoreScaleSet: (s, a, { setUi }) => setUi(s, { scoreScale: a.value }),
  },
};

export function deps(s) {
  return [s.ui.palette, s.ui.scoreScale, s.ui.view];
}

export function render(root, s) {
  const part = within(root);
  part("palette-select").value = s.ui.palette;
  part("score-scale").value = s.ui.scoreScale;
  part("score-scale").disabled = s.ui.view !== "scores"; // it ranges the scores' colours only
}

export function bind(root, { dispatch }) {
  const part = within(root);
  part("palette-select").addEventListener("change", (e) => dispatch(actions.paletteSet(e.target.value)));
  part("score-scale").addEventListener("change", (e) => dispatch(actions.scoreScaleSet(e.target.value)));
}
