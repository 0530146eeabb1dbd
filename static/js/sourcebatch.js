// What the queries and keys come from besides the sequence: a cross-attention source (keys and values from a second
// text, its positions marked padding one by one) or a batch (one text a line, padded to the longest, one item shown
// at a time). Their boxes are moreinputs.js's, the source's tokens and the item menu tokens.js's. `feature` is their
// one declaration (features.js): settings and link keys, the boxes kept as typed until Run, what a model change
// keeps, the actions and reducer cases, and how they reshape the /api/attention body (`reshape`), give it back as one
// sequence (`alone`) and size its answer (`extent`).

import { can } from "./capabilities.js";
import { itemResult } from "./batch.js";
import { paddingFlags, splitTokens, togglePadded } from "./masks.js";
import { pos } from "./positions.js";

const LONGEST = 20000; // characters a link's source or batch is read to

// The batch textarea's lines that hold text: one item each.
export function batchTexts(raw) {
  return (raw || "")
    .split("\n")
    .map((t) => t.trim())
    .filter(Boolean);
}

// The batch's texts when this state runs one (a line or more on a model whose /api/models entry `info` says it
// batches), else null.
export function batchOf(s, info) {
  const texts = batchTexts(s.batch);
  return texts.length && can(info, "batches") ? texts : null;
}

// The cross-attention source text when this state runs one (on a model whose entry says cross_attention), else
// null. A batch wins over a source.
export function sourceOf(s, info) {
  const t = (s.source || "").trim();
  return t && can(info, "cross_attention") && !batchOf(s, info) ? t : null;
}

const whole = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

const positions = (raw) =>
  (raw || "")
    .split(",")
    .map(whole)
    .filter((v) => v != null && v >= 0)
    .sort((a, b) => a - b);

const actions = {
  sourceChanged: (where) => ({ type: "sourceChanged", where }), // the source or batch box left changed
  sourcePadded: (i) => ({ type: "sourcePadded", i }),
  itemSet: (item) => ({ type: "itemSet", item }),
};

export const feature = {
  ui: {
    source: "", // cross-attention: keys and values from this text ("" = self-attention)
    sourcePadded: [], // source positions marked padding
    batch: "", // a batch: one text per line ("" = one sequence)
    item: 0, // the batch item the views show
  },
  draft: ["source", "batch"],
  link: {
    write(ui, p) {
      if (ui.source) p.set("src", ui.source);
      if (ui.source && ui.sourcePadded?.length) p.set("spad", ui.sourcePadded.join(","));
      if (ui.batch) p.set("batch", ui.batch);
      if (ui.item) p.set("item", String(ui.item));
    },
    read: (p) => ({
      source: (p.get("src") || "").slice(0, LONGEST),
      sourcePadded: positions(p.get("spad")),
      batch: (p.get("batch") || "").slice(0, LONGEST),
      item: Math.max(0, whole(p.get("item")) ?? 0),
    }),
  },
  // a source and a batch stay while the new model takes them; the item shown is the first again
  keep: (ui) => ({ source: ui.source, sourcePadded: ui.sourcePadded, batch: ui.batch }),
  actions,
  reduce: {
    sourceChanged: (s, a, { runWith }) =>
      runWith(
        s,
        { source: s.draft.source, batch: s.draft.batch },
        a.where === "source-input" ? "new source" : "new batch",
        a.where,
        { skipDiff: true },
      ),
    sourcePadded: (s, a, { runWith }) => {
      const sourcePadded = togglePadded(s.ui.sourcePadded || [], a.i);
      const on = sourcePadded.includes(a.i);
      const words = `source position ${pos(a.i)} ${on ? "marked padding" : "is a real key again"}`;
      return runWith(s, { sourcePadded }, words, "source-tokens");
    },
    // the item shown changes what the views draw from the answer held: no run
    itemSet: (s, a) => {
      if (!s.run.full || !s.run.full.config.batch) return s;
      const result = itemResult(s.run.full, a.item);
      // a query chosen on another item that is padding in this one: back to this item's last real position
      const query = result.masks.padding?.[s.ui.query] === false ? null : s.ui.query;
      return {
        ...s,
        ui: { ...s.ui, item: a.item, query },
        good: s.good ? { ...s.good, item: a.item, query } : s.good,
        run: { ...s.run, result, base: result, prev: null, diff: null },
      };
    },
  },
  // A batch replaces the text (each item's padding comes from its length); a source gives the keys and values, and
  // then only blocked cells and the source's own padding apply.
  reshape(req, ui, info, seqLen) {
    const texts = batchOf(ui, info);
    const source = sourceOf(ui, info);
    if (texts) {
      const { text: _text, ...rest } = req;
      const { padded: _padded, ...masks } = req.masks;
      return { ...rest, texts, masks };
    }
    if (!source) return req;
    const keys = splitTokens(source).length;
    const flags = paddingFlags(ui.sourcePadded || [], keys);
    const blocked = (ui.masks.blocked || []).filter(([q, k]) => q < seqLen && k < keys);
    return { ...req, source: { text: source, ...(flags ? { padding: flags } : {}) }, masks: { blocked } };
  },
  // The body as one plain sequence: a batch becomes its item `item` on its own, a cross-attention run
  // self-attention over its text (causal and a window as sent, no blocked cells: they named source keys).
  alone(body, item) {
    const { texts, source, ...out } = body;
    if (texts) out.text = texts[Math.min(item, texts.length - 1)];
    if (source || texts) {
      const { padding: _p, padded: _d, ...masks } = body.masks || {};
      out.masks = { causal: false, window: null, blocked: [], ...masks };
      if (source) out.masks.blocked = [];
    }
    return out;
  },
  // the answer's queries (the longest item, a word a token and two more), keys (the source's) and items
  extent: (body, words) => ({
    ...(body.texts ? { queries: Math.max(...body.texts.map(words)), items: body.texts.length } : {}),
    ...(body.source ? { keys: splitTokens(body.source.text || "").length } : {}),
  }),
  errors: { texts: "batch-input", source: "source-input" },
};
