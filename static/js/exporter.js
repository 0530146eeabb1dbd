// Export: the visible heads as one PNG (drawn from their canvases), the current data as JSON, and the view as one
// standalone HTML file (POST /api/export: the page's own views and the weights in one file that opens offline).
// The "Download this view as HTML" button is a view of its own (data-view="exporter"): `render` enables it once
// there is a result, `bind` sends the export.

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
  const ticks = legend.ticks || ["−max", "0", "+max"];
  ticks.forEach((t, i) => {
    const tx = x + (w * i) / (ticks.length - 1);
    ctx.textAlign = i === 0 ? "left" : i === ticks.length - 1 ? "right" : "center";
    ctx.fillText(typeof t === "number" ? (Math.abs(t) < 1e-9 ? 0 : t).toFixed(2) : t, tx, y + h + 13);
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
// are the export's own: float16 weights) and the view: every layer's thumbnails when all layers are shown, the open
// head with its query, else the heads of the layer shown. One layer is embedded unless all are shown.
export function exportBody(request, ui, result) {
  const { include: _include, precision: _precision, layer: _layer, ...rest } = request;
  const multi = (result?.config?.n_layers ?? 1) > 1;
  const body = { ...rest, palette: ui.palette === "cividis" ? "cividis" : "viridis" };
  if (multi && ui.layer === "all") return { ...body, view: "all" };
  const layer = ui.focus ? ui.focus[0] : ui.layer === "all" ? 0 : ui.layer;
  const one = multi && Number.isInteger(layer) ? { layer } : {};
  if (!ui.focus) return { ...body, ...one, view: "layer" };
  const query = Number.isInteger(ui.query) ? { query: ui.query } : {};
  return { ...body, ...one, view: "head", head: ui.focus[1], ...query };
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
      if (err && err.message) message = err.field && !err.message.includes(err.field) ? `${err.field}: ${err.message}` : err.message;
    } catch {
      // not the API's JSON error: keep the status line
    }
    throw new Error(message);
  }
  const name = attachmentName(resp.headers.get("content-disposition"), `attnlab-${body.model || "export"}.html`);
  return { name, blob: await resp.blob() };
}

export function deps(s) {
  return [s.run.request, s.run.result, s.ui.layer, s.ui.focus, s.ui.query, s.ui.palette];
}

export function render(root, s) {
  root.disabled = !s.run.request || !s.run.result;
  if (root.disabled) return;
  const view = exportBody(s.run.request, s.ui, s.run.result).view;
  const what = { all: "every layer's heads", head: "the open head and its retrieval", layer: "the heads of this layer" }[view];
  root.title = `One HTML file of ${what}: it opens in any browser, with no server and no network`;
  root.dataset.exportView = view;
}

export function bind(root, store) {
  root.addEventListener("click", async () => {
    const s = store.getState();
    if (!s.run.request || !s.run.result) return;
    const status = document.getElementById("share-status");
    root.disabled = true;
    if (status) status.textContent = "Building the HTML file…";
    try {
      const { name, blob } = await exportHtml(exportBody(s.run.request, s.ui, s.run.result));
      download(name, blob);
      if (status) status.textContent = `Saved ${name} (${(blob.size / 1e6).toFixed(1)} MB): it opens offline.`;
    } catch (err) {
      if (status) status.textContent = `Could not export HTML: ${err.message}`;
    } finally {
      root.disabled = false;
    }
  });
}
