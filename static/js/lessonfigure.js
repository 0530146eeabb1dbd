// A lesson's figure (lessons' `figure`, e.g. Figure 21.4): its heads drawn side by side inside the lesson card,
// each from the server's answer to its matrix (POST /api/attention with the given model's `pattern`: the server
// checks every row and returns the weights it uses). Rows and columns are labelled from 1, as the chapter's figure.

import { fetchAttentionJson } from "./api.js";
import { VIRIDIS, colorAt, rgbString } from "./colors.js";
import { node } from "./dom.js";

const FIGURE_MODEL = "given"; // the model that takes a weight matrix as given (`pattern`)

// The /api/attention body that draws one of a figure's heads.
export function figureRequest(head) {
  return { model: FIGURE_MODEL, pattern: head.m, masks: { causal: true }, include: ["weights"] };
}

// One head as a table of its weights: a coloured cell per (query, key), the weight written in it.
function headTable(name, weights) {
  const table = node("table", { className: "lesson-figure-head" });
  table.append(node("caption", {}, name));
  const head = node("tr");
  head.append(
    node("th", { scope: "col" }, "q \\ k"),
    ...weights[0].map((_, k) => node("th", { scope: "col" }, String(k + 1))),
  );
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

// Draw the figure's heads into `el` once (the lesson's id marks what is drawn); an empty `el` for no figure. `models`
// (/api/models' list) says whether this server serves the model that draws them.
export async function renderFigure(el, lesson, models = []) {
  const served = models.some((m) => m.name === FIGURE_MODEL);
  const key = lesson?.figure && models.length ? `${lesson.id}${served ? "" : ":absent"}` : "";
  if (el.dataset.figure === key) return;
  el.dataset.figure = key;
  el.replaceChildren();
  el.hidden = !key;
  if (!key) return;
  if (!served) {
    el.replaceChildren(
      node(
        "p",
        { className: "notice" },
        `The figure's heads are drawn by the ${FIGURE_MODEL} model, which this server does not serve.`,
      ),
    );
    return;
  }
  const heads = Object.values(lesson.figure);
  try {
    const answers = await Promise.all(heads.map((h) => fetchAttentionJson(figureRequest(h))));
    if (el.dataset.figure !== key) return;
    el.replaceChildren(...answers.map((a, i) => headTable(heads[i].name, a.layers[0].heads[0].weights)));
  } catch (err) {
    if (el.dataset.figure === key)
      el.replaceChildren(node("p", { className: "notice" }, `The figure could not be drawn: ${err.message}`));
  }
}
