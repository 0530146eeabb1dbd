// What frames the deep-zoom canvas (zoomview.js) of the Long input panel: the position axes (keys across the top,
// queries down the left: round numbers, every position's token once a token fits), the minimap of the whole matrix
// with the view's rectangle, and the weight shown beside the pointer or the keyboard cursor. Each draws from the
// view's state; the geometry is zoomaxes.js's. What each drew is kept on its element as `drawn`, for a test to read.

import { pos } from "./positions.js";
import { axisTicks, minimapRect } from "./zoomaxes.js";

const FONT = "11px system-ui, sans-serif";
const TICK_PX = 4; // a tick mark's length
const LABEL_CHARS = 8; // a token label's characters, at most
const HALF_LINE_PX = 6; // half a label's line height
const TIP_GAP_PX = 14; // the weight's box sits this far right of and below the point it names

function fit(canvas, w, h, ink) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
  if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = FONT;
  ctx.fillStyle = ink;
  return ctx;
}

function label(tokens, at, cut) {
  if (!cut) return String(pos(at));
  const t = (tokens[at] ?? "").replace(/\s/g, "·");
  return t.length > LABEL_CHARS ? `${t.slice(0, LABEL_CHARS - 1)}…` : t;
}

// The key axis (across, over the canvas) or the query axis (down, left of it) for `state` ({view, scale}):
// `length` CSS pixels along the canvas's side, `depth` across the band.
export function drawAxis(canvas, state, seqLen, tokens, across) {
  const length = across ? canvas.clientWidth : canvas.clientHeight;
  const depth = across ? canvas.clientHeight : canvas.clientWidth;
  const ctx = fit(canvas, across ? length : depth, across ? depth : length, getComputedStyle(canvas).color);
  const [p0, p1] = across ? [state.view.k0, state.view.k1] : [state.view.q0, state.view.q1];
  const axis = axisTicks(p0, p1, state.scale, seqLen);
  for (const t of axis.ticks) {
    const text = label(tokens, t.at, axis.tokens);
    // a label near an end is moved in, whole, while its tick stays at its position
    const half = across && !axis.tokens ? ctx.measureText(text).width / 2 : HALF_LINE_PX;
    const at = Math.max(half, Math.min(length - half, t.px));
    ctx.save();
    if (across) {
      ctx.fillRect(t.px, depth - TICK_PX, 1, TICK_PX);
      ctx.translate(at, depth - TICK_PX - 2);
      if (axis.tokens) ctx.rotate(-Math.PI / 2); // a token's label runs up, one per column
      ctx.textAlign = axis.tokens ? "left" : "center";
      ctx.textBaseline = axis.tokens ? "middle" : "bottom";
    } else {
      ctx.fillRect(depth - TICK_PX, t.px, TICK_PX, 1);
      ctx.translate(depth - TICK_PX - 2, at);
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
    }
    ctx.fillText(text, 0, 0);
    ctx.restore();
  }
  canvas.drawn = { from: p0, scale: state.scale, tokens: axis.tokens, step: axis.step, ticks: axis.ticks };
  return axis;
}

// The whole matrix (the head's summary, `backdrop`, spanning `covers` positions) at `size` CSS pixels, and the
// view's rectangle on it.
export function drawMinimap(canvas, state, seqLen, backdrop, covers) {
  const size = canvas.clientWidth || 120;
  const ctx = fit(canvas, size, size, "#fff");
  ctx.imageSmoothingEnabled = false;
  if (backdrop) ctx.drawImage(backdrop, 0, 0, (size * covers) / seqLen, (size * covers) / seqLen);
  const r = minimapRect(state.view, seqLen, size);
  ctx.lineWidth = 2;
  ctx.strokeStyle = "#ff4d6d";
  ctx.strokeRect(r.x, r.y, Math.max(2, r.w), Math.max(2, r.h));
  canvas.drawn = { size, seqLen, rect: r };
  return r;
}

// The weight's box beside the point (px, py) of the canvas (CSS pixels), kept inside the canvas's box; hidden
// without a text.
export function placeTip(tip, text, px, py, w, h) {
  tip.hidden = !text;
  if (!text) return;
  tip.textContent = text;
  const left = px + TIP_GAP_PX + tip.offsetWidth > w ? px - TIP_GAP_PX - tip.offsetWidth : px + TIP_GAP_PX;
  const top = py + TIP_GAP_PX + tip.offsetHeight > h ? py - TIP_GAP_PX - tip.offsetHeight : py + TIP_GAP_PX;
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, top)}px`;
}
