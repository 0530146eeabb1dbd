// KV-cache decoding (POST /api/decode): the sequence enters one position at a time. Each step projects only the new
// token, appends its K and V to every layer's cache, and attends from the new query over every cached key. The step
// view shows that new query row for the chosen head (and a strip for every head); the cache view shows K and V
// growing one row per step in every layer, its size in bytes, the formula, and the check against the full pass.
// Pure helpers on top (a test imports them); the render functions only draw. `feature` is the decoding panel's one
// declaration of its settings (features.js): their defaults and link keys, its actions and reducer cases, and the
// page's `playing` (the steps playing on their own); what it asks is its spec's in panels.js (the "decode" slot).

import { VIRIDIS, chartTheme, colorAt, rgbString } from "./colors.js";
import { node, el } from "./dom.js";
import { pieceLabel, pieceQuote, pieceTitle, renderPiece } from "./piece.js";
import { pos } from "./positions.js";

export const MATCH_TOLERANCE = 1e-4; // max |cached − full| below this reads "matches the full pass"
export const STRIP = { width: 640, height: 120, left: 8, right: 8, top: 16, bottom: 34 };
export const MINI = { cell: 10, height: 12, maxWidth: 320 };
export const CACHE = { feature: 4, maxWidth: 260, maxRow: 10, maxHeight: 200 };
export const PLAY_MS = 650;

export const GENERATE_DEFAULT = { tokens: 8, sampling: "greedy", seed: 0 };

// The generation setting in the link: "8" (8 tokens, greedy) or "8s42" (8 sampled from seed 42); null: none.
export function genText(gen) {
  return gen.sampling === "sample" ? `${gen.tokens}s${gen.seed}` : String(gen.tokens);
}

export function parseGen(text) {
  const m = /^(\d{1,4})(?:s(\d{1,15}))?$/.exec(text || "");
  if (!m || Number(m[1]) < 1) return null;
  return { tokens: Number(m[1]), sampling: m[2] != null ? "sample" : "greedy", seed: m[2] != null ? Number(m[2]) : 0 };
}

const actions = {
  decodeSet: (on) => ({ type: "decodeSet", on }),
  decodeStepSet: (step) => ({ type: "decodeStepSet", step }),
  decodeGenSet: (gen) => ({ type: "decodeGenSet", gen }),
  playSet: (on) => ({ type: "playSet", on }),
};

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// a press of the panel's button asks again: the slot's nonce counts it (panels.js PANEL_SPECS.decode `nonce`)
const asked = (s, setPanel, next) => setPanel(next, "decode", { nonce: s.panels.decode.nonce + 1 });

export const feature = {
  ui: {
    decodeOn: false, // the KV-cache decoding panel runs (and reruns after each change) once asked to
    decodeStep: null, // the decoding step shown; null = the last
    decodeGen: null, // tokens generated after the input: {tokens, sampling: "greedy" | "sample", seed}; null = none
  },
  page: { playing: false }, // the decoding steps play on their own (not in the link)
  link: {
    write(ui, p) {
      if (ui.decodeOn) p.set("dec", ui.decodeStep == null ? "last" : String(ui.decodeStep));
      if (ui.decodeOn && ui.decodeGen) p.set("gen", genText(ui.decodeGen));
    },
    read(p) {
      if (!p.has("dec")) return {};
      const step = whole(p.get("dec"));
      return { decodeOn: true, decodeStep: step != null && step >= 0 ? step : null, decodeGen: parseGen(p.get("gen")) };
    },
  },
  // decoding is a page setting: it stays on, generating as it was, on a model change; the step was the old input's
  keep: (ui) => ({ decodeOn: ui.decodeOn, decodeGen: ui.decodeGen }),
  actions,
  reduce: {
    decodeSet: (s, a, { setUi, setPanel }) => {
      const next = setUi(s, { decodeOn: a.on, decodeStep: a.on ? 0 : null });
      return a.on ? asked(s, setPanel, next) : next;
    },
    decodeStepSet: (s, a, { setUi }) => setUi(s, { decodeStep: a.step }),
    // generate after the input (or stop generating: gen null); the last step, the newest token, is shown
    decodeGenSet: (s, a, { setUi, setPanel }) =>
      asked(s, setPanel, setUi(s, { decodeOn: true, decodeGen: a.gen, decodeStep: null })),
    playSet: (s, a) => ({ ...s, playing: a.on }),
  },
};

// A decode answer with its generated tokens (generate) folded in as further steps: each new token's row is drawn
// like an input step's, the cache holding one more token per step. `prompt` is the input's length.
const folded = new WeakMap();
export function withGenerated(r) {
  if (!r || !r.generated?.length) return r;
  if (folded.has(r)) return folded.get(r);
  const per = r.cache.bytes_per_token;
  const more = r.generated.map((g) => ({
    position: g.position,
    token: g.token,
    weights: g.weights,
    cache_length: g.position + 1,
    cache_bytes: (g.position + 1) * per,
    next_token: null,
    generated: g,
  }));
  const out = {
    ...r,
    prompt: r.tokens.length,
    tokens: [...r.tokens, ...more.map((g) => g.token)],
    steps: [...r.steps, ...more],
  };
  folded.set(r, out);
  return out;
}

// The step shown: `step` clamped into the result's steps; null means the last.
export function clampStep(step, nSteps) {
  if (nSteps <= 0) return 0;
  if (step == null || !Number.isFinite(step)) return nSteps - 1;
  return Math.max(0, Math.min(nSteps - 1, Math.trunc(step)));
}

// The new query row of one head at step t: t + 1 weights, one per cached key.
export function stepRow(result, t, layer, head) {
  return result.steps[t].weights[layer][head];
}

// The head the panel shows: the page's chosen head when the decode result has it, else L0 H0.
export function decodeHead(result, focus) {
  if (focus && focus[0] < result.layers && focus[1] < result.heads) return focus;
  return [0, 0];
}

export function formatBytes(n) {
  if (n == null || !Number.isFinite(n)) return "–";
  const units = ["bytes", "kB", "MB", "GB", "TB", "PB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return i === 0 ? `${n.toLocaleString("en-US")} bytes` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[i]}`;
}

// The check against the full pass in words.
export function matchText(maxDiff) {
  const v = maxDiff === 0 ? "0" : maxDiff.toExponential(1);
  return maxDiff < MATCH_TOLERANCE
    ? `max |cached − full| = ${v}: matches the full pass`
    : `max |cached − full| = ${v}: differs from the full pass`;
}

// Widths and heights of one layer's K and V blocks after `length` cached tokens of `total`: one row per cached token,
// kv_heads blocks of d_head (K) or d_v (V) features across. The feature width is fixed, so fewer K/V groups draw a
// narrower cache; only a cache wider than CACHE.maxWidth is scaled down.
export function cacheGeometry(r, length, total) {
  const kCols = r.kv_heads * r.d_head;
  const vCols = r.kv_heads * r.d_v;
  const feature = Math.min(CACHE.feature, CACHE.maxWidth / Math.max(kCols, vCols));
  const row = Math.max(1, Math.min(CACHE.maxRow, Math.floor(CACHE.maxHeight / Math.max(total, 1))));
  return {
    row,
    feature,
    kCols,
    vCols,
    length,
    total,
    kWidth: kCols * feature,
    vWidth: vCols * feature,
    height: total * row,
    filled: length * row,
  };
}

function stepStrip(row, tokens, t) {
  const g = STRIP;
  const S = tokens.length;
  const plotW = g.width - g.left - g.right;
  const plotH = g.height - g.top - g.bottom;
  const slot = plotW / Math.max(S, 1);
  const svg = el("svg", { viewBox: `0 0 ${g.width} ${g.height}`, width: "100%", class: "dec-strip", role: "img" });
  svg.style.maxWidth = `${g.width * 1.25}px`;
  const base = g.top + plotH;
  svg.setAttribute(
    "aria-label",
    `Step ${t}: query ${pos(t)} ${pieceQuote(tokens[t])} over ${t + 1} cached keys; largest weight ${Math.max(...row).toFixed(3)} on key ${pos(row.indexOf(Math.max(...row)))}`,
  );
  for (let k = 0; k < S; k++) {
    const x = g.left + k * slot;
    if (k > t) {
      svg.append(el("rect", { x: x + 1, y: g.top, width: Math.max(1, slot - 2), height: plotH, class: "dec-future" }));
      continue;
    }
    const w = row[k];
    const h = Math.max(1, w * plotH);
    const fill = rgbString(colorAt(VIRIDIS, w));
    const r = el("rect", {
      x: x + 1,
      y: base - h,
      width: Math.max(1, slot - 2),
      height: h,
      fill,
      class: `dec-bar${k === t ? " dec-self" : ""}`,
      "data-key": k,
      "data-weight": w,
    });
    r.append(
      el(
        "title",
        {},
        `key ${pos(k)} ${pieceQuote(tokens[k])}: weight ${w.toFixed(4)}${k === t ? " (the new token itself)" : ""}`,
      ),
    );
    svg.append(r);
    if (slot >= 26) {
      svg.append(
        el(
          "text",
          { x: x + slot / 2, y: Math.max(g.top + 9, base - h - 3), class: "dec-val", "text-anchor": "middle" },
          w.toFixed(2),
        ),
      );
    }
  }
  svg.append(el("line", { x1: g.left, x2: g.width - g.right, y1: base + 0.5, y2: base + 0.5, class: "dc-axis" }));
  const every = Math.ceil(S / Math.max(1, Math.floor(plotW / 34)));
  for (let k = 0; k < S; k++) {
    if (k % every !== 0 && k !== t) continue;
    const label = `${k === t ? "▲" : ""}${pieceLabel(tokens[k], 6)}`;
    svg.append(
      el(
        "text",
        {
          x: g.left + k * slot + slot / 2,
          y: base + 13,
          "text-anchor": "middle",
          class: `dec-tick${k === t ? " now" : ""}${k > t ? " future" : ""}`,
        },
        label,
      ),
    );
  }
  svg.append(
    el(
      "text",
      { x: g.left, y: g.height - 4, class: "dec-axis-label" },
      `keys in the cache: 0–${t}${t + 1 < S ? ` · ${S - t - 1} still to come (dashed)` : ""}`,
    ),
  );
  return svg;
}

// The generated tokens as one row of chips after the input: press one (or use the step controls) to show its row.
function generatedRow(r, t, onStep) {
  const row = node("div", { className: "dec-generated", role: "group" });
  row.setAttribute("aria-label", "Generated tokens");
  row.setAttribute("data-testid", "decode-generated");
  row.append(node("span", { className: "muted small" }, `Generated after the ${r.prompt} input tokens:`));
  r.generated.forEach((g) => {
    const b = node("button", { type: "button", className: "token dec-gen" });
    b.dataset.position = String(g.position);
    b.setAttribute("aria-pressed", g.position === t ? "true" : "false");
    b.setAttribute("aria-label", `position ${pos(g.position)} ${pieceTitle(g.token)}, p = ${g.p.toFixed(3)}`);
    b.classList.toggle("special", !!g.special);
    b.append(
      node("span", { className: "idx" }, String(pos(g.position))),
      renderPiece(g.token, { special: !!g.special, tag: "span" }),
    );
    b.addEventListener("click", () => onStep?.(g.position));
    row.append(b);
  });
  return row;
}

// One mini strip per head: the new query row over the cached keys, coloured by weight.
function miniStrip(row, S) {
  const canvas = document.createElement("canvas");
  const cell = Math.max(2, Math.min(MINI.cell, Math.floor(MINI.maxWidth / Math.max(S, 1))));
  const ratio = window.devicePixelRatio || 1;
  const w = S * cell;
  canvas.width = Math.round(w * ratio);
  canvas.height = Math.round(MINI.height * ratio);
  canvas.style.width = `${w}px`;
  canvas.style.height = `${MINI.height}px`;
  canvas.setAttribute("aria-hidden", "true");
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const theme = chartTheme(); // the slots still to come: the theme's empty field, not white on a dark panel
  ctx.fillStyle = theme.field;
  ctx.fillRect(0, 0, w, MINI.height);
  for (let k = 0; k < S; k++) {
    if (k < row.length) {
      ctx.fillStyle = rgbString(colorAt(VIRIDIS, row[k]));
      ctx.fillRect(k * cell, 0, cell, MINI.height);
    } else {
      ctx.strokeStyle = theme.fieldLine;
      ctx.setLineDash([2, 2]);
      ctx.strokeRect(k * cell + 0.5, 0.5, cell - 1, MINI.height - 1);
      ctx.setLineDash([]);
    }
  }
  return canvas;
}

// view: {result, step, head: [layer, head], onPick(layer, head)}
export function renderDecodeStep(root, view) {
  const r = view.result;
  root.replaceChildren();
  if (!r) {
    root.hidden = true;
    return;
  }
  root.hidden = false;
  const t = view.step;
  const [l, h] = view.head;
  const s = r.steps[t];
  const row = stepRow(r, t, l, h);
  const multi = r.layers > 1;
  const name = multi ? `L${l} H${h}` : `H${h}`;
  Object.assign(root.dataset, {
    step: String(t),
    token: s.token,
    layer: String(l),
    head: String(h),
    weights: JSON.stringify(row),
    next: s.next_token ? s.next_token.token : "",
    generated: s.generated ? "1" : "",
  });
  const title = node("p", { className: "dec-title" });
  const how = s.generated
    ? `${view.sampling === "sample" ? "sampled" : "the most likely"}, p = ${s.generated.p.toFixed(3)}`
    : "";
  title.append(
    node("strong", {}, `Step ${t + 1} of ${r.steps.length}: `),
    node(
      "span",
      {},
      s.generated
        ? `generated token ${pieceQuote(s.token)} (${how}) enters the cache at position ${pos(t)}; its query attends over ${t + 1} cached keys (${name}).`
        : `position ${pos(t)} ${pieceQuote(s.token)} enters the cache; its query attends over ${t + 1} cached key${t ? "s" : ""} (${name}).`,
    ),
  );
  root.append(title);
  if (r.generated?.length) root.append(generatedRow(r, t, view.onStep));
  if (s.next_token) {
    const next = t + 1 < r.tokens.length ? r.tokens[t + 1] : null;
    const right = next != null && s.next_token.token === next;
    const p = node("p", { className: `dec-next${right ? " right" : ""}` });
    p.setAttribute("data-testid", "decode-next");
    p.textContent =
      `Predicted next token: ${pieceQuote(s.next_token.token)} (p = ${s.next_token.p.toFixed(3)})` +
      (next == null
        ? "."
        : right
          ? ` ✓ — and ${pieceQuote(next)} does come next.`
          : ` — the text continues with ${pieceQuote(next)}.`);
    root.append(p);
  }
  root.append(stepStrip(row, r.tokens, t));
  const heads = node("div", { className: "dec-heads" });
  heads.append(
    node(
      "p",
      { className: "muted small" },
      "Every head's new query row at this step (press one to show it above and open it large):",
    ),
  );
  const grid = node("div", { className: "dec-mini-grid" });
  for (let li = 0; li < r.layers; li++) {
    for (let hi = 0; hi < r.heads; hi++) {
      const b = node("button", { type: "button", className: "dec-mini" });
      const chosen = li === l && hi === h;
      b.setAttribute("aria-pressed", chosen ? "true" : "false");
      b.dataset.layer = String(li);
      b.dataset.head = String(hi);
      const label = multi ? `L${li} H${hi}` : `H${hi}`;
      const wrow = stepRow(r, t, li, hi);
      const top = wrow.indexOf(Math.max(...wrow));
      b.setAttribute(
        "aria-label",
        `${label}: most weight on key ${pos(top)} ${pieceQuote(r.tokens[top])} (${wrow[top].toFixed(2)})`,
      );
      b.append(node("span", { className: "dec-mini-name" }, label), miniStrip(wrow, r.tokens.length));
      b.addEventListener("click", () => view.onPick(li, hi));
      grid.append(b);
    }
  }
  heads.append(grid);
  root.append(heads);
}

function cacheCanvas(geo, cols, width, kind) {
  const canvas = document.createElement("canvas");
  const ratio = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.ceil(width));
  canvas.width = Math.round(w * ratio);
  canvas.height = Math.round(Math.max(1, geo.height) * ratio);
  canvas.style.width = `${w}px`;
  canvas.style.height = `${Math.max(1, geo.height)}px`;
  canvas.setAttribute("aria-hidden", "true");
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const theme = chartTheme(); // the room still empty, and the rules, in the theme's colours
  ctx.fillStyle = theme.soft;
  ctx.fillRect(0, 0, w, geo.height);
  const fill = kind === "K" ? "#0072b2" : "#e69f00"; // Okabe–Ito blue and orange
  const newest = kind === "K" ? "#56b4e9" : "#f0c36b";
  for (let i = 0; i < geo.length; i++) {
    ctx.fillStyle = i === geo.length - 1 ? newest : fill;
    ctx.fillRect(0, i * geo.row, w, Math.max(1, geo.row - (geo.row > 3 ? 1 : 0)));
  }
  // the groups' boundaries
  ctx.strokeStyle = theme.panel;
  ctx.lineWidth = 1;
  const groups = cols.groups;
  for (let g = 1; g < groups; g++) {
    const x = Math.round((w * g) / groups) + 0.5;
    ctx.beginPath();
    ctx.moveTo(x, 0);
    ctx.lineTo(x, geo.filled);
    ctx.stroke();
  }
  ctx.strokeStyle = theme.fieldLine;
  ctx.setLineDash([3, 3]);
  ctx.strokeRect(0.5, 0.5, w - 1, Math.max(1, geo.height - 1));
  ctx.setLineDash([]);
  return canvas;
}

// view: {result, step}
export function renderKvCache(root, view) {
  const r = view.result;
  root.replaceChildren();
  if (!r) {
    root.hidden = true;
    return;
  }
  root.hidden = false;
  const t = view.step;
  const s = r.steps[t];
  const length = s.cache_length;
  Object.assign(root.dataset, {
    bytes: String(s.cache_bytes),
    bytesPerToken: String(r.cache.bytes_per_token),
    length: String(length),
    maxDiff: String(r.max_diff_vs_full),
    kvHeads: String(r.kv_heads),
    heads: String(r.heads),
  });
  const head = node("p", { className: "kv-bytes" });
  head.append(
    node("strong", {}, `Cache after step ${t + 1}: ${formatBytes(s.cache_bytes)}`),
    node(
      "span",
      {},
      ` = ${length} token${length === 1 ? "" : "s"} × ${r.cache.bytes_per_token.toLocaleString("en-US")} bytes per token.`,
    ),
  );
  root.append(head);
  const formula = node("p", { className: "kv-formula" }, r.cache.formula);
  formula.setAttribute("data-testid", "kv-formula");
  root.append(formula);
  if (r.kv_heads < r.heads) {
    const full = (r.cache.bytes_per_token * r.heads) / r.kv_heads;
    root.append(
      node(
        "p",
        { className: "kv-grouped" },
        `Grouped K/V: ${r.heads} heads share ${r.kv_heads} K/V group${r.kv_heads === 1 ? "" : "s"}, so the cache holds ` +
          `${r.cache.bytes_per_token.toLocaleString("en-US")} bytes per token instead of ${full.toLocaleString("en-US")} ` +
          `(${r.heads / r.kv_heads}× smaller).`,
      ),
    );
  }
  const match = node(
    "p",
    { className: `kv-match${r.max_diff_vs_full < MATCH_TOLERANCE ? " ok" : " bad"}` },
    matchText(r.max_diff_vs_full),
  );
  match.setAttribute("data-testid", "kv-match");
  root.append(match);
  const geo = cacheGeometry(r, length, r.tokens.length);
  const layers = node("div", { className: "kv-layers" });
  for (let l = 0; l < r.layers; l++) {
    const fig = node("figure", { className: "kv-layer" });
    fig.dataset.layer = String(l);
    fig.append(node("figcaption", {}, `layer ${l}`));
    const pair = node("div", { className: "kv-pair" });
    for (const [kind, cols, width, dim] of [
      ["K", { groups: r.kv_heads }, geo.kWidth, r.d_head],
      ["V", { groups: r.kv_heads }, geo.vWidth, r.d_v],
    ]) {
      const box = node("div", { className: "kv-block" });
      box.dataset.kind = kind;
      box.dataset.rows = String(length);
      box.dataset.width = String(r.kv_heads * dim);
      box.append(node("span", { className: "kv-block-name" }, `${kind} ${length} × ${r.kv_heads}·${dim}`));
      box.append(cacheCanvas(geo, cols, width, kind));
      pair.append(box);
    }
    fig.append(pair);
    layers.append(fig);
  }
  root.append(layers);
  root.append(
    node(
      "p",
      { className: "muted small" },
      `Each row is one cached token (the newest lighter); each block across is one K/V group of ${r.d_head} (K) or ${r.d_v} (V) ` +
        "numbers. The dashed outline is the room the rest of the sequence will take.",
    ),
  );
}
