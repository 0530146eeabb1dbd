// Where a link opens (static/js/workspaces.js): pure, in node; the tab bar and the drawing are tested in Chromium
// (tests/browser/test_workspaces.py).
import assert from "node:assert/strict";
import { test } from "node:test";

import { mod } from "./lib.mjs";

test("a link opens on the workspace that holds what it names", async () => {
  const W = await mod("workspaces.js");
  assert.equal(W.workspaceOf(""), "explore");
  assert.equal(W.workspaceOf("?m=textbook&causal=1&focus=0.0"), "explore");
  assert.equal(W.workspaceOf("?ws=mechanics"), "mechanics");
  assert.equal(W.workspaceOf("?long=1"), "long");
  assert.equal(W.workspaceOf("?m=random&pert=q,direction,1"), "test");
  assert.equal(W.workspaceOf("?m=random&hsort=induction"), "inside");
  assert.equal(W.workspaceOf("?m=random&dec=last"), "mechanics");
  assert.equal(W.workspaceOf("?lesson=lab-1"), "explore");
  assert.equal(W.workspaceOf("?lesson=kv-cache"), "mechanics");
  assert.equal(W.workspaceOf("?lesson=ex-12"), "mechanics");
  assert.equal(W.workspaceOf("?lesson=ex-10"), "test"); // its setup's `pert`: Test a claim draws the bars it asks about
  assert.equal(W.workspaceOf("?lesson=ex-2"), "explore");
  assert.equal(W.workspaceOf("?lesson=no-such-lesson"), "lessons");
  assert.equal(W.workspaceOf("?lesson=constructor"), "lessons");
  // `ws` wins over the rest of the link; a name no workspace has, or markup, is ignored
  assert.equal(W.workspaceOf("?m=random&pert=q,direction,1&ws=inside"), "inside");
  for (const bad of ["nope", "<script>", "", "__proto__", "constructor", "EXPLORE"]) {
    assert.equal(W.workspaceOf(`?ws=${encodeURIComponent(bad)}&long=1`), "long", bad);
  }
});

test("every view sits in one workspace, and every workspace holds some", async () => {
  const W = await mod("workspaces.js");
  const views = W.WORKSPACES.flatMap((w) => [...w.main, ...w.side]);
  assert.equal(new Set(views).size, views.length);
  for (const w of W.WORKSPACES) assert.ok(w.main.length > 0, w.name);
  const keys = W.WORKSPACES.flatMap((w) => w.keys);
  assert.equal(new Set(keys).size, keys.length);
});
