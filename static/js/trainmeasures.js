// What the Train workspace has measured of the ready-made experiment it started last, in the page's state beside ui
// (s.trained), so that a training lesson (trainlessons.js) checks the learner's answer against the runs' live
// measures. train.js dispatches it as each snapshot, status and end of the experiment's runs comes:
//
//   s.trained = {experiment: its id, runs: [{status, steps: [step, ...], measures: [measures, ...]}, ...]}
//
// one run per spec of the experiment, in the specs' order (runs[i] is specs[i], column A then B); a run not started
// yet has status "waiting" and no snapshots; each snapshot's measures as GET /api/train/{id}/events sends them. Not
// in the link: a run is watched, not set. `feature` is its one declaration (features.js); it imports nothing, since
// actions.js reads it and train.js, the view that dispatches it, imports the page's actions.

const actions = {
  trainMeasured: (trained) => ({ type: "trainMeasured", trained }), // the experiment's runs as measured so far
};

export const feature = {
  page: { trained: null }, // null until the Train workspace starts an experiment
  actions,
  reduce: { trainMeasured: (s, a) => ({ ...s, trained: a.trained }) },
};
