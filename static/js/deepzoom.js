// The "Long input" panel (templates/deepzoom.html, /?long=1): a long text run once on the server (POST /api/runs,
// longrun.js), every head's overview drawn from its summary (grid x grid block maxima, or means), and one head in the
// deep-zoom canvas (zoomview.js) from the whole matrix to single cells with their exact weights and tokens. Above
// single weights a block shows its largest weight (a sharp head's few strong keys stay in sight) or its mean (where
// the weight goes); the head's colour scale is the same for both, up to its largest weight. A query row picked
// on the canvas or in the (virtualised) token list shows its top keys (GET .../rows/). A run the server has dropped
// (404 run_expired) is posted again under the same name and the view carries on, saying so.
//
// The models offered are those that take the text's length (longmodels.js): one with fewer positions than the text
// has words is left out and named with its limit, and a button fills a model with positions (pycode, MiniLM) to
// them. The canvas is framed by position axes and a minimap (zoomframe.js); the weight under the pointer or the
// keyboard's cell cursor shows beside it, and the cursor's cell is read out (query, key, tokens, weight).
//
// The run itself is not page state: thirty thousand words stay out of the store and the link. The panel's setting
// (ui.deepzoom, `long=1` in the link) says only whether it is open.

import { act } from "./actions.js";
import { describeError, fetchAttentionJson, runName } from "./api.js";
import { PALETTES, VIRIDIS } from "./colors.js";
import { node, within } from "./dom.js";
import { absentLine, fillText, fillable, longChoice, positionsOf, runnable } from "./longmodels.js";
import { MAX_RUN_TOKENS, fetchRow, fetchTile, isExpired, makeText, postRun, wordCount } from "./longrun.js";
import { pos } from "./positions.js";
import { minimapTarget } from "./zoomaxes.js";
import { drawAxis, drawMinimap, placeTip } from "./zoomframe.js";
import { ZoomView, imageCanvas, makeLut, paint } from "./zoomview.js";

const NAME = "deepzoom";
const ROW_PX = 20; // a token row's height in the virtualised list
const THUMB_PX = 120; // an overview canvas's size on the page
const FRAME_MS = 8; // thumbnails drawn per animation frame: as many as fit in this long
const LOG_FLOOR = 0.1; // the log scale starts at LOG_FLOOR / S, a tenth of a uniform row's weight

// The /api/runs body for a text on a model: causal or not, sinusoidal positions where the model has the option.
export function runBody(model, text, causal, positions) {
  const body = { model: model.name, text, masks: { causal } };
  if (model.options && "positions" in model.options) body.options = { ...model.options, positions };
  return body;
}

// The colour scale of a head: log from a tenth of 1/S to its largest weight.
export function headScale(seqLen, max) {
  const hi = max > 0 ? max : 1;
  return { log: true, lo: Math.min(hi / 10, LOG_FLOOR / seqLen), hi };
}

function summaryMax(rows) {
  let m = 0;
  for (const r of rows) for (const v of r) if (v > m) m = v;
  return m;
}

function withData(el, data) {
  Object.assign(el.dataset, data);
  return el;
}

// "token" for a position, quoted and cut short.
function tok(tokens, i) {
  const t = tokens[i] ?? "";
  return `“${t.length > 24 ? `${t.slice(0, 23)}…` : t}”`;
}

// What one panel holds outside the page state: its run, the head in the canvas, its zoom view, its colours. Each
// root the panel is bound to gets one of its own (instanceOf), so two deep zooms on one page, or a copy of the
// markup drawn anywhere, never share a run, a canvas or a model list.
function freshInstance() {
  return {
    run: null, // the run's answer (POST /api/runs): its tokens and config
    body: null, // the body it was posted with, to post it again under its name
    name: null,
    head: [0, 0],
    reposting: null,
    zoom: null, // the ZoomView on this root's canvas
    palette: "viridis",
    agg: "max",
    models: [], // /api/models' list, as the store last had it
    map: { backdrop: null, covers: 1 }, // the zoomed head's summary image, for the minimap
  };
}

const instances = new WeakMap(); // panel root -> its instance

function instanceOf(root) {
  if (!instances.has(root)) instances.set(root, freshInstance());
  return instances.get(root);
}
const AGG_WORDS = { max: "largest weight", mean: "mean weight" };

// The model select offers the models that take the text's length; one line names the others and their limits.
function offerModels(root) {
  const local = instanceOf(root);
  const select = root.querySelector("#dz-model");
  const words = wordCount(root.querySelector("#dz-text").value);
  const { offered, absent } = longChoice(local.models, words);
  const names = offered.map((m) => m.name);
  if (select.dataset.names !== names.join(",")) {
    const was = select.value;
    const label = (m) => (positionsOf(m) ? `${m.name} (up to ${positionsOf(m).toLocaleString("en")} tokens)` : m.name);
    select.replaceChildren(...offered.map((m) => node("option", { value: m.name }, label(m))));
    select.value = names.includes(was) ? was : names.includes("random") ? "random" : names[0] || "";
    select.dataset.names = names.join(",");
  }
  const line = root.querySelector("#dz-absent");
  line.textContent = absentLine(absent, words);
  line.hidden = !absent.length;
  const model = offered.find((m) => m.name === select.value);
  root.querySelector("#dz-positions").disabled = !(model?.options && "positions" in model.options);
}

// One button per model with positions and a text of its own: its text repeated to fill its positions, then run.
function offerFills(root) {
  const local = instanceOf(root);
  const box = root.querySelector("#dz-fills");
  const models = fillable(local.models);
  if (box.dataset.names === models.map((m) => m.name).join(",")) return;
  box.dataset.names = models.map((m) => m.name).join(",");
  box.replaceChildren(
    ...models.map((m) => {
      const words = `${m.name} at its ${positionsOf(m).toLocaleString("en")} positions`;
      const b = node("button", { type: "button", className: "secondary small-btn" }, words);
      return withData(b, { fill: m.name, testid: `dz-fill-${m.name}` });
    }),
  );
}

// What a cell says beside the pointer or the cursor: its weight (or its block's), short.
function tipText(c) {
  if (!c) return "";
  const w = c.weight == null ? "…" : c.weight === 0 ? "0 (masked)" : Number(c.weight).toPrecision(4);
  return c.exact ? `${pos(c.query)} → ${pos(c.key)}: ${w}` : `block ${pos(c.q0)}, ${pos(c.k0)}: ${w}`;
}

function bindPanel(root, store) {
  const local = instanceOf(root);
  const part = within(root);
  // the run's line: what it is doing or did; `refused`: the server said no (shown as an error, not a grey note)
  const status = (text, refused = false) => {
    part("dz-status").textContent = text;
    part("dz-status").classList.toggle("field-error", refused);
    part("dz-status").classList.toggle("muted", !refused);
  };
  const note = (text) => {
    part("dz-note").textContent = text;
    part("dz-note").hidden = !text;
  };
  let limit = MAX_RUN_TOKENS; // until this server's own ATTNLAB_MAX_RUN_TOKENS is read from /api/health
  const count = () => {
    const n = wordCount(part("dz-text").value);
    part("dz-count").textContent =
      `${n.toLocaleString("en")} words${n > limit ? ` (a run takes up to ${limit.toLocaleString("en")})` : ""}`;
    offerModels(root);
  };
  fetch("/api/health")
    .then((r) => (r.ok ? r.json() : null))
    .then((h) => {
      if (h && Number.isInteger(h.limits?.max_run_tokens)) {
        limit = h.limits.max_run_tokens;
        count();
      }
    })
    .catch(() => {}); // the server's 422 names the limit anyway

  part("dz-toggle").addEventListener("click", () => {
    const open = !!store.getState().ui[NAME];
    store.dispatch(act.panelSet(NAME, open ? null : 1));
  });
  for (const b of root.querySelectorAll("[data-words]")) {
    b.addEventListener("click", () => {
      part("dz-text").value = makeText(Number(b.dataset.words));
      count();
    });
  }
  part("dz-text").addEventListener("input", count);
  part("dz-model").addEventListener("change", () => offerModels(root));
  part("dz-fills").addEventListener("click", async (e) => {
    const b = e.target.closest("[data-fill]");
    const m = b && runnable(local.models).find((x) => x.name === b.dataset.fill);
    if (!m) return;
    status(`Reading how many tokens ${m.name}'s own text makes…`);
    try {
      const r = await fetchAttentionJson({ model: m.name, text: m.default_text, include: ["stats"] });
      part("dz-text").value = fillText(m.default_text, r.tokens.length, positionsOf(m));
      count();
      part("dz-model").value = m.name;
      offerModels(root);
      part("dz-run").click();
    } catch (err) {
      status(describeError(err).message);
    }
  });

  // post the run again under its name (once, however many requests found it gone), then ask for the view again
  const repost = () => {
    if (!local.reposting) {
      note("The server had dropped this run (it keeps a bounded number): posting it again…");
      local.reposting = postRun(local.body, local.name)
        .then(() => {
          note("The server had dropped this run; it was posted again and the view carries on.");
          local.zoom.refetch();
        })
        .catch((err) => note(`The run could not be posted again: ${describeError(err).message}`))
        .finally(() => (local.reposting = null));
    }
    return local.reposting;
  };
  const recovering =
    (ask) =>
    (...args) =>
      ask(...args).catch(async (err) => {
        if (!isExpired(err)) throw err;
        await repost();
        return ask(...args);
      });

  const tile = recovering((z, x, y, signal) =>
    fetchTile(local.name, local.head[0], local.head[1], z, x, y, local.agg, signal),
  );
  const row = recovering((q) => fetchRow(local.name, local.head[0], local.head[1], q));

  // a cell's words into `out` (the line under the canvas, or the cursor's read-out) with its numbers as data
  const say = (out, c) => {
    if (!c || !local.run) {
      out.textContent = "";
      delete out.dataset.weight;
      return;
    }
    const t = local.run.tokens;
    const w = c.weight == null ? "…" : c.weight === 0 ? "0 (masked)" : Number(c.weight).toPrecision(6);
    const text = c.exact
      ? `query ${pos(c.query)} ${tok(t, c.query)} → key ${pos(c.key)} ${tok(t, c.key)}: weight ${w}`
      : `queries ${pos(c.q0)}–${pos(c.q0 + c.cell - 1)}, keys ${pos(c.k0)}–${pos(c.k0 + c.cell - 1)}: ${AGG_WORDS[local.agg]} ${w} (zoom in for single weights)`;
    if (out.textContent !== text) out.textContent = text; // a live region says a change once, not every frame
    Object.assign(out.dataset, { query: c.query, key: c.key, exact: c.exact ? "1" : "0" });
    if (c.weight == null) delete out.dataset.weight;
    else out.dataset.weight = String(c.weight);
  };
  const tip = (c, at) => {
    const { w, h } = local.zoom.size();
    placeTip(part("dz-tip"), tipText(c), at?.[0] ?? 0, at?.[1] ?? 0, w, h);
    if (c && c.weight != null) part("dz-tip").dataset.weight = String(c.weight);
    else delete part("dz-tip").dataset.weight;
  };
  let cursorAt = null; // the cursor's cell and where its tip goes, while the canvas has the keyboard
  let hovered = false; // a pointer is over a cell: its weight is the one shown
  const keyed = () => document.activeElement === part("dz-canvas");
  const showCell = (c, at) => {
    hovered = !!c;
    if (c) {
      say(part("dz-cell"), c);
      tip(c, at);
    } else if (cursorAt && keyed()) {
      say(part("dz-cell"), cursorAt[0]);
      tip(...cursorAt);
    } else {
      say(part("dz-cell"), null);
      tip(null);
    }
  };
  // each frame, while the canvas has the keyboard: the cursor's cell read out (once per change) and shown beside it
  const showCursor = (c, at) => {
    if (!keyed()) return;
    cursorAt = [c, at];
    say(part("dz-read"), c);
    if (!hovered && !local.zoom.pointers.size) {
      say(part("dz-cell"), c);
      tip(c, at);
    }
  };
  part("dz-canvas").addEventListener("blur", () => {
    cursorAt = null;
    tip(null);
  });

  const pick = (q) => {
    const t = local.run.tokens;
    part("dz-row-title").textContent = `${pos(q)} ${tok(t, q)}`;
    part("dz-top").replaceChildren(node("li", { className: "muted" }, "…"));
    row(q).then(
      (r) => {
        const items = r.top.map((k) =>
          withData(node("li", {}, `key ${pos(k.key)} ${tok(t, k.key)}: ${k.weight.toPrecision(4)}`), { key: k.key }),
        );
        part("dz-top").replaceChildren(...items);
      },
      (err) => part("dz-top").replaceChildren(node("li", { className: "field-error" }, describeError(err).message)),
    );
  };

  local.zoom = new ZoomView(part("dz-canvas"), {
    fetchTile: tile,
    onCell: showCell,
    onCursor: showCursor,
    onPick: pick,
    onError: (err) => note(describeError(err).message),
    onView: (st, waiting) => {
      const levels = local.run.config.levels;
      const cell = 2 ** (levels - st.z);
      part("dz-level").textContent =
        `level ${st.z} of ${levels}: ${cell === 1 ? "single weights" : `blocks of ${cell} × ${cell}, their ${AGG_WORDS[local.agg]}`}${waiting ? ` · ${waiting} tiles coming` : ""}`;
      Object.assign(part("dz-level").dataset, {
        z: st.z,
        levels,
        waiting,
        standIns: st.standIns,
        frame: Number(part("dz-level").dataset.frame || 0) + 1,
      });
      const n = local.run.config.seq_len;
      const { w, h } = local.zoom.size();
      part("dz-axis-k").style.width = `${w}px`;
      part("dz-axis-q").style.height = `${h}px`;
      drawAxis(part("dz-axis-k"), st, n, local.run.tokens, true);
      drawAxis(part("dz-axis-q"), st, n, local.run.tokens, false);
      drawMinimap(part("dz-minimap"), st, n, local.map.backdrop, local.map.covers);
    },
  });
  // a click on the minimap moves the view's middle there, at the same zoom
  part("dz-minimap").addEventListener("click", (e) => {
    if (!local.run) return;
    const map = part("dz-minimap");
    const r = map.getBoundingClientRect();
    const [mx, my] = [e.clientX - r.left - map.clientLeft, e.clientY - r.top - map.clientTop]; // inside its border
    const { view } = local.zoom.state();
    const to = minimapTarget(mx, my, map.clientWidth, local.run.config.seq_len, {
      k: view.k1 - view.k0,
      q: view.q1 - view.q0,
    });
    local.zoom.moveTo(to.ox, to.oy);
  });
  for (const b of root.querySelectorAll("[data-zoom]")) {
    b.addEventListener("click", () => {
      const z = local.zoom;
      const { w, h } = z.size();
      if (b.dataset.zoom === "fit") z.fit();
      else z.zoomAt(b.dataset.zoom === "in" ? 2 : 0.5, w / 2, h / 2);
    });
  }

  const choose = (layer, head, keep = false) => {
    local.head = [layer, head];
    const r = local.run;
    const summary = r.layers[layer].heads[head].summary;
    const scale = headScale(r.config.seq_len, summaryMax(summary.max));
    const lut = makeLut(PALETTES[local.palette] || VIRIDIS);
    const backdrop = imageCanvas(paint(summary[local.agg], scale, lut));
    const covers = summary.max.length * summary.block;
    local.map = { backdrop, covers };
    part("dz-head").textContent = `layer ${r.layers[layer].index}, head ${head}`;
    part("dz-legend").textContent =
      `colour: log scale from ${scale.lo.toPrecision(2)} to ${scale.hi.toPrecision(3)} (this head's largest weight); grey: 0, a masked cell; above single weights, each block's ${AGG_WORDS[local.agg]}`;
    for (const b of part("dz-overview").children)
      b.setAttribute("aria-pressed", String(b.dataset.layer === String(layer) && b.dataset.head === String(head)));
    const id = `${local.name}/${layer}/${head}/${local.agg}`; // a tile of the other kind is another tile
    local.zoom.setHead({ id, seqLen: r.config.seq_len, levels: r.config.levels, scale, lut, backdrop, covers }, keep);
  };

  // every head's thumbnail, a few per animation frame (FRAME_MS each): no long task however many heads there are
  const overview = (r) => {
    const box = part("dz-overview");
    box.replaceChildren();
    const lut = makeLut(PALETTES[local.palette] || VIRIDIS);
    const heads = r.layers.flatMap((l, li) => l.heads.map((h, hi) => [li, hi, l.index, h]));
    const thumb = ([li, hi, index, h]) => {
      const c = imageCanvas(paint(h.summary[local.agg], headScale(r.config.seq_len, summaryMax(h.summary.max)), lut));
      Object.assign(c.style, { width: `${THUMB_PX}px`, height: `${THUMB_PX}px` });
      const b = withData(node("button", { type: "button", className: "dz-thumb" }), { layer: li, head: hi });
      b.setAttribute("aria-label", `layer ${index}, head ${hi}: zoom this head`);
      b.setAttribute("aria-pressed", String(li === local.head[0] && hi === local.head[1]));
      b.append(c, node("span", { className: "small" }, `L${index} H${hi} · sink ${h.sink_mass.toFixed(2)}`));
      b.addEventListener("click", () => choose(li, hi));
      box.append(b);
    };
    const next = (i) => {
      const t0 = performance.now();
      let at = i;
      while (local.run === r && at < heads.length && performance.now() - t0 < FRAME_MS) thumb(heads[at++]);
      if (local.run === r && at < heads.length) requestAnimationFrame(() => next(at));
    };
    requestAnimationFrame(() => next(0));
  };

  local.repaint = () => {
    if (!local.run) return;
    overview(local.run);
    choose(...local.head, true);
  };
  // the blocks' largest or mean weight: the overview, the backdrop and the tiles of the other kind, where the view is
  part("dz-agg").addEventListener("change", () => {
    local.agg = part("dz-agg").value === "mean" ? "mean" : "max";
    // on a phone the canvas it repaints sits below the toolbar, out of sight
    const canvas = part("dz-canvas");
    const r = canvas.getBoundingClientRect();
    if (r.bottom <= 0 || r.top >= window.innerHeight) canvas.scrollIntoView({ block: "nearest" });
    local.repaint();
  });

  // the token list: only the rows in sight are in the document
  const list = part("dz-tokens");
  const drawList = () => {
    const t = local.run ? local.run.tokens : [];
    const first = Math.floor(list.scrollTop / ROW_PX);
    const shown = Math.ceil((list.clientHeight || 240) / ROW_PX) + 1;
    const rows = [];
    for (let i = first; i < Math.min(t.length, first + shown); i++) {
      const b = withData(node("button", { type: "button", className: "dz-token" }, `${pos(i)} ${t[i]}`), { index: i });
      b.style.top = `${i * ROW_PX}px`;
      rows.push(b);
    }
    const spacer = node("div", { className: "dz-spacer" });
    spacer.style.height = `${t.length * ROW_PX}px`;
    list.replaceChildren(spacer, ...rows);
  };
  list.addEventListener("scroll", () => requestAnimationFrame(drawList));
  list.addEventListener("click", (e) => {
    const b = e.target.closest("[data-index]");
    if (!b || !local.run) return;
    pick(Number(b.dataset.index));
    local.zoom.showQuery(Number(b.dataset.index));
  });

  part("dz-run").addEventListener("click", async () => {
    const s = store.getState();
    const model = longChoice(s.models, wordCount(part("dz-text").value)).offered.find(
      (m) => m.name === part("dz-model").value,
    );
    const text = part("dz-text").value;
    if (!wordCount(text)) return status("Paste a text or make one first.", true);
    if (!model)
      return status(
        "No model here takes a text this long: see the line above, or fill a model to its positions.",
        true,
      );
    local.body = runBody(model, text, part("dz-causal").checked, part("dz-positions").checked);
    local.name = runName();
    note("");
    const t0 = performance.now();
    const tick = setInterval(
      () =>
        status(
          `Running ${wordCount(text).toLocaleString("en")} words… ${((performance.now() - t0) / 1000).toFixed(0)} s`,
        ),
      500,
    );
    part("dz-run").disabled = true;
    try {
      const r = await postRun(local.body, local.name);
      local.run = r;
      status(
        `${r.config.seq_len.toLocaleString("en")} tokens, ${r.config.n_layers} layers × ${r.config.n_heads} heads, in ${(r.timings_ms.run / 1000).toFixed(1)} s`,
      );
      root.dataset.run = r.run;
      overview(r);
      list.scrollTop = 0;
      drawList();
      choose(0, 0);
    } catch (err) {
      const e = describeError(err);
      // a long run's limit is ATTNLAB_MAX_RUN_TOKENS, which the server's message names: not the hint's /api/attention one
      const said = e.code === "too_large" ? e.message : `${e.message} ${e.hint || ""}`.trim();
      const p = positionsOf(model);
      status(
        p
          ? `${said} (${model.name}'s button “${model.name} at its ${p.toLocaleString("en")} positions” fills them.)`
          : said,
        true,
      );
    } finally {
      clearInterval(tick);
      part("dz-run").disabled = false;
    }
  });

  // what a test (or a script) can read of the view: the run, the zoom's state, what is under a canvas point
  root.deepzoom = {
    run: () => local.run,
    name: () => local.name,
    head: () => local.head,
    state: () => local.zoom.state(),
    cellAt: (px, py) => local.zoom.cellAt(px, py),
    cursor: () => local.zoom.cursor,
  };
  count();
  // a link that names only this panel (?long=1, no model) opens it once the models are known, in sight
  let wanted = new URLSearchParams(location.search).get(panel.setting.key) === "1";
  store.subscribe((s, _prev, a) => {
    if (!wanted || a?.type !== "restored") return;
    wanted = false;
    if (!s.ui[NAME]) store.dispatch(act.panelSet(NAME, 1));
    root.scrollIntoView({ block: "start" });
  });
}

function renderPanel(root, s) {
  const local = instanceOf(root);
  const open = !!s.ui[NAME];
  const body = root.querySelector("#dz-body");
  const wasHidden = body.hidden;
  body.hidden = !open;
  const toggle = root.querySelector("#dz-toggle");
  toggle.textContent = open ? "✕ Close" : "Open";
  toggle.setAttribute("aria-expanded", String(open));
  const palette = s.ui.palette || "viridis";
  if (palette !== local.palette) {
    local.palette = palette;
    local.repaint?.(); // the overview and the zoomed head in the new colours
  }
  if (s.models !== local.models) {
    local.models = s.models || [];
    offerModels(root);
    offerFills(root);
  }
  if (open && wasHidden && local.zoom?.head) local.zoom.schedule();
}

export const panel = {
  words: "the long run",
  setting: { key: "long", encode: () => "1", decode: (raw) => (raw === "1" ? 1 : null), dropOnModel: false },
  request: () => null, // it asks the long-run routes itself: POST /api/runs, then tiles and rows
  render: (root, _slot, s) => renderPanel(root, s),
  deps: (s) => [s.models, s.ui.palette],
  bind: bindPanel,
};
