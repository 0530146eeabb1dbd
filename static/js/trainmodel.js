// A training run's snapshot as a model of the page: `train:RUN@STEP` is no model of GET /api/models, so its entry
// comes from GET /api/train/{RUN}/model?step=STEP, for the Train workspace's "Open this step in Explore" and for a
// link that names one (main.js adds it to the page's models before the link's state is restored).

import { parse } from "./api.js";

const SNAPSHOT = /^train:([0-9a-f]{1,32})@([0-9]{1,9})$/;

// The entry of snapshot `name` (train:RUN@STEP), as GET /api/models lists a model; an ApiError when the server has
// no such run or step.
export async function snapshotModel(name) {
  const [, run, step] = SNAPSHOT.exec(name) || [];
  if (!run) throw new Error(`${name} is no training run's snapshot (train:RUN@STEP)`);
  const resp = await fetch(`/api/train/${run}/model?step=${step}`, { headers: { accept: "application/json" } });
  return parse(resp);
}

// `models` with the snapshot the link's query string names (its `m`) added, when it names one they lack and the
// server keeps it; as they are otherwise.
export async function withLinkedSnapshot(models, search) {
  const name = new URLSearchParams(search).get("m");
  if (!name || !SNAPSHOT.test(name) || models.some((m) => m.name === name)) return models;
  try {
    return [...models, await snapshotModel(name)];
  } catch {
    return models; // a deleted run or a step never kept: the link opens on the page's first model
  }
}
