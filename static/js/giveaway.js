// What an open lesson keeps out of sight while it is unanswered, because it would give its answer away: a lesson's
// `hides` (lessons.js, exercises.js) names some of GIVEAWAYS, the open lesson's setting carries them (ui.lesson.hides,
// lesson.js freshLesson), and the view that draws each one reads the state (`markGiveaways`) and marks its own root with the names kept hidden now (data-giveaway="pairs ..."), which the
// page's stylesheet keys on to hide that part of the view. Nothing is written outside a view's root: the lesson names
// what it hides, each view hides its own. Once the lesson's answer is checked right, or shown, every part is back.
// Pure but for the root's one attribute.

// name -> the part of the page it hides, as a selector inside the view that draws it
export const GIVEAWAYS = {
  pairs: "#pair-counts", // the eligible-pair counts beside the mask controls (maskcontrols.js)
  symmetric: ".flag-symmetric", // a head card's "W_Q = W_K: scores are symmetric" badge (heads.js)
  verdict: "#perturb-verdict", // Test a claim's verdict and its list of checks (experiments.js)
  precision: "#dtype-diff", // the run's difference from float32 (dtype.js)
  lookat: "#train-lookat, .train-exp p", // what the ready-made experiments say to look at: how they turn out (train.js)
  trainverdict: "#train-claim", // whether an experiment's claim held, and the figure it read (train.js)
};

const LESSON = "lesson"; // the lesson panel's setting, ui.lesson = {id, picked, feedback, shown} (lesson.js)

// The names the open lesson `value` ({id, hides, picked, feedback, shown}, or null) hides now: its `hides` until its
// answer is checked right or shown.
export function hiddenNow(value) {
  if (!value || value.feedback?.ok || value.shown) return [];
  return (value.hides || []).filter((name) => name in GIVEAWAYS);
}

// The names the open lesson of state `s` keeps hidden now, as one string ("" when none): a view's deps take it.
export function keptHidden(s) {
  return hiddenNow(s.ui?.[LESSON]).join(" ");
}

// Mark `root` with those of `names` the open lesson keeps hidden now (none: no mark).
export function markGiveaways(root, s, names) {
  const now = keptHidden(s)
    .split(" ")
    .filter((n) => names.includes(n));
  if (now.length) root.dataset.giveaway = now.join(" ");
  else delete root.dataset.giveaway;
}
