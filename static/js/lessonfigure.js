// A lesson's figure (lessons' `figure`, e.g. Figure 21.4): its heads drawn side by side inside the lesson card,
// each from the server's answer to its matrix (POST /api/attention with the given model's `pattern`: the server
// checks every row and returns the weights it uses). Rows and columns are labelled from 1, as the chapter's figure.

import { fetchAttentionJson } from "./api.js";
import { VIRIDIS, colorAt, rgbString } from "./colors.js";
import { node } from "./dom.js";

// The /api/attention body that draws one of a figure's heads.
export function figureRequest(head) {
  return { model: "given", pattern: head.m, masks: { causal: true }, include: ["weights"] };
}

// One head as a table of its weights: a coloured cell per (query, key), the weight written in it.
function headTable(name, weights) {
  const table = node("table", { className: "lesson-figure-head" });
  table.append(node("caption", {}, name));
  const head = node("tr");
  head.append(node("th", { scope: "col" }, "q \\ k"), ...weights[0].map((_, k) => node("th", { scope: "col" }, String(k + 1))));
  table.append(head);
  weights.forEach((row, q) => {
    const tr = node("tr");
    tr.append(node("th", { scope: "row" }, String(q + 1)));
    for (const v of row) {
      const td = node("td", {}, v === 0 ? "0" : v.toFixed(2));
      const rgb = colorAt(VIRIDIS, v);
      td.style.background = rgbString(rgb);
      td.style.color = v > 0.55 ? "#000" : "#fff";
      tr.append(td);
    }
    table.append(tr);
  });
  return table;
}

// Draw the figure's heads into `el` once (the lesson's id marks what is drawn); an empty `el` for no figure.
export async function renderFigure(el, lesson) {
  if (el.dataset.figure === (lesson?.figure ? lesson.id : "")) return;
  el.dataset.figure = lesson?.figure ? lesson.id : "";
  el.replaceChildren();
  el.hidden = !lesson?.figure;
  if (!lesson?.figure) return;
  const heads = Object.values(lesson.figure);
  try {
    const answers = await Promise.all(heads.map((h) => fetchAttentionJson(figureRequest(h))));
    if (el.dataset.figure !== lesson.id) return;
    el.replaceChildren(...answers.map((a, i) => headTable(heads[i].name, a.layers[0].heads[0].weights)));
  } catch (err) {
    if (el.dataset.figure === lesson.id) el.replaceChildren(node("p", { className: "notice" }, `The figure could not be drawn: ${err.message}`));
  }
}
