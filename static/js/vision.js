// The Vision workspace (data-view="vision", templates/vision.html): an image model's patches as tokens, drawn over the
// picture. The models are those GET /api/models says read pixels; the image is a shipped sample (a digit by number, or
// a photograph), drawn from GET /api/samples/{name}, or the person's own PNG or JPEG (a file input or a drop), read in
// the browser and sent as base64 `image`, the server's limits answering a refusal that is shown under the panel's head
// and marks the control. One POST /api/attention (every layer's weights and rollout, the masks over patches as blocked
// cells) answers each change, or POST /api/intervene while heads are ablated (its `after` drawn). The image is drawn
// (visionpicture.js) with its patch grid and, over each patch, a veil whose opacity is 1 - w / max (visiongrid.js
// veilAlphas, times VEIL_MAX) for the row shown: the chosen patch's, the [CLS]'s, or the [CLS]'s rollout, for one head
// or the heads averaged. Every head of the layer is a thumbnail, and every layer's heads a grid of them
// (visionlayers.js); pressing one chooses it. A patch is chosen by a click
// or a tap, or by the arrow keys (a cursor) and Enter, and a live line says what it looks at most. Its state is its
// own, as the Train workspace's is: it looks up its parts inside its root (dom.js within) and fetches the models the
// first time it is shown. Patching from a second image (a shipped digit or photograph, or the person's own file:
// visionpatch.js) runs POST /api/patch with the image shown as the clean input and draws, per position, for each layer
// how much of the clean output each patch brings back, or, per head, a layer x head table of the same shares.

import { ApiError, analyse, describeError, fetchAttention, fetchIntervene, fetchModels } from "./api.js";
import { bringIntoView, node, within } from "./dom.js";
import { blockedCells, firstPatch, moveCursor, patchOfToken, tokenOfPatch } from "./visiongrid.js";
import { bindLayers, drawLayers } from "./visionlayers.js";
import { THUMB, drawThumbs, mark, paint, picture, pictureKey, shownRow } from "./visionpicture.js";
import { headLine, headTable, otherImage, patchBody } from "./visionpatch.js";

const INCLUDE = ["weights", "rollout"];

const labs = new WeakMap(); // root -> its state

// The pixel models of a /api/models list.
export function imageModels(models) {
  return models.filter((m) => m.reads?.includes("pixels") && m.image);
}

function say(lab, text) {
  lab.part("vision-status").textContent = text;
}

// A refusal under the panel's head, and the control it names marked (cleared by the next answer).
function showError(lab, err) {
  const { message, field } = describeError(err);
  const box = lab.part("vision-error");
  box.textContent = message;
  box.hidden = false;
  box.dataset.field = field || "";
  const named = field || "";
  const control =
    { "corrupted.image": "vision-other-file", "corrupted.sample": "vision-corrupt" }[named] ??
    { image: "vision-file", sample: "vision-digit", masks: "vision-radius", clean: "vision-file" }[
      named.split(/[.[]/)[0]
    ];
  if (control) lab.part(control).setAttribute("aria-invalid", "true");
  say(lab, "refused");
}

function clearError(lab) {
  const box = lab.part("vision-error");
  box.hidden = true;
  box.textContent = "";
  for (const c of lab.root.querySelectorAll("[aria-invalid]")) c.removeAttribute("aria-invalid");
}

// The /api/attention body of the image to show, with the masks over the patches of the image shown and its heads
// ablated (then it is /api/intervene's body); a new image goes without them.
export function visionBody(lab) {
  const body = { model: lab.model.name, ...lab.source.body, include: INCLUDE };
  const a = lab.answer;
  if (!a || lab.source !== lab.shown) return body;
  if (lab.keys.length || lab.radius != null) {
    const cells = blockedCells(lab.keys, lab.radius, a.config.patch_grid, firstPatch(a.tokens), a.tokens.length);
    if (cells.length) body.masks = { blocked: cells };
  }
  if (lab.ablated.length) body.ablate = lab.ablated.map(([layer, head]) => ({ layer, head }));
  return body;
}

async function run(lab) {
  const asked = ++lab.asked;
  say(lab, "computing…");
  try {
    const body = visionBody(lab);
    // every layer's weights in the arrays form (float32 rows, the numbers JSON would spell): a ViT-Base answer is
    // 22 MB there against 76 MB of JSON text, which the page would parse before drawing anything
    const got = body.ablate ? await fetchIntervene(body) : await fetchAttention(body);
    if (asked !== lab.asked) return;
    clearError(lab);
    // with heads ablated, the weights drawn are the run's with them ablated, and how far the last layer's output
    // moved at each token is kept for the live line
    const answer = body.ablate ? got.after : got;
    lab.moved = body.ablate ? got.final_delta : null;
    lab.answer = answer;
    if (lab.source !== lab.shown) clearMasks(lab); // they named the tokens of the image shown before
    lab.shown = lab.source;
    const grid = answer.config.patch_grid;
    if (!patchOfToken(lab.query, grid, firstPatch(answer.tokens))) lab.query = firstPatch(answer.tokens);
    lab.layer = Math.min(lab.layer ?? Infinity, answer.layers.length - 1);
    say(lab, `${lab.model.name} on ${lab.source.label}: ${answer.tokens.length} tokens`);
    draw(lab);
  } catch (err) {
    if (asked !== lab.asked) return;
    showError(lab, err);
    if (lab.shown) lab.source = lab.shown; // the image drawn, with its masks, stays the one the next run reads
  }
}

// A new image: run without the masks, which are cleared once it is answered (a refused image leaves them).
function choose(lab, source) {
  lab.source = source;
  run(lab);
}

function clearMasks(lab) {
  lab.keys = [];
  lab.ablated = [];
  lab.radius = null;
  lab.part("vision-radius").value = "";
}

function sample(name) {
  return { body: { sample: name }, url: `/api/samples/${name}`, label: name };
}

// ---- drawing (the pictures: visionpicture.js) ----

function draw(lab) {
  const a = lab.answer;
  if (!a) return;
  const layers = a.layers.length;
  const heads = a.layers[0].heads.length;
  lab.part("vision-ablate").disabled = lab.head === "mean";
  fill(
    lab.part("vision-layer"),
    Array.from({ length: layers }, (_, i) => [String(i), `layer ${i}`]),
    lab.layer,
  );
  const names = [["mean", "averaged over heads"], ...Array.from({ length: heads }, (_, i) => [String(i), `head ${i}`])];
  fill(lab.part("vision-head"), names, lab.head);
  const row = shownRow(lab, lab.head);
  const key = pictureKey(lab);
  const image = lab.part("vision-image");
  if (lab.big?.key !== key) lab.big = picture(lab, key, { big: true });
  if (lab.big.svg.parentNode !== image) image.replaceChildren(lab.big.svg);
  paint(lab, lab.big, row);
  mark(lab, lab.big);
  image.dataset.query = String(lab.query);
  image.dataset.layer = String(lab.layer);
  image.dataset.head = String(lab.head);
  drawThumbs(lab, key);
  drawLayers(lab, key);
  lab.part("vision-masked").textContent = maskedLine(lab);
  lab.part("vision-readout").textContent = readout(lab, row);
  drawPatched(lab);
  if (lab.bring) bringImage(lab);
}

// After an act away from the image that changes it (a thumbnail, a mask, an ablation: below the image on a phone),
// the image is brought into the viewport if it is out of it, as every act on the page leaves what it changed in
// sight; so are the patching thumbnails once drawn.
function bringImage(lab) {
  lab.bring = false;
  bringIntoView(lab.part("vision-image"));
}

function fill(select, options, value) {
  const values = options.map(([v]) => v).join();
  if (select.dataset.values !== values) {
    select.replaceChildren(...options.map(([v, text]) => node("option", { value: v }, text)));
    select.dataset.values = values;
  }
  select.value = String(value);
}

function maskedLine(lab) {
  const a = lab.answer;
  const keys = lab.keys.map((k) => a.tokens[k]).join(", ");
  const parts = [];
  if (keys) parts.push(`blocked as keys: ${keys}`);
  if (lab.radius != null) parts.push(`a 2-D window of ${lab.radius} patch${lab.radius === 1 ? "" : "es"}`);
  if (lab.ablated.length) {
    const heads = lab.ablated.map(([l, h]) => `layer ${l} head ${h}`).join(", ");
    const moved = lab.moved ? lab.moved[lab.query].toFixed(3) : "?";
    parts.push(`ablated: ${heads} (the last layer's output at ${a.tokens[lab.query]} moved by ${moved})`);
  }
  return parts.length ? parts.join("; ") : "no masks";
}

// What the row shown looks at most, for the live line.
function readout(lab, row) {
  const a = lab.answer;
  const map = lab.part("vision-map").value;
  const who = map === "patch" ? a.tokens[lab.query] : "[CLS]";
  const first = firstPatch(a.tokens);
  let best = first;
  for (let t = first; t < row.length; t++) if (row[t] > row[best]) best = t;
  const head = lab.head === "mean" ? "heads averaged" : `head ${lab.head}`;
  const what = map === "rollout" ? "rollout" : head;
  const cursor = lab.cursor
    ? ` Cursor on ${a.tokens[tokenOfPatch(lab.cursor.row, lab.cursor.col, a.config.patch_grid[1], first)]}: Enter chooses it.`
    : "";
  return `${who}, layer ${lab.layer}, ${what}: most on ${a.tokens[best]} (${row[best].toFixed(3)}), [CLS] ${row[0].toFixed(3)}.${cursor}`;
}

// ---- patching from a second image ----

async function runPatch(lab) {
  if (!lab.answer) return;
  const part = lab.part;
  const other = otherImage(part("vision-other").value, part("vision-corrupt").value, lab.upload);
  if (!other) {
    // refused here as the server refuses: the message names the field, and its control is marked
    const [field, missing] =
      part("vision-other").value === "file"
        ? ["corrupted.image", "choose your other image (a PNG or JPEG) first"]
        : ["corrupted.sample", "give the other digit's number (0 or more)"];
    showError(lab, new ApiError(422, "invalid_request", field, `${field}: ${missing}`));
    return;
  }
  const hook = part("vision-hook").value;
  const asked = ++lab.patchAsked;
  say(lab, `patching from ${other.label}…`);
  try {
    const got = await analyse("patch", patchBody(lab.model.name, lab.shown, other, hook));
    if (asked !== lab.patchAsked) return;
    clearError(lab);
    lab.patched = { got, other, shown: lab.shown };
    say(lab, `patched from ${other.label}: ${got.forwards} forward passes`);
    drawPatched(lab);
    bringIntoView(lab.part("vision-patching"));
  } catch (err) {
    if (asked === lab.patchAsked) showError(lab, err);
  }
}

// One thumbnail a layer: the share of the change each patch's residual stream brings back (recovered, below 0 read
// as 0) as veils over the clean image.
function drawPatched(lab) {
  const out = lab.part("vision-patching");
  const p = lab.patched;
  if (!p || p.shown !== lab.shown || !lab.answer) {
    out.replaceChildren();
    lab.part("vision-patch-line").textContent = "";
    lab.patchDrawn = null;
    return;
  }
  // drawn already: the shares follow no layer, head or patch chosen
  const key = pictureKey(lab);
  if (lab.patchDrawn?.p === p && lab.patchDrawn.key === key) return;
  lab.patchDrawn = { p, key };
  const { got } = p;
  if (got.hook === "z") {
    out.replaceChildren(headTable(got));
    lab.part("vision-patch-line").textContent = headLine(got, p.other.label, lab.shown.label);
    return;
  }
  const first = firstPatch(got.tokens);
  const grid = got.recovered.map((row) => row.map((v) => v ?? 0)); // null: clean and corrupted alike
  let best = [0, first];
  for (let l = 0; l < grid.length; l++)
    for (let t = first; t < grid[l].length; t++) if (grid[l][t] > grid[best[0]][best[1]]) best = [l, t];
  out.replaceChildren(
    ...grid.map((values, layer) => {
      const figure = node("figure", { className: "vision-thumb" });
      figure.dataset.layer = String(layer);
      const pic = picture(lab, key, { big: false });
      pic.svg.setAttribute("width", String(THUMB));
      paint(lab, pic, values);
      figure.append(pic.svg, node("figcaption", { className: "small" }, `before layer ${layer}`));
      return figure;
    }),
  );
  const [layer, t] = best;
  lab.part("vision-patch-line").textContent =
    `From ${p.other.label} to ${lab.shown.label}: the final output is ${got.corrupted_metric.toFixed(3)} away; ` +
    `patching ${got.tokens[t]} before layer ${layer} brings back the most (${grid[layer][t].toFixed(3)}).`;
}

// ---- the person's acts ----

function pick(lab, token) {
  lab.query = token;
  if (lab.part("vision-map").value !== "patch") lab.part("vision-map").value = "patch";
  draw(lab);
}

// A PNG or JPEG file read in the browser as a data URL (sent as base64 `image`, drawn from the URL), then `then`.
function readFile(file, then) {
  if (!file) return;
  const reader = new FileReader();
  reader.addEventListener("load", () =>
    then({ body: { image: String(reader.result) }, url: String(reader.result), label: file.name }),
  );
  reader.readAsDataURL(file);
}

async function start(lab) {
  lab.started = true;
  say(lab, "loading the models…");
  try {
    const models = imageModels(await fetchModels());
    lab.models = models;
    const select = lab.part("vision-model");
    select.replaceChildren(...models.map((m) => node("option", { value: m.name }, m.name)));
    if (!models.length) {
      say(lab, "this server holds no model that reads images (serve one with --models digits)");
      return;
    }
    lab.model = models[0];
    lab.part("vision-digit").max = String(lab.model.image.samples.digits - 1);
    lab.part("vision-photos").replaceChildren(
      ...lab.model.image.samples.photos.map((name) => {
        const b = node("button", { type: "button", className: "secondary small-btn" }, name);
        b.dataset.photo = name;
        return b;
      }),
    );
    const other = lab.part("vision-other");
    const photos = lab.model.image.samples.photos.map((name) =>
      node("option", { value: name }, `the photograph ${name}`),
    );
    other.replaceChildren(other.options[0], ...photos, other.options[other.options.length - 1]);
    other.value = "digit"; // re-inserted options leave the last one selected
    choose(lab, sample("digit-0"));
  } catch (err) {
    showError(lab, err);
  }
}

// Drawn from its own state: nothing of the page's store counts here.
export function deps() {
  return [];
}

export function render(root) {
  const lab = labs.get(root);
  if (lab && !lab.started) start(lab);
}

export function bind(root) {
  const part = within(root);
  const lab = {
    root,
    part,
    started: false,
    models: [],
    model: null,
    source: null,
    shown: null,
    answer: null,
    asked: 0,
    layer: null,
    head: "mean",
    query: 1,
    cursor: null,
    keys: [],
    radius: null,
    ablated: [], // [layer, head] pairs, zeroed
    moved: null,
    patchAsked: 0,
    patched: null, // {got: the /api/patch answer, other: the corrupted image ({body, label}), shown: the clean source}
    upload: null, // the person's other image for patching, {body: {image}, label}, once chosen
    bring: false, // the next draw brings the image into sight
    big: null, // the image's picture, kept between draws (picture)
    thumbs: null, // {key, buttons, canvases}: the heads' thumbnails, kept between draws
    patchDrawn: null, // {p: the patching answer drawn, key: its pictures' key}
    pixels: null, // {url, img, ready, waiting}: the image shown, loaded once for the canvases (pixelsOf)
    accent: null, // the veils' colour on a canvas, read from the page's --accent once
    layerGrid: null, // every layer's heads (visionlayers.js), kept between draws
    accentRgb: null, // --accent as [r, g, b], for the grid's veils
  };
  labs.set(root, lab);
  part("vision-model").addEventListener("change", (e) => {
    lab.model = lab.models.find((m) => m.name === e.target.value) || lab.model;
    lab.answer = null; // its masks and heads named the other model's tokens and heads
    lab.layer = null;
    clearMasks(lab);
    run(lab);
  });
  part("vision-digit-go").addEventListener("click", () => choose(lab, sample(`digit-${part("vision-digit").value}`)));
  part("vision-photos").addEventListener("click", (e) => {
    const b = e.target.closest("[data-photo]");
    if (b) choose(lab, sample(b.dataset.photo));
  });
  part("vision-file").addEventListener("change", (e) => readFile(e.target.files[0], (source) => choose(lab, source)));
  part("vision-other-file").addEventListener("change", (e) =>
    readFile(e.target.files[0], (source) => {
      lab.upload = source;
      part("vision-other").value = "file";
      part("vision-other-file").dataset.read = source.label; // read: the next patching sends it
    }),
  );
  const image = part("vision-image");
  image.addEventListener("dragover", (e) => e.preventDefault());
  image.addEventListener("drop", (e) => {
    e.preventDefault();
    readFile(e.dataTransfer.files[0], (source) => choose(lab, source));
  });
  image.addEventListener("click", (e) => {
    const cell = e.target.closest("[data-token]");
    if (!cell) return;
    lab.cursor = null;
    pick(lab, Number(cell.dataset.token));
  });
  image.addEventListener("keydown", (e) => {
    const a = lab.answer;
    if (!a) return;
    const grid = a.config.patch_grid;
    const first = firstPatch(a.tokens);
    const from = lab.cursor || patchOfToken(lab.query, grid, first) || { row: 0, col: 0 };
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      lab.cursor = null; // the cursor's patch is the chosen one now, framed as a click frames it
      pick(lab, tokenOfPatch(from.row, from.col, grid[1], first));
      return;
    }
    const to = moveCursor(from, e.key, grid);
    if (!to) return;
    e.preventDefault();
    lab.cursor = to;
    draw(lab);
  });
  for (const id of ["vision-layer", "vision-head", "vision-map"]) {
    part(id).addEventListener("change", () => {
      lab.layer = Number(part("vision-layer").value);
      lab.head = part("vision-head").value;
      draw(lab);
    });
  }
  part("vision-heads").addEventListener("click", (e) => {
    const b = e.target.closest("[data-head]");
    if (!b) return;
    lab.head = b.dataset.head;
    lab.bring = true;
    draw(lab);
  });
  bindLayers(lab, (layer, head) => {
    lab.layer = layer;
    lab.head = head;
    lab.bring = true;
    draw(lab);
  });
  part("vision-block").addEventListener("click", () => {
    if (!lab.answer || !patchOfToken(lab.query, lab.answer.config.patch_grid, firstPatch(lab.answer.tokens))) return;
    lab.keys = lab.keys.includes(lab.query) ? lab.keys.filter((k) => k !== lab.query) : [...lab.keys, lab.query];
    lab.bring = true;
    run(lab);
  });
  part("vision-radius").addEventListener("change", (e) => {
    const v = e.target.value.trim();
    lab.radius = v === "" ? null : Math.max(0, Math.floor(Number(v)));
    lab.bring = true;
    run(lab);
  });
  part("vision-ablate").addEventListener("click", () => {
    if (!lab.answer || lab.head === "mean") return;
    const at = [lab.layer, Number(lab.head)];
    const on = lab.ablated.some(([l, h]) => l === at[0] && h === at[1]);
    lab.ablated = on ? lab.ablated.filter(([l, h]) => l !== at[0] || h !== at[1]) : [...lab.ablated, at];
    lab.bring = true;
    run(lab);
  });
  part("vision-patch").addEventListener("click", () => runPatch(lab));
  part("vision-patching").addEventListener("click", (e) => {
    const cell = e.target.closest(".vision-cell");
    if (!cell || !lab.answer) return;
    lab.layer = Number(cell.dataset.layer);
    lab.head = cell.dataset.head;
    lab.bring = true;
    draw(lab);
  });
  part("vision-clear").addEventListener("click", () => {
    clearMasks(lab);
    lab.bring = true;
    run(lab);
  });
}
