// The Train workspace's kept runs (train.js binds it into its root, templates/train.html's "train-kept"): every run
// the server keeps (GET /api/train, newest first), each a row with its name to edit and Rename (PATCH), its status
// and count of snapshots, Show in A and Show in B, Export (GET /api/train/{id}/export, once it has a snapshot) and
// Delete (DELETE); Refresh asks for the list again. It looks up its parts inside its root (dom.js within) and knows
// nothing of the columns: showing a run in one, forgetting a run deleted and saying an error are the workspace's,
// handed in when it is bound.

import { callJson, describeError } from "./api.js";
import { node, within } from "./dom.js";

// Binds the list in `root` (its Refresh button) and returns the function that fetches it and draws it again.
// `sides` are the columns a run can be shown in; `to` is what a row asks of the workspace: show(run, side),
// forget(runId) once the server has deleted it, say(text) for a request that failed.
export function bindRuns(root, sides, to) {
  const kept = { part: within(root), sides, to, refresh: null };
  kept.refresh = () => refreshRuns(kept);
  kept.part("train-refresh").addEventListener("click", kept.refresh);
  return kept.refresh;
}

async function refreshRuns(kept) {
  let runs;
  try {
    runs = (await callJson("/api/train")).runs;
  } catch (err) {
    kept.to.say(describeError(err).message);
    return;
  }
  const list = kept.part("train-runs");
  list.replaceChildren(...runs.map((run) => runRow(kept, run)));
  list.dataset.count = String(runs.length);
}

// One kept run's row, its buttons acting on that run.
function runRow(kept, run) {
  const { to } = kept;
  // a change the server has made: the list drawn again from its runs; a refusal said
  const ask = async (path, options, then = () => {}) => {
    try {
      await callJson(path, options);
      then();
      kept.refresh();
    } catch (err) {
      to.say(describeError(err).message);
    }
  };
  const li = node("li", { className: "train-run" });
  li.dataset.run = run.id;
  const name = node("input", { type: "text", value: run.name, maxLength: 200, className: "train-name" });
  name.setAttribute("aria-label", `Name of run ${run.id}`);
  const rename = node("button", { type: "button", className: "secondary small-btn" }, "Rename");
  rename.addEventListener("click", () =>
    ask(`/api/train/${run.id}`, { method: "PATCH", body: JSON.stringify({ name: name.value }) }),
  );
  const shows = kept.sides.map((side) => {
    const b = node("button", { type: "button", className: "secondary small-btn" }, `Show in ${side.toUpperCase()}`);
    b.addEventListener("click", () => to.show(run, side));
    return b;
  });
  const exp = node("a", { href: `/api/train/${run.id}/export`, className: "small" }, "Export");
  exp.hidden = !run.steps.length;
  const del = node("button", { type: "button", className: "secondary small-btn" }, "Delete");
  del.addEventListener("click", () => ask(`/api/train/${run.id}`, { method: "DELETE" }, () => to.forget(run.id)));
  const meta = node("span", { className: "muted small" }, ` ${run.status} · ${run.steps.length} snapshots `);
  li.append(name, rename, meta, ...shows, exp, del);
  return li;
}
