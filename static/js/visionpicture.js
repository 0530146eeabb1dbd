// The Vision workspace's pictures (vision.js draws them): the image under its patch grid with a veil over each patch,
// as an SVG built once for an image model's grid and kept, and every head of the layer as a canvas thumbnail. A draw
// sets only what changed. Each function takes the workspace's state (`lab`: its answer, model, image shown, the
// layer, head and patch chosen) and reads its parts inside its root through lab.part.

import { el, node } from "./dom.js";
import { firstPatch, meanRow, patchOfToken, tokenOfPatch, veilAlphas } from "./visiongrid.js";

export const THUMB = 96; // a head's thumbnail, in CSS pixels
export const VEIL_MAX = 0.85; // the veil's opacity where the weight is 0: the image stays faintly readable under it

// The row of numbers shown over the image, [CLS] and patches alike.
export function shownRow(lab, heads) {
  const a = lab.answer;
  const layer = a.layers[lab.layer];
  const map = lab.part("vision-map").value;
  if (map === "rollout") return layer.rollout[0];
  const q = map === "cls" ? 0 : lab.query;
  return heads === "mean" ? meanRow(layer.heads, q) : layer.heads[heads].weights[q];
}

// A picture: the image under its grid and a veil over each patch, as an SVG in the model's input pixels. It is built
// once for an image model's grid and kept: a draw sets only what changed (each veil's opacity and title, the blocked
// crosses, the chosen patch's frame, the cursor), so that a layer, head or patch chosen paints the same elements
// again instead of building the image and its thumbnails anew. `key` names what it was built for.
export function picture(lab, key, { big }) {
  const a = lab.answer;
  const [rows, cols] = a.config.patch_grid;
  const [h, w] = lab.model.image.size;
  const p = lab.model.image.patch_size;
  const first = firstPatch(a.tokens);
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, class: big ? "vision-svg" : "vision-thumb-svg" });
  const image = el("image", { x: 0, y: 0, width: w, height: h, preserveAspectRatio: "none", class: "vision-pixels" });
  svg.append(image);
  const veils = [];
  const titles = [];
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const veil = el("rect", { x: c * p, y: r * p, width: p, height: p, class: "vision-veil" });
      if (big) {
        veil.dataset.token = String(tokenOfPatch(r, c, cols, first));
        const title = el("title");
        title.append(document.createTextNode(""));
        veil.append(title);
        titles.push(title.firstChild);
      }
      svg.append(veil);
      veils.push(veil);
    }
  }
  const pic = { key, svg, image, veils, titles, alphas: [], first, grid: [rows, cols], p, href: null };
  if (!big) return pic;
  pic.crosses = el("g");
  pic.query = el("rect", { width: p, height: p, class: "vision-query" });
  pic.cursor = el("rect", { width: p, height: p, class: "vision-cursor" });
  svg.append(pic.crosses, pic.query, pic.cursor);
  return pic;
}

// What a picture is built for: the image model's input size and patch, the grid and where its patches start.
export function pictureKey(lab) {
  const a = lab.answer;
  const { size, patch_size } = lab.model.image;
  return `${size.join("x")}/${patch_size}/${a.config.patch_grid.join("x")}/${firstPatch(a.tokens)}`;
}

// `pic` over the image shown with the veils of `row`: each veil's opacity is VEIL_MAX times its alpha (visiongrid.js
// veilAlphas), set only where it changed.
export function paint(lab, pic, row) {
  if (pic.href !== lab.shown.url) {
    pic.image.setAttribute("href", lab.shown.url);
    pic.href = lab.shown.url;
  }
  const alphas = veilAlphas(row, pic.grid, pic.first);
  for (let i = 0; i < alphas.length; i++) {
    if (pic.alphas[i] === alphas[i]) continue;
    pic.veils[i].setAttribute("fill-opacity", String(VEIL_MAX * alphas[i]));
    pic.veils[i].dataset.alpha = String(alphas[i]);
  }
  pic.alphas = alphas;
  const a = lab.answer;
  for (let i = 0; i < pic.titles.length; i++) {
    const t = pic.first + i;
    pic.titles[i].data = `${a.tokens[t]}: ${row[t].toFixed(3)}`;
  }
}

// The large picture's marks: a cross over each patch blocked as a key, the chosen patch framed (while the map is a
// patch's row) and the keyboard's cursor.
export function mark(lab, pic) {
  const { p, first } = pic;
  const crosses = [];
  for (const t of lab.keys) {
    const at = patchOfToken(t, pic.grid, first);
    if (at) crosses.push(el("path", { d: cross(at.col * p, at.row * p, p), class: "vision-blocked" }));
  }
  pic.crosses.replaceChildren(...crosses);
  const at = patchOfToken(lab.query, pic.grid, first);
  place(pic.query, at && lab.part("vision-map").value === "patch" ? at : null, p);
  place(pic.cursor, lab.cursor, p);
}

// A frame on the patch `at` ({row, col}), or out of the picture when `at` is null.
function place(rect, at, p) {
  if (!at) {
    rect.setAttribute("display", "none");
    return;
  }
  rect.removeAttribute("display");
  rect.setAttribute("x", String(at.col * p));
  rect.setAttribute("y", String(at.row * p));
}

function cross(x, y, p) {
  return `M${x} ${y}L${x + p} ${y + p}M${x + p} ${y}L${x} ${y + p}`;
}

// The heads' thumbnails of the layer shown: one button a head, kept while the heads and the grid are the same, each
// its head's row drawn over the image on a canvas (one bitmap a thumbnail: a layer switch repaints twelve of them,
// where SVG veils were 2,352 elements to restyle and paint).
export function drawThumbs(lab, key) {
  const a = lab.answer;
  const heads = a.layers[lab.layer].heads.length;
  if (lab.thumbs?.key !== key || lab.thumbs.buttons.length !== heads) {
    const [h, w] = lab.model.image.size;
    const scale = window.devicePixelRatio || 1;
    const canvases = [];
    const buttons = Array.from({ length: heads }, (_, i) => {
      const button = node("button", { type: "button", className: "vision-thumb" });
      button.dataset.head = String(i);
      const canvas = node("canvas", { className: "vision-thumb-canvas" });
      canvas.width = Math.round(THUMB * scale);
      canvas.height = Math.round((THUMB * h * scale) / w);
      canvas.style.width = `${THUMB}px`;
      canvases.push(canvas);
      button.append(canvas, node("span", { className: "small" }, `head ${i}`));
      return button;
    });
    lab.thumbs = { key, buttons, canvases };
    lab.part("vision-heads").replaceChildren(...buttons);
  }
  const grid = a.config.patch_grid;
  const first = firstPatch(a.tokens);
  const pixels = pixelsOf(lab, "thumbs", () => lab.answer && lab.thumbs && drawThumbs(lab, lab.thumbs.key));
  lab.thumbs.buttons.forEach((button, i) => {
    button.setAttribute("aria-pressed", String(lab.head === String(i)));
    button.setAttribute("aria-label", `head ${i} of layer ${lab.layer}`);
    const canvas = lab.thumbs.canvases[i];
    const alphas = veilAlphas(shownRow(lab, String(i)), grid, first);
    if (canvas.drawn === pixels && canvas.ready === pixels.ready && sameNumbers(canvas.alphas, alphas)) return;
    veilCanvas(lab, canvas, pixels, alphas, grid);
  });
}

function sameNumbers(x, y) {
  if (!x || x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

// The image shown as an <img> the canvases draw from (the heads' thumbnails, every layer's grid), loaded once for
// both; until it has loaded, `onReady` is kept under `name` (one a drawer) and called once it has.
export function pixelsOf(lab, name, onReady) {
  if (lab.pixels?.url !== lab.shown.url) {
    const img = new Image();
    const pixels = { url: lab.shown.url, img, ready: false, waiting: new Map() };
    img.addEventListener("load", () => {
      pixels.ready = true;
      if (lab.pixels === pixels) for (const f of pixels.waiting.values()) f();
      pixels.waiting.clear();
    });
    img.src = lab.shown.url;
    lab.pixels = pixels;
  }
  if (!lab.pixels.ready) lab.pixels.waiting.set(name, onReady);
  return lab.pixels;
}

// A thumbnail's canvas: the image, then over each patch a veil of the accent at VEIL_MAX times its alpha, and the
// grid's lines, as the large picture's SVG draws them. The canvas keeps what it was drawn from: `alphas`, and the
// image (`drawn`, `ready`: whether its pixels were in).
function veilCanvas(lab, canvas, pixels, alphas, [rows, cols]) {
  const ctx = canvas.getContext("2d");
  const cw = canvas.width / cols;
  const ch = canvas.height / rows;
  ctx.globalAlpha = 1;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false; // the image's pixels as squares, as .vision-pixels draws them in the SVG
  if (pixels.ready) ctx.drawImage(pixels.img, 0, 0, canvas.width, canvas.height);
  lab.accent ??= getComputedStyle(canvas).getPropertyValue("--accent").trim() || "#2a5db0";
  ctx.fillStyle = lab.accent;
  for (let i = 0; i < alphas.length; i++) {
    ctx.globalAlpha = VEIL_MAX * alphas[i];
    ctx.fillRect((i % cols) * cw, Math.floor(i / cols) * ch, cw, ch);
  }
  ctx.globalAlpha = 1;
  ctx.strokeStyle = "rgba(255, 255, 255, 0.35)";
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let c = 0; c <= cols; c++) {
    ctx.moveTo(Math.round(c * cw) + 0.5, 0);
    ctx.lineTo(Math.round(c * cw) + 0.5, canvas.height);
  }
  for (let r = 0; r <= rows; r++) {
    ctx.moveTo(0, Math.round(r * ch) + 0.5);
    ctx.lineTo(canvas.width, Math.round(r * ch) + 0.5);
  }
  ctx.stroke();
  canvas.alphas = alphas;
  canvas.drawn = pixels;
  canvas.ready = pixels.ready;
}
