// Export: the visible heads as one PNG (drawn from their canvases), and the current data as JSON.

export const PNG_MARGIN = 16;
export const PNG_TITLE_PX = 40;

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

export function headsPng(cards, title, legendStops) {
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
  ctx.fillText(title, PNG_MARGIN, 24);
  if (legendStops) {
    const g = ctx.createLinearGradient(width - 176, 0, width - 16, 0);
    legendStops.forEach((c, i) => g.addColorStop(i / (legendStops.length - 1), c));
    ctx.fillStyle = g;
    ctx.fillRect(width - 176, 14, 160, 12);
  }
  cards.forEach(({ canvas, label }, i) => {
    const p = sheet.places[i];
    ctx.fillStyle = "#333";
    ctx.font = "600 12px system-ui, sans-serif";
    ctx.fillText(label, p.x, p.y + 12);
    ctx.drawImage(canvas, p.x, p.y + 18, sizes[i].w, sizes[i].h);
  });
  return new Promise((resolve) => out.toBlob(resolve, "image/png"));
}
