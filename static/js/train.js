// The Train workspace (data-view="train", templates/train.html): a small model trained on the server while every
// head is watched. The knobs of a run (TrainSpec, engine/trainlab/spec.py) as a form, Start and Cancel; each run
// shown in one of two columns side by side (scale on against off, warm-up against none, 1 layer against 2), its
// snapshots streamed from GET /api/train/{id}/events as they come: curves of every measure over steps (the loss
// with the phase change marked where the induction score jumps) and every head's map of the probe at the snapshot
// the scrubber picks, drawn by the heads grid's own renderHeads. The six ready-made experiments start their runs in
// one click and say what to look at, then whether the claim held (GET /api/train/experiments/{id}/check). A
// snapshot opens as the model train:RUN@STEP in Explore; the kept runs are listed with rename, delete and export
// (trainruns.js, drawn into its own part of the root).
// Its runs are its own state, not the store's: the store is only told of a snapshot opened as a model. It looks
// up its parts inside its root (dom.js within), and fetches its lists the first time it is shown. What it has
// measured of the experiment started last goes to the store too (act.trainMeasured, trainmeasures.js), where a
// training lesson (trainlessons.js) reads its answer; while such a lesson is open its experiment's button is outlined
// and, until it is answered, the experiments' notes and the claim's verdict are hidden (giveaway.js).

import { act } from "./actions.js";
import { callJson, describeError } from "./api.js";
import { scaleFor } from "./colors.js";
import { bringIntoView, el, node, within } from "./dom.js";
import { keptHidden, markGiveaways } from "./giveaway.js";
import { renderHeads } from "./heads.js";
import { lessonOf } from "./lessons.js";
import { snapshotModel } from "./trainmodel.js";
import { CURVES, curveLines, curveOf, decodeProbe, niceScale, phaseChange } from "./trainplot.js";
import { bindRuns } from "./trainruns.js";
import { open as openWorkspace } from "./workspaces.js";

// The form's knobs, TrainSpec's fields with its defaults (POST /api/train checks each against the server's limits).
export const KNOBS = [
  {
    name: "task",
    label: "Task",
    kind: "select",
    value: "induction",
    options: ["induction", "copy", "reverse", "brackets", "text"],
  },
  { name: "layers", label: "Layers", kind: "int", value: 2, min: 1 },
  { name: "heads", label: "Heads", kind: "int", value: 4, min: 1 },
  { name: "width", label: "Width d_model", kind: "int", value: 64, min: 1 },
  { name: "positions", label: "Positions", kind: "int", value: 64, min: 1 },
  { name: "mlp", label: "MLP after attention", kind: "check", value: false },
  { name: "scale", label: "Scale scores by 1/√d_k", kind: "check", value: true },
  { name: "causal", label: "Causal mask", kind: "check", value: true },
  { name: "lr", label: "Learning rate", kind: "float", value: 0.001 },
  { name: "warmup", label: "Warm-up steps (0: none)", kind: "int", value: 50, min: 0 },
  { name: "init", label: "Initialisation", kind: "select", value: "default", options: ["default", "gpt2", "shared"] },
  { name: "seed", label: "Seed", kind: "int", value: 0, min: 0 },
  { name: "steps", label: "Steps", kind: "int", value: 500, min: 1 },
  { name: "batch", label: "Batch", kind: "int", value: 32, min: 1 },
  { name: "snapshot_every", label: "Snapshot every", kind: "int", value: 25, min: 1 },
];
const SIDES = ["a", "b"];
const ENDED = new Set(["finished", "cancelled", "failed", "interrupted"]);
const W = 300; // a curve's drawing, in SVG units
const H = 130;
const PAD = { l: 44, r: 8, t: 8, b: 20 };
const INKS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];

const labs = new WeakMap(); // root -> its lab: {part, store, cols, experiments, pending, current, asked, started}

// The form's knobs as a POST /api/train body.
export function specOf(form) {
  const out = {};
  for (const k of KNOBS) {
    const input = form.elements[`train-${k.name}`];
    if (k.kind === "check") out[k.name] = input.checked;
    else if (k.kind === "select") out[k.name] = input.value;
    else out[k.name] = Number(input.value);
  }
  return out;
}

function knobInput(k) {
  const id = `train-${k.name}`;
  if (k.kind === "check") {
    const label = node("label", { className: "check" });
    label.append(node("input", { type: "checkbox", id, name: id, checked: k.value }), ` ${k.label}`);
    return label;
  }
  const label = node("label", { htmlFor: id }, k.label);
  const input =
    k.kind === "select"
      ? node("select", { id, name: id })
      : node("input", { type: "number", id, name: id, value: String(k.value), step: k.kind === "float" ? "any" : "1" });
  if (k.kind === "select") {
    input.append(...k.options.map((o) => node("option", { value: o, selected: o === k.value }, o)));
  }
  if (k.min != null) input.min = String(k.min);
  const wrap = node("div", { className: "train-knob" });
  wrap.append(label, input);
  return wrap;
}

// ---- one column: a run followed ----

function makeColumn(lab, side, root) {
  const part = (role) => root.querySelector(`[data-role=${role}]`);
  const col = {
    lab,
    side,
    root,
    part,
    run: null,
    status: "",
    snapshots: [],
    at: -1,
    follow: true,
    source: null,
    page: 0, // the page of heads shown when a run has more heads than a page holds
    bring: false, // a kept run shown here: its heads are brought into sight once drawn
  };
  part("scrub").addEventListener("input", (e) => {
    col.at = Number(e.target.value);
    col.follow = col.at === col.snapshots.length - 1;
    drawColumn(col);
  });
  part("cancel").addEventListener("click", async () => {
    if (!col.run) return;
    part("cancel").disabled = true;
    try {
      await callJson(`/api/train/${col.run.id}/cancel`, { method: "POST" });
    } catch (err) {
      say(lab, describeError(err).message);
    }
  });
  part("open").addEventListener("click", () => openInExplore(col));
  // the pager's buttons turn the column's page of heads (renderHeads keeps it within the pages)
  const turn = (by) => {
    col.page = Math.max(0, col.page + by);
    drawHeads(col, col.snapshots[col.at] ?? null);
    bringTop(part("heads")); // the pager sits below the heads: the page turned is shown from its first head
  };
  part("prev").addEventListener("click", () => turn(-1));
  part("next").addEventListener("click", () => turn(1));
  return col;
}

// `element` scrolled to the viewport's top when its top is out of sight (on a phone the columns lie one under the
// other, below the knobs).
function bringTop(element) {
  const top = element.getBoundingClientRect().top;
  if (top < 0 || top >= window.innerHeight) element.scrollIntoView({ block: "start" });
}

// Follow run {id, name} in `col`: its stored snapshots first, then each as it comes, until its end.
function follow(col, run) {
  col.source?.close();
  Object.assign(col, { run, status: "queued", error: null, snapshots: [], at: -1, follow: true, page: 0 });
  const source = new EventSource(`/api/train/${run.id}/events`);
  col.source = source;
  source.addEventListener("status", (e) => {
    col.status = JSON.parse(e.data).status;
    drawColumn(col);
    publish(col.lab);
  });
  source.addEventListener("snapshot", (e) => {
    const d = JSON.parse(e.data);
    const last = col.snapshots[col.snapshots.length - 1];
    if (last && d.step <= last.step) return; // a stream taken up again repeats what it sent
    col.snapshots.push({ step: d.step, measures: d.measures, probe: d.probe, heads: null });
    if (col.follow) col.at = col.snapshots.length - 1;
    if (col.status === "queued") col.status = "running";
    drawColumn(col);
    publish(col.lab);
  });
  source.addEventListener("end", (e) => {
    const d = JSON.parse(e.data);
    source.close();
    col.source = null;
    Object.assign(col, { status: d.status, error: d.error });
    drawColumn(col);
    publish(col.lab);
    startWaiting(col.lab);
    ended(col.lab);
    col.lab.refreshRuns();
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED && col.source === source) {
      col.source = null;
      col.error = "the run's events could not be read";
      drawColumn(col);
    }
  });
  drawColumn(col);
}

function drawColumn(col) {
  const { part, run } = col;
  const snap = col.snapshots[col.at] ?? null;
  const over = ENDED.has(col.status);
  part("title").textContent = run ? `${col.side.toUpperCase()}: ${run.name}` : `${col.side.toUpperCase()}: no run yet`;
  part("status").textContent = run ? `${col.status}${col.error ? `: ${col.error}` : ""}` : "";
  col.root.dataset.status = col.status;
  col.root.dataset.snapshots = String(col.snapshots.length);
  col.root.dataset.step = snap ? String(snap.step) : "";
  part("cancel").disabled = !run?.id || over;
  const scrub = part("scrub");
  scrub.max = String(Math.max(0, col.snapshots.length - 1));
  scrub.value = String(Math.max(0, col.at));
  scrub.disabled = col.snapshots.length < 2;
  part("step").textContent = snap ? `step ${snap.step} of ${run.spec?.steps ?? "?"}` : "";
  part("open").disabled = !snap || !over;
  const exp = part("export");
  exp.hidden = !snap || !over;
  if (snap) exp.href = `/api/train/${run.id}/export?step=${snap.step}`;
  drawHeads(col, snap);
  drawCurves(col);
  if (col.bring && snap?.probe) {
    col.bring = false;
    bringIntoView(part("heads"));
  }
}

// Every head's map of the probe at the snapshot picked, in the heads grid's own cards.
function drawHeads(col, snap) {
  const grid = col.part("heads");
  if (!snap || !snap.probe) {
    grid.replaceChildren();
    grid.dataset.step = "";
    return;
  }
  const page = String(col.page);
  if (grid.dataset.step === String(snap.step) && grid.dataset.run === col.run.id && grid.dataset.page === page) return;
  snap.heads ??= decodeProbe(snap.probe);
  const { tokens, layers } = snap.heads;
  const causal = col.run.spec?.causal !== false;
  const palette = col.lab.store.getState().ui.palette;
  const view = {
    tokens,
    keyTokens: null,
    item: 0,
    eligible: tokens.map((_, q) => tokens.map((_, k) => !causal || k <= q)),
    blocked: [],
    view: "weights",
    palette,
    scoreScale: "global",
    multiLayer: layers.length > 1,
    heads: layers.flatMap((heads, layer) => heads.map((head) => ({ layer, head }))),
    page: col.page,
    nHeads: layers[0]?.length ?? 0,
    kvGroups: layers[0]?.length ?? 0,
    scale: scaleFor("weights", palette, 0),
    changed: [],
    focus: null,
    hidden: [],
  };
  const cards = renderHeads(grid, col.part("pager"), view, { onOpen: () => {}, onHover: () => {} });
  for (const { fig, item } of cards) {
    // a map to look at here, not a button: a head opens large once its step is opened in Explore
    fig.removeAttribute("role");
    fig.removeAttribute("aria-pressed");
    fig.removeAttribute("tabindex");
    fig.setAttribute(
      "aria-label",
      `Layer ${item.layer} head ${item.head.index}: its weights on the probe at step ${snap.step}`,
    );
  }
  grid.dataset.step = String(snap.step);
  grid.dataset.run = col.run.id;
  grid.dataset.page = page;
}

function drawCurves(col) {
  const box = col.part("curves");
  if (!col.snapshots.length) {
    box.replaceChildren();
    return;
  }
  const phase = phaseChange(col.snapshots);
  const at = col.snapshots[col.at]?.step ?? null;
  const figures = CURVES.map((c) => curveFigure(c, col.snapshots, at, phase)).filter(Boolean);
  // the curve of the measure the experiment started last reads its claim from
  for (const fig of figures) fig.classList.toggle("train-curve-key", fig.dataset.curve === col.lab.keyCurve);
  box.replaceChildren(...figures);
}

// One measure's curve over steps: a line per label, the snapshot picked marked, the phase change on the loss and
// induction curves; null for a measure the run has no values of (brackets outside the brackets task).
function curveFigure(curve, snapshots, at, phase) {
  const lines = curveLines(curve, snapshots).filter((l) => l.points.length);
  if (!lines.length) return null;
  const fig = node("figure", { className: "train-curve" });
  fig.dataset.curve = curve.key;
  const last = snapshots[snapshots.length - 1].step || 1;
  const y = niceScale([...(curve.span || []), ...lines.flatMap((l) => l.points.map((p) => p[1]))]);
  const X = (step) => PAD.l + (step / last) * (W - PAD.l - PAD.r);
  const Y = (v) => H - PAD.b - ((v - y.min) / (y.max - y.min || 1)) * (H - PAD.t - PAD.b);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "train-svg", role: "img" });
  svg.setAttribute("aria-label", `${curve.title} over ${last} steps`);
  for (const t of y.ticks) {
    svg.append(el("line", { x1: PAD.l, x2: W - PAD.r, y1: Y(t), y2: Y(t), class: "train-grid" }));
    svg.append(el("text", { x: PAD.l - 4, y: Y(t) + 3, "text-anchor": "end", class: "train-tick" }, fmt(t)));
  }
  svg.append(el("text", { x: PAD.l, y: H - 4, class: "train-tick" }, "0"));
  svg.append(el("text", { x: W - PAD.r, y: H - 4, "text-anchor": "end", class: "train-tick" }, `step ${last}`));
  if (phase && (curve.phase || curve.key === "induction")) {
    fig.dataset.phase = String(phase.step);
    svg.append(el("line", { x1: X(phase.step), x2: X(phase.step), y1: PAD.t, y2: H - PAD.b, class: "train-phase" }));
    svg.append(el("text", { x: X(phase.step) + 3, y: PAD.t + 9, class: "train-tick" }, "phase change"));
  }
  if (at != null) svg.append(el("line", { x1: X(at), x2: X(at), y1: PAD.t, y2: H - PAD.b, class: "train-at" }));
  const legend = node("span", { className: "train-legend" });
  lines.forEach((line, i) => {
    const ink = INKS[i % INKS.length];
    const points = line.points.map(([s, v]) => `${X(s).toFixed(1)},${Y(v).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { points, fill: "none", stroke: ink, "stroke-width": 1.5, "data-label": line.label }));
    const key = node("span", { className: "train-key" }, line.label);
    key.style.borderColor = ink;
    legend.append(key);
  });
  const cap = node("figcaption", {}, curve.title);
  cap.append(legend);
  fig.append(cap, svg);
  return fig;
}

function fmt(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1000 || a < 0.01 ? v.toExponential(0) : String(Number(v.toPrecision(3)));
}

// The probe's tokens as a text the run's tokenizer reads back into them: the synthetic tasks' words apart, the text
// task's byte-level pieces decoded (GPT-2's bytes shown as characters, "Ġ" a space), less the last TEXT_SPARE
// pieces, since the tokenizer may merge the decoded text otherwise than the probe's slice of its stream. It fits the
// positions the model was made for.
const TEXT_SPARE = 8;

export function probeText(tokens, task) {
  if (task !== "text") return tokens.join(" ");
  const chars = tokens.slice(0, Math.max(1, tokens.length - TEXT_SPARE)).join("");
  const bytes = Uint8Array.from([...chars], (c) => byteOf(c.codePointAt(0)));
  return new TextDecoder().decode(bytes);
}

// GPT-2's byte-level alphabet read back: the printable bytes stand for themselves, every other byte n for the
// character 256 + its rank among those others.
function byteOf(code) {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  if (code < 256 && printable(code)) return code;
  let rank = code - 256;
  for (let b = 0; b < 256; b++) {
    if (printable(b)) continue;
    if (rank === 0) return b;
    rank -= 1;
  }
  return 63; // "?": no byte of the alphabet
}

// The snapshot picked opened as the model train:RUN@STEP in Explore (its entry added to the page's models).
async function openInExplore(col) {
  const snap = col.snapshots[col.at];
  if (!snap) return;
  const { store } = col.lab;
  try {
    const model = await snapshotModel(`train:${col.run.id}@${snap.step}`);
    const others = store.getState().models.filter((m) => m.name !== model.name);
    store.dispatch(act.modelsLoaded([...others, model]));
    const text = probeText(snap.heads?.tokens ?? snap.probe?.tokens ?? [], col.run.spec?.task);
    store.dispatch(act.modelChosen(model.name, `train-open-${col.side}`, text ? { text } : {}));
    openWorkspace("explore", { push: true });
  } catch (err) {
    say(col.lab, describeError(err).message);
  }
}

// A kept run deleted (trainruns.js): a column that showed it shows no run.
function forgetRun(lab, id) {
  for (const col of Object.values(lab.cols)) {
    if (col.run?.id !== id) continue;
    col.source?.close();
    Object.assign(col, { run: null, status: "", snapshots: [], at: -1, source: null });
    drawColumn(col);
  }
}

// ---- the lab: form, experiments, and the kept runs' list (trainruns.js) ----

function say(lab, text) {
  lab.part("train-status").textContent = text;
}

// Start a run into column `side`; a server already training as many runs as it allows (429) takes it once one of
// the page's runs ends: the column says it waits, and the promise resolves when it starts.
async function startRun(lab, body, side) {
  let started;
  try {
    started = await callJson("/api/train", { method: "POST", body: JSON.stringify(body) });
  } catch (err) {
    if (err.status !== 429 || !Object.values(lab.cols).some((c) => c.run && !ENDED.has(c.status))) throw err;
    const col = lab.cols[side];
    col.source?.close();
    Object.assign(col, { run: { id: "", name: body.name || body.task, spec: body }, status: "waiting", error: null });
    Object.assign(col, { snapshots: [], at: -1, source: null });
    drawColumn(col);
    return new Promise((resolve, reject) => lab.waiting.push({ body, side, resolve, reject }));
  }
  follow(lab.cols[side], { id: started.id, name: started.name, spec: body });
  lab.refreshRuns();
  return started;
}

// What the lab has measured of the experiment started last, told to the store (trainmeasures.js): each spec's run
// as its column follows it, in the specs' order; a run not started yet, or no longer shown, has no snapshots.
function publish(lab) {
  const cur = lab.current;
  if (!cur) return;
  const runs = cur.exp.specs.map((_, i) => {
    const col = lab.cols[SIDES[i]];
    if (!cur.ids[i] || col.run?.id !== cur.ids[i]) return { status: "waiting", steps: [], measures: [] };
    return {
      status: col.status,
      steps: col.snapshots.map((s) => s.step),
      measures: col.snapshots.map((s) => s.measures),
    };
  });
  lab.store.dispatch(act.trainMeasured({ experiment: cur.exp.id, runs }));
}

// A run ended: the first run waiting for a free slot starts.
function startWaiting(lab) {
  const next = lab.waiting.shift();
  if (next) startRun(lab, next.body, next.side).then(next.resolve, next.reject);
}

async function runExperiment(lab, exp) {
  const look = lab.part("train-lookat");
  look.hidden = false;
  const curve = CURVES.find((c) => c.key === curveOf(exp.measure));
  look.replaceChildren(node("strong", {}, `${exp.title}. `), exp.look_at);
  if (curve) look.append(` The curve that shows it is outlined in both columns: ${curve.title}.`);
  const claim = lab.part("train-claim");
  claim.hidden = false;
  claim.dataset.held = "";
  claim.textContent = `When the runs end, this checks: ${exp.claim}.`;
  try {
    const pending = { exp, ids: [] };
    lab.pending = pending;
    lab.current = pending;
    publish(lab);
    lab.keyCurve = curveOf(exp.measure);
    say(lab, `${exp.title}: ${exp.specs.length > 1 ? "its runs start one after the other" : "started"}`);
    for (const [i, spec] of exp.specs.entries()) {
      const body = { ...spec, name: `${exp.title}: ${exp.labels[i]}` };
      pending.ids.push((await startRun(lab, body, SIDES[i])).id);
    }
  } catch (err) {
    say(lab, describeError(err).message);
  }
}

// Once every run of the experiment started last has ended: its claim checked and the figure it read shown.
async function ended(lab) {
  const p = lab.pending;
  if (!p || p.ids.length < p.exp.specs.length) return;
  const cols = p.ids.map((id) => Object.values(lab.cols).find((c) => c.run?.id === id));
  if (cols.some((c) => !c || !ENDED.has(c.status))) return;
  lab.pending = null;
  const claim = lab.part("train-claim");
  try {
    const out = await callJson(`/api/train/experiments/${p.exp.id}/check?runs=${p.ids.join(",")}`);
    const figure = out.figure == null ? "not a number" : String(Number(out.figure.toPrecision(3)));
    claim.dataset.held = String(out.held);
    claim.textContent =
      `${out.held ? "The claim held" : "The claim did not hold"}: ${out.claim} ` +
      `(the figure it read: ${figure}, from ${out.measure} at steps ${out.steps.join(" and ")}).`;
  } catch (err) {
    claim.textContent = `The claim could not be checked: ${describeError(err).message}`;
  }
}

function drawExperiments(lab) {
  const box = lab.part("train-experiments");
  box.replaceChildren(
    ...lab.experiments.map((exp) => {
      const card = node("div", { className: "train-exp" });
      const b = node("button", { type: "button", className: "secondary" }, exp.title);
      b.dataset.experiment = exp.id;
      b.setAttribute("data-testid", `train-exp-${exp.id}`);
      b.toggleAttribute("data-asked", exp.id === lab.asked);
      b.addEventListener("click", () => runExperiment(lab, exp));
      card.append(b, node("p", { className: "muted small" }, `${exp.labels.join(" vs ")}: ${exp.look_at}`));
      return card;
    }),
  );
}

// Fetched the first time the workspace is shown: the experiments and the kept runs.
async function startLab(lab) {
  lab.started = true;
  lab.refreshRuns();
  try {
    lab.experiments = (await callJson("/api/train/experiments")).experiments;
    drawExperiments(lab);
  } catch (err) {
    say(lab, describeError(err).message);
  }
}

// Drawn from its own runs: of the page's state, only the open lesson (its experiment, what it hides) counts here.
export function deps(s) {
  return [s.ui.lesson?.id ?? null, keptHidden(s)];
}

export function render(root, s) {
  const lab = labs.get(root);
  if (!lab) return;
  if (!lab.started) startLab(lab);
  markGiveaways(root, s, ["lookat", "trainverdict"]); // a training lesson's answer, told before it is checked
  lab.asked = lessonOf(s.ui.lesson?.id)?.experiment ?? null; // the open lesson's experiment, its button outlined
  for (const b of lab.part("train-experiments").querySelectorAll("button[data-experiment]"))
    b.toggleAttribute("data-asked", b.dataset.experiment === lab.asked);
}

export function bind(root, store) {
  const part = within(root);
  const lab = {
    part,
    store,
    cols: {},
    experiments: [],
    pending: null,
    current: null,
    waiting: [],
    keyCurve: null,
    asked: null,
    started: false,
    refreshRuns: null, // the kept runs fetched and drawn again (trainruns.js bindRuns)
  };
  labs.set(root, lab);
  part("train-knobs").replaceChildren(...KNOBS.map(knobInput));
  for (const side of SIDES) lab.cols[side] = makeColumn(lab, side, root.querySelector(`[data-run-col=${side}]`));
  part("train-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    for (const input of part("train-knobs").querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
    try {
      const side = part("train-into").value;
      const started = await startRun(lab, specOf(e.target), side);
      say(lab, `started ${started.name}`);
      bringTop(lab.cols[side].root); // the column that shows the run, in sight as it starts
    } catch (err) {
      // a knob the server refused (past a limit, heads not dividing the width) is marked, and the focus goes there
      const { message, field } = describeError(err);
      say(lab, message);
      const knob = field && part(`train-${field}`);
      if (knob) {
        knob.setAttribute("aria-invalid", "true");
        knob.focus();
      }
    }
  });
  lab.refreshRuns = bindRuns(part("train-kept"), SIDES, {
    show(run, side) {
      follow(lab.cols[side], run);
      lab.cols[side].bring = true; // its heads come into sight once drawn (the list may reach far below them)
    },
    forget: (id) => forgetRun(lab, id),
    say: (text) => say(lab, text),
  });
}
