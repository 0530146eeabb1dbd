// Export: the visible heads as one PNG (drawn from their canvases), the current data as JSON (written in parts, so
// minilm's every layer at 512 tokens fits: one string of it would be past what a browser holds), the arrays as NPZ,
// and the view as one standalone HTML file (POST /api/export: the page's own views and the weights in one file that
// opens offline). Every download says in the share status line (a live region) what it saved: the file's name, its
// size and what it holds. The form's "Share and export" section is a view of its own (data-view="exporter"): `render`
// names on its "Download … as HTML" button what it will export and enables it once there is a result; `bind` wires it
// and the PNG, JSON and NPZ buttons, each telling its status line what it saved.

import { describeError, fetchAttentionNpz } from "./api.js";
import { halfRows } from "./arrays.js";
import { MASK_FILL, MASK_HATCH, legendTicks } from "./colors.js";
import { exportCards, exportLayout } from "./heads.js";
import { jsonBlob } from "./jsonparts.js";
import { selectView } from "./selectors.js";
import { within } from "./dom.js";

export const PNG_MARGIN = 16;
export const PNG_TITLE_PX = 76; // the title line and the legend under it

export function download(name, blob) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

// Where each canvas goes in a sheet `columns` wide: pure, so a test can check the packing.
export function sheetLayout(sizes, columns) {
  const colW = Math.max(0, ...sizes.map((s) => s.w));
  const rowH = Math.max(0, ...sizes.map((s) => s.h + 18));
  const places = sizes.map((_, i) => ({
    x: PNG_MARGIN + (i % columns) * (colW + PNG_MARGIN),
    y: PNG_TITLE_PX + PNG_MARGIN + Math.floor(i / columns) * (rowH + PNG_MARGIN),
  }));
  const rows = Math.ceil(sizes.length / columns);
  return {
    places,
    width: PNG_MARGIN + Math.min(columns, sizes.length) * (colW + PNG_MARGIN),
    height: PNG_TITLE_PX + PNG_MARGIN + rows * (rowH + PNG_MARGIN),
  };
}

// Which of n evenly spaced tick labels (widths in px, along a bar `w` wide: the first left-aligned at 0, the last
// right-aligned at w, the rest centred) to draw so that none touches the next: both ends always, then every
// other, every fourth, ... interior tick until they clear each other by TICK_GAP px. Pure.
export const TICK_GAP = 6;

export function fittingTicks(widths, w) {
  const n = widths.length;
  const at = (i) => (n === 1 ? 0 : (w * i) / (n - 1));
  const span = (i) => {
    const x = at(i);
    if (i === 0) return [x, x + widths[i]];
    if (i === n - 1) return [x - widths[i], x];
    return [x - widths[i] / 2, x + widths[i] / 2];
  };
  for (let every = 1; every < n; every *= 2) {
    const kept = widths.map((_, i) => i === 0 || i === n - 1 || i % every === 0);
    const shown = kept.flatMap((k, i) => (k ? [span(i)] : []));
    if (shown.every((s, j) => j === 0 || s[0] >= shown[j - 1][1] + TICK_GAP)) return kept;
  }
  return widths.map((_, i) => i === 0 || i === n - 1);
}

// Every how many positions a head's tick labels go on the PNG so that neighbours never overlap: the key labels run
// at 45°, so two of them `step` cells apart stand step · cell · sin 45° apart across their lines, and each is
// `font` px tall; the query labels, level, stand step · cell apart. At least the layout's own step. Pure.
export function fittingStep(L) {
  const need = L.font + 2;
  return Math.max(L.step, Math.ceil(need / (L.cell * Math.SQRT1_2)), Math.ceil(need / L.cell));
}

// The legend drawn on the sheet: the scale's colours with numbers under them, and the masked key. `legend`:
// {stops, ticks: [numbers] | null (each head its own range), label}. Returns the height it took.
export const LEGEND = { x: PNG_MARGIN, y: 34, w: 180, h: 12 };

function drawLegend(ctx, legend) {
  const { x, y, w, h } = LEGEND;
  const g = ctx.createLinearGradient(x, 0, x + w, 0);
  legend.stops.forEach((c, i) => g.addColorStop(i / (legend.stops.length - 1), c));
  ctx.fillStyle = g;
  ctx.fillRect(x, y, w, h);
  ctx.strokeStyle = "#888";
  ctx.strokeRect(x - 0.5, y - 0.5, w + 1, h + 1);
  ctx.fillStyle = "#333";
  ctx.font = "11px system-ui, sans-serif";
  const ticks = (legend.ticks || ["−max", "0", "+max"]).map((t) =>
    typeof t === "number" ? (Math.abs(t) < 1e-9 ? 0 : t).toFixed(2) : t,
  );
  const kept = fittingTicks(
    ticks.map((t) => ctx.measureText(t).width),
    w,
  );
  ticks.forEach((t, i) => {
    if (!kept[i]) return;
    const tx = x + (w * i) / (ticks.length - 1);
    ctx.textAlign = i === 0 ? "left" : i === ticks.length - 1 ? "right" : "center";
    ctx.fillText(t, tx, y + h + 13);
  });
  ctx.textAlign = "left";
  ctx.fillText(legend.label, x + w + 12, y + 10);
  // the masked key: the same dark ground and light hatch as the cells
  const mx = x + w + 12;
  const my = y + 16;
  ctx.fillStyle = legend.maskFill;
  ctx.fillRect(mx, my, 14, 14);
  ctx.save();
  ctx.beginPath();
  ctx.rect(mx, my, 14, 14);
  ctx.clip();
  ctx.strokeStyle = legend.maskHatch;
  for (let c = -14; c < 28; c += 5) {
    ctx.moveTo(mx + c, my + 14);
    ctx.lineTo(mx + c + 14, my);
  }
  ctx.stroke();
  ctx.restore();
  ctx.fillStyle = "#333";
  ctx.fillText("masked", mx + 20, my + 11);
}

// Every card on one white sheet: the title on its own line, the legend under it, the heads in a grid.
export function headsPng(cards, title, legend) {
  const ratio = window.devicePixelRatio || 1;
  const sizes = cards.map(({ canvas }) => ({ w: canvas.width / ratio, h: canvas.height / ratio }));
  const columns = Math.min(6, Math.max(1, Math.ceil(Math.sqrt(cards.length))));
  const sheet = sheetLayout(sizes, columns);
  const out = document.createElement("canvas");
  const width = Math.max(sheet.width, 520);
  out.width = width * ratio;
  out.height = sheet.height * ratio;
  const ctx = out.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, sheet.height);
  ctx.fillStyle = "#111";
  ctx.font = "600 14px system-ui, sans-serif";
  // the title has the first line to itself, cut to the sheet's width: it never runs over the legend
  let t = title;
  while (t.length > 8 && ctx.measureText(t).width > width - 2 * PNG_MARGIN) t = `${t.slice(0, -2)}…`;
  ctx.fillText(t, PNG_MARGIN, 22);
  if (legend) drawLegend(ctx, legend);
  cards.forEach(({ canvas, label }, i) => {
    const p = sheet.places[i];
    ctx.fillStyle = "#333";
    ctx.font = "600 12px system-ui, sans-serif";
    ctx.fillText(label, p.x, p.y + 12);
    ctx.drawImage(canvas, p.x, p.y + 18, sizes[i].w, sizes[i].h);
  });
  return new Promise((resolve) => out.toBlob(resolve, "image/png"));
}

// ---- the view as a standalone HTML file --------------------------------------------------------------------------

export const EXPORT_URL = "/api/export";

// The POST /api/export body for what the page shows: the current /api/attention request (its include and precision
// are the export's own: float32 weights up to 65,536, float16 above) and the view: every layer's thumbnails when all layers are shown, the open
// head with its query, else the heads of the layer shown. One layer is embedded unless all are shown. The request's
// sinks go with it (the file's weights hide the same keys); the moved view is embedded as `matrix: "moved"`. With the
// rollout panel on (ui.rollout, rollout.js: {heads, residual, method}) its rollout or attention flow goes too, with
// its options: the file draws each embedded layer's map.
export function exportBody(request, ui, result) {
  const { include: _include, precision: _precision, layer: _layer, rollout: _rollout, ...rest } = request;
  const multi = (result?.config?.n_layers ?? 1) > 1;
  const body = { ...rest, palette: ui.palette === "cividis" ? "cividis" : "viridis" };
  if (ui.from1) body.positions_from = 1; // the file prints positions as the page does
  if (ui.view === "moved") body.matrix = "moved";
  const stacked = stackedOf(ui.rollout);
  if (stacked) Object.assign(body, stacked);
  if (multi && ui.layer === "all") return { ...body, view: "all" };
  const layer = ui.focus ? ui.focus[0] : ui.layer === "all" ? 0 : ui.layer;
  const one = multi && Number.isInteger(layer) ? { layer } : {};
  if (!ui.focus) return { ...body, ...one, view: "layer" };
  const query = Number.isInteger(ui.query) ? { query: ui.query } : {};
  return { ...body, ...one, view: "head", head: ui.focus[1], ...query };
}

// The export body's part for the rollout panel's setting: include rollout (or attention_flow for method flow) and
// the options; null when the panel is off.
export function stackedOf(value) {
  if (!value) return null;
  const include = [value.method === "flow" ? "attention_flow" : "rollout"];
  return { include, rollout: { heads: value.heads || "mean", residual: value.residual !== false } };
}

// The file name the server gave (Content-Disposition), else one made here.
export function attachmentName(disposition, fallback) {
  const m = /filename="([^"]+)"/.exec(disposition || "");
  return m ? m[1] : fallback;
}

export async function exportHtml(body) {
  const resp = await fetch(EXPORT_URL, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!resp.ok) {
    let message = `the server answered ${resp.status}`;
    try {
      const err = (await resp.json()).error;
      if (err && err.message)
        message = err.field && !err.message.includes(err.field) ? `${err.field}: ${err.message}` : err.message;
    } catch {
      // not the API's JSON error: keep the status line
    }
    throw new Error(message);
  }
  const name = attachmentName(resp.headers.get("content-disposition"), `attnlab-${body.model || "export"}.html`);
  return { name, blob: await resp.blob() };
}

// ---- the data as JSON, written in parts --------------------------------------------------------------------------

// ---- what a download says --------------------------------------------------------------------------------------

// A size as people read it: 812 B, 14.2 kB, 212.4 MB, 1.21 GB.
export function sizeText(bytes) {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1e6) return `${(bytes / 1e3).toFixed(1)} kB`;
  if (bytes < 1e9) return `${(bytes / 1e6).toFixed(1)} MB`;
  return `${(bytes / 1e9).toFixed(2)} GB`;
}

// What a result holds, in words: "every layer (6) × 12 heads, 512 tokens" or "layer 3, 12 heads, 9 tokens".
export function resultContents(result) {
  const layers = result?.layers || [];
  const S = result?.tokens?.length ?? 0;
  const H = layers[0]?.heads?.length ?? 0;
  const tokens = `${S} token${S === 1 ? "" : "s"}`;
  const heads = `${H} head${H === 1 ? "" : "s"}`;
  if (layers.length > 1) return `every layer (${layers.length}) × ${heads}, ${tokens}`;
  if ((result?.config?.n_layers ?? 1) > 1 && layers.length === 1)
    return `layer ${layers[0].index}, ${heads}, ${tokens}`;
  return `${heads}, ${tokens}`;
}

export function savedText(name, blob, what) {
  return `Saved ${name} (${sizeText(blob.size)}): ${what}.`;
}

// ---- the buttons -------------------------------------------------------------------------------------------------

// While a download is made its button is busy: a second press waits for the first, not for a second file.
async function busy(button, work) {
  if (button.getAttribute("aria-busy") === "true") return;
  button.setAttribute("aria-busy", "true");
  try {
    await work();
  } finally {
    button.removeAttribute("aria-busy");
  }
}

export async function savePng(s, say) {
  const view = selectView(s);
  if (!view) return;
  const title = `attnlab · ${s.run.result.model} · ${s.ui.view} · “${s.ui.text.slice(0, 60)}”`;
  const perHead = view.view === "scores" && view.scoreScale === "head";
  const shown =
    view.view === "scores" && view.scoreScale === "clip"
      ? { ...view.scale, min: -view.clipAbs, max: view.clipAbs }
      : view.scale;
  const legend = {
    stops: view.scale.stops,
    ticks: perHead ? null : legendTicks(shown),
    label: perHead
      ? "score: each head its own range (± by its name)"
      : view.view === "scores"
        ? "score"
        : "attention weight",
    maskFill: MASK_FILL,
    maskHatch: MASK_HATCH,
  };
  const L = exportLayout(view);
  const blob = await headsPng(exportCards(view, { ...L, step: fittingStep(L) }), title, legend);
  if (!blob) throw new Error("the browser could not encode the PNG");
  const name = `attnlab-${s.run.result.model}-heads.png`;
  download(name, blob);
  const layers = new Set(view.heads.map((h) => h.layer));
  const where = view.multiLayer ? (layers.size > 1 ? ` of ${layers.size} layers` : ` of layer ${[...layers][0]}`) : "";
  const S = view.tokens.length;
  say(
    savedText(
      name,
      blob,
      `${view.heads.length} head${view.heads.length === 1 ? "" : "s"}${where}, ${S} token${S === 1 ? "" : "s"}`,
    ),
  );
}

export async function saveJson(s, say) {
  const response = s.run.full || s.run.result;
  // a large run came as float16 (api.js precisionFor): the file says so, and writes each value's float16 digits
  const half = !!halfRows(response.layers?.[0]?.heads?.[0], "weights");
  const data = { link: location.href, request: s.run.request, precision: half ? "float16" : "float32", response };
  say("Writing the JSON…");
  const blob = await jsonBlob(data, (n) => say(`Writing the JSON… ${sizeText(n)}`));
  const name = `attnlab-${s.run.result.model}.json`;
  download(name, blob);
  say(savedText(name, blob, resultContents(response)));
}

export async function saveNpz(s, say) {
  say("Asking the server for the arrays…");
  const blob = await fetchAttentionNpz(s.run.request);
  const name = `attnlab-${s.run.result.model}.npz`;
  download(name, blob);
  say(savedText(name, blob, resultContents(s.run.full || s.run.result)));
}

// What the HTML file holds, in words: "layer 3 head 2", "layer 3", "every layer", "the heads" (one layer only).
export function htmlWhat(body, multi) {
  const also = body.include ? ` with ${body.include[0] === "attention_flow" ? "attention flow" : "rollout"}` : "";
  if (body.view === "all") return `every layer${also}`;
  const layer = multi && Number.isInteger(body.layer) ? `layer ${body.layer}` : "";
  if (body.view === "head") return `${layer ? `${layer} ` : ""}head ${body.head}${also}`;
  return `${layer || "the heads"}${also}`;
}

export function deps(s) {
  return [
    s.run.request,
    s.run.result,
    s.run.rest,
    s.ui.layer,
    s.ui.focus,
    s.ui.query,
    s.ui.palette,
    s.ui.view,
    s.ui.rollout,
  ];
}

export function render(root, s) {
  const button = within(root)("export-html");
  button.disabled = !s.run.request || !s.run.result || !!s.run.rest; // every layer in, or the file would miss some
  if (button.disabled) return;
  const body = exportBody(s.run.request, s.ui, s.run.result);
  const what = {
    all: "every layer's heads",
    head: "the open head and its retrieval",
    layer: "the heads of this layer",
  }[body.view];
  button.textContent = `Download ${htmlWhat(body, s.run.result.config.n_layers > 1)} as HTML`;
  button.title = `One HTML file of ${what}: it opens in any browser, with no server and no network`;
  button.dataset.exportView = body.view;
}

export function bind(root, store) {
  const part = within(root);
  const say = (text) => {
    part("share-status").textContent = text;
  };
  const run = (button, save) =>
    button?.addEventListener("click", () =>
      busy(button, async () => {
        const s = store.getState();
        if (!s.run.request || !s.run.result) return;
        try {
          await save(s, say);
        } catch (err) {
          say(`Could not export: ${describeError(err).message}`);
        }
      }),
    );
  run(part("export-png"), savePng);
  run(part("export-json"), saveJson);
  run(part("export-npz"), saveNpz);
  const html = part("export-html");
  html.addEventListener("click", async () => {
    const s = store.getState();
    if (!s.run.request || !s.run.result) return;
    html.disabled = true;
    say("Building the HTML file…");
    try {
      const body = exportBody(s.run.request, s.ui, s.run.result);
      const { name, blob } = await exportHtml(body);
      download(name, blob);
      say(
        savedText(
          name,
          blob,
          `${htmlWhat(body, s.run.result.config.n_layers > 1)}, ${s.run.result.tokens.length} tokens; it opens offline`,
        ),
      );
    } catch (err) {
      say(`Could not export HTML: ${err.message}`);
    } finally {
      html.disabled = false;
    }
  });
}
