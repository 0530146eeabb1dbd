// Export: the visible heads as one PNG (drawn from their canvases), and the current data as JSON.

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
