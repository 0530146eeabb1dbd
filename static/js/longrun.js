// A long run on the server (POST /api/runs, kept by name) and what the deep-zoom view asks of it: tiles
// (GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}) and exact rows (GET /api/runs/{run}/rows/...), in the
// arrays form. A run the server has dropped answers 404 `run_expired`: `isExpired` says so, and the caller posts the
// run again under the same name. Also the pure geometry of the tile pyramid, which a test can call.

import { ApiError, parse } from "./api.js";
import { MEDIA_TYPE, readArrays } from "./arrays.js";

export const TILE = 256; // cells per tile, each way (the server's config.tile)
export const MAX_RUN_TOKENS = 32768; // ATTNLAB_MAX_RUN_TOKENS's default, until the page has read the server's own
// words the generator draws from: repeated words make stripes (the same key everywhere), positions a diagonal
const WORDS = ["the", "cat", "sat", "on", "mat", "and", "a", "dog", "ran", "to", "park", "while", "bird", "sang"];

async function read(resp) {
  const type = (resp.headers.get("content-type") || "").split(";")[0].trim();
  if (resp.ok && type === MEDIA_TYPE) return readArrays(await resp.arrayBuffer());
  return parse(resp);
}

// POST /api/runs named `name` (X-Attnlab-Run): {run, tokens, config, layers: [{index, heads: [{summary}]}]}.
export async function postRun(body, name, signal) {
  const headers = { "content-type": "application/json", accept: MEDIA_TYPE, "x-attnlab-run": name };
  return read(await fetch("/api/runs", { method: "POST", headers, body: JSON.stringify(body), signal }));
}

export function tileUrl(run, layer, head, z, x, y, agg = "max") {
  return `/api/runs/${encodeURIComponent(run)}/tiles/${layer}/${head}/${z}/${x}/${y}?agg=${agg}`;
}

// One tile: {z, x, y, q0, k0, cell, agg, weights: rows x cols (Float32Array rows)}.
export async function fetchTile(run, layer, head, z, x, y, agg, signal) {
  return read(await fetch(tileUrl(run, layer, head, z, x, y, agg), { headers: { accept: MEDIA_TYPE }, signal }));
}

// One query's exact row: {query, token, weights, top: [{key, token, weight}]}.
export async function fetchRow(run, layer, head, query, signal) {
  const url = `/api/runs/${encodeURIComponent(run)}/rows/${layer}/${head}/${query}`;
  return read(await fetch(url, { headers: { accept: MEDIA_TYPE }, signal }));
}

export function isExpired(err) {
  return err instanceof ApiError && err.code === "run_expired";
}

// A text of `n` whitespace-separated words, the same every time: short phrases from a small vocabulary.
export function makeText(n) {
  const out = new Array(n);
  let seed = 12345;
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    out[i] = WORDS[(i % 7 === 0 ? 0 : seed >> 16) % WORDS.length];
  }
  return out.join(" ");
}

export function wordCount(text) {
  const t = text.trim();
  return t ? t.split(/\s+/).length : 0;
}

// Positions per cell at level z of a run with `levels` levels (cell 1 at the deepest: the exact weights).
export function cellOf(z, levels) {
  return 2 ** (levels - z);
}

// The level whose cells are nearest one device pixel at `scale` CSS pixels per position, within 0..levels.
export function levelFor(scale, levels, dpr = 1) {
  const z = Math.ceil(levels + Math.log2(scale * dpr) - 0.5);
  return Math.max(0, Math.min(levels, z));
}

// The tiles of level z that meet the view, nearest the view's centre first: [{x, y}] (x: key tile, y: query tile).
// view: {k0, q0, k1, q1}, the positions at the view's edges; only tiles that start inside S x S exist.
export function tilesInView(view, z, levels, seqLen) {
  const span = TILE * cellOf(z, levels); // positions per tile
  const last = Math.ceil(seqLen / span) - 1;
  const clamp = (v) => Math.max(0, Math.min(last, v));
  const x0 = clamp(Math.floor(view.k0 / span));
  const x1 = clamp(Math.floor((Math.min(view.k1, seqLen) - 1e-9) / span));
  const y0 = clamp(Math.floor(view.q0 / span));
  const y1 = clamp(Math.floor((Math.min(view.q1, seqLen) - 1e-9) / span));
  if (view.k1 <= 0 || view.q1 <= 0 || view.k0 >= seqLen || view.q0 >= seqLen) return [];
  const ck = (view.k0 + view.k1) / 2 / span;
  const cq = (view.q0 + view.q1) / 2 / span;
  const out = [];
  for (let y = y0; y <= y1; y++) for (let x = x0; x <= x1; x++) out.push({ x, y });
  return out.sort((a, b) => Math.hypot(a.x + 0.5 - ck, a.y + 0.5 - cq) - Math.hypot(b.x + 0.5 - ck, b.y + 0.5 - cq));
}

// A small least-recently-used map: get() counts as a use; set() past `cap` drops the oldest.
export class Lru {
  constructor(cap) {
    this.cap = cap;
    this.map = new Map();
  }
  get(key) {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }
  set(key, value) {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.cap) this.map.delete(this.map.keys().next().value);
  }
  clear() {
    this.map.clear();
  }
  get size() {
    return this.map.size;
  }
}
