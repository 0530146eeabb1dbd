// One cell of the activation-patching grid opened (patch.js): a click on the grid, or Enter on the cell the arrow
// keys reach, keeps the cell in the link (patch=POS.HOOK.TOKEN@LAYER.COLUMN) and shows what that patch did: its
// patched metric and recovered share (from /api/patch's metric_grid and recovered), and that layer's maps for the
// clean input, the corrupted one (one POST /api/compare of the two token lists, weights of that layer) and the
// patched run itself (POST /api/patch/run: the corrupted input with that one clean activation), side by side.
// A pattern patch makes that head's patched map the clean one exactly; a z patch leaves it the corrupted one and
// moves the layers after it; a residual, attention-out or MLP-out patch moves the layers from it on.

import { act } from "./actions.js";
import { PALETTES, VIRIDIS } from "./colors.js";
import { node } from "./dom.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { pieceText } from "./piece.js";
import { pos } from "./positions.js";

export const BY_POSITION = ["resid_pre", "attn_out", "mlp_out"];
export const CELL_PX = 260; // each map at most this wide

// The /api/compare body for a cell: the clean (a) and corrupted (b) inputs of the patch body, weights of `layer`.
export function cellCompareRequest(patchBody, layer) {
  if (!patchBody) return null;
  const side = (body) => ({ ...body, include: ["weights"], layer });
  return { a: side(patchBody.clean), b: side(patchBody.corrupted) };
}

// The /api/patch/run body for a cell: the patched run of the corrupted input, weights of the cell's layer (a patch
// at layer l changes nothing before it).
export function cellRunRequest(patchBody, cell) {
  if (!patchBody || !cell) return null;
  const [layer, column] = cell;
  return {
    clean: patchBody.clean,
    corrupted: { ...patchBody.corrupted, include: ["weights"], layer },
    hook: patchBody.hook,
    cell: { layer, column },
  };
}

// The head whose maps are shown: the cell's own for a head hook; for a position hook the head of that layer whose
// weights the corruption moves most (compare's max |B - A| per head).
export function cellHead(hook, column, cmp) {
  if (!BY_POSITION.includes(hook)) return column;
  const heads = cmp?.layers?.[0]?.heads || [];
  let best = heads[0];
  for (const h of heads) if (h.max_abs > best.max_abs) best = h;
  return best ? best.index : 0;
}

// What the patched run's map is, in words, for the cell's hook.
export function patchedNote(hook, layer, column, head) {
  if (hook === "pattern")
    return `With this patch L${layer}H${head}'s map is the clean one exactly; the corrupted one is what it replaced.`;
  if (hook === "z")
    return `A z patch puts back L${layer}H${head}'s output after its weights: its own map stays the corrupted one, and the layers after it read the clean run's values.`;
  return (
    `The patch puts back the clean run's ${hook} at layer ${layer}, position ${pos(column)}: the maps are layer ${layer}'s head ${head}, ` +
    "the one the corruption moves most; the patched map is that head in the patched run."
  );
}

export function cellLabel(r, layer, column) {
  return BY_POSITION.includes(r.hook)
    ? `L${layer} position ${pos(column)} ${pieceText(r.tokens[column])}`
    : `L${layer} H${column}`;
}

function drawMap(title, matrix, eligible, tokens, palette, side) {
  const S = matrix.length;
  const cell = Math.max(1, Math.min(22, Math.floor(CELL_PX / Math.max(S, 1))));
  const L = layoutFor(S, { cell, labels: cell >= 7, maxLabel: 6, cols: matrix[0].length });
  const fig = node("figure", { className: "head-card patch-map" });
  fig.dataset.side = side;
  fig.setAttribute("data-testid", "patch-map");
  fig.append(node("figcaption", {}, title));
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(canvas);
  const scale = { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: "attention weight" };
  drawHeatmap(sizeCanvas(canvas, L), { matrix, eligible, tokens, scale, layout: L });
  fig.drawn = matrix.map((row) => Array.from(row)); // what the image shows, for tests
  return fig;
}

// The opened cell under the grid: its numbers, the two maps (once /api/compare answers), and a link to it.
export function renderCell(el, r, value, slot, s, link, runSlot = null) {
  if (!r || !value?.cell) {
    el.replaceChildren();
    el.hidden = true;
    return;
  }
  el.hidden = false;
  const [layer, column] = value.cell;
  const metric = r.metric_grid?.[layer]?.[column];
  const rec = r.recovered?.[layer]?.[column];
  el.dataset.cell = `${layer}.${column}`;
  el.dataset.metric = metric == null ? "" : String(metric);
  const head = cellHead(r.hook, column, slot.result);
  const numbers = node(
    "p",
    { className: "small", id: "patch-cell-numbers" },
    `${cellLabel(r, layer, column)} patched: metric ${metric == null ? "–" : metric.toFixed(4)} ` +
      `(clean ${r.clean_metric.toFixed(4)}, corrupted ${r.corrupted_metric.toFixed(4)}), recovered ${rec == null ? "–" : rec.toFixed(3)}.`,
  );
  const a = node("a", { href: link, id: "patch-cell-link" }, "Link to this patched cell");
  const parts = [numbers];
  if (slot.status === "loading")
    parts.push(node("p", { className: "muted small" }, "asking for the clean and corrupted maps…"));
  if (slot.status === "error") parts.push(node("p", { className: "bad small" }, slot.message));
  const cmp = slot.status === "ready" ? slot.result : null;
  if (cmp) {
    const ha = cmp.a.layers[0].heads.find((h) => h.index === head);
    const hb = cmp.b.layers[0].heads.find((h) => h.index === head);
    el.dataset.head = String(head);
    const pair = node("div", { className: "patch-maps" });
    pair.append(
      drawMap(`clean · L${layer}H${head}`, ha.weights, cmp.a.eligible, cmp.a.tokens, s.ui.palette, "clean"),
      drawMap(`corrupted · L${layer}H${head}`, hb.weights, cmp.b.eligible, cmp.b.tokens, s.ui.palette, "corrupted"),
    );
    const run = runSlot?.status === "ready" ? runSlot.result : null;
    const hp = run?.layers?.[0]?.heads?.find((h) => h.index === head);
    if (hp)
      pair.append(
        drawMap(`patched · L${layer}H${head}`, hp.weights, run.eligible, run.tokens, s.ui.palette, "patched"),
      );
    else if (runSlot?.status === "error") pair.append(node("p", { className: "bad small" }, runSlot.message));
    parts.push(
      pair,
      node("p", { className: "muted small", id: "patch-cell-note" }, patchedNote(r.hook, layer, column, head)),
    );
  }
  const linkRow = node("p", { className: "small" });
  linkRow.append(a);
  parts.push(linkRow);
  el.replaceChildren(...parts);
}

// The grid's keyboard: arrows move a cursor over the cells (outlined, and read out), Enter or Space opens it (before
// any arrow: the cell that recovers most).
// `cursor` is the grid element's own (a transient focus, not a setting); a click opens the cell clicked.
export function moveCursor(cursor, key, rows, columns) {
  const [l, c] = cursor || [0, 0];
  const step = {
    ArrowUp: [-1, 0],
    ArrowDown: [1, 0],
    ArrowLeft: [0, -1],
    ArrowRight: [0, 1],
    Home: [0, -c],
    End: [0, columns - 1 - c],
  }[key];
  if (!step) return null;
  return [Math.max(0, Math.min(rows - 1, l + step[0])), Math.max(0, Math.min(columns - 1, c + step[1]))];
}

export function cursorShape(cell) {
  if (!cell) return [];
  const [l, c] = cell;
  return [
    {
      type: "rect",
      xref: "x",
      yref: "y",
      x0: c - 0.5,
      x1: c + 0.5,
      y0: l - 0.5,
      y1: l + 0.5,
      line: { color: "#111", width: 3 },
    },
  ];
}

export function bindGrid(grid, say, { dispatch, getState }) {
  const open = (cell) => {
    const s = getState();
    if (!s.ui.patch) return;
    dispatch(act.panelSet("patch", { ...s.ui.patch, cell }));
  };
  grid.addEventListener("keydown", (e) => {
    const r = getState().panels.patch.result;
    if (!r || !grid.dataset.drawn) return;
    const cursor = grid.dataset.cursor ? grid.dataset.cursor.split(".").map(Number) : null;
    if (e.key === "Enter" || e.key === " ") {
      // no cursor yet: the cell that recovers most
      const at = cursor || (grid.dataset.best ? grid.dataset.best.split(".").map(Number) : null);
      if (!at) return;
      e.preventDefault();
      grid.dataset.cursor = at.join(".");
      open(at);
      return;
    }
    const next = moveCursor(cursor || getState().ui.patch?.cell, e.key, r.rows, r.columns);
    if (!next) return;
    e.preventDefault();
    grid.dataset.cursor = next.join(".");
    window.Plotly?.relayout(grid, { shapes: cursorShape(next) });
    const v = r.recovered[next[0]][next[1]];
    say(`${cellLabel(r, next[0], next[1])}: recovered ${v == null ? "–" : v.toFixed(3)}. Enter opens it.`);
  });
  return open;
}
