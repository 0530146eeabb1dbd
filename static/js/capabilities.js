// What a model reads and can do, as GET /api/models declares it for each entry: `capabilities` {decode, batches,
// cross_attention, predicts_tokens}, `reads` (the input fields it reads), `options` ({name: default}, the options it
// takes) and `tokenizer`. The page asks these of the model's entry and keeps no list of model names. Pure.

// `info`: a /api/models entry (or null); `capability`: one of the capabilities' names.
export function can(info, capability) {
  return !!info?.capabilities?.[capability];
}

export function reads(info, field) {
  return !!info?.reads?.includes(field);
}

// The names of the models that have `capability`, for a message ("A batch runs on minilm, random.").
export function namesThat(models, capability) {
  return models.filter((m) => can(m, capability) && offered(m)).map((m) => m.name);
}

// The options the model takes, {name: default}; {} when it reads none.
export function optionsOf(info) {
  return reads(info, "options") ? { ...(info.options || {}) } : {};
}

// Whether the page can count a text's positions itself: a model that splits text at whitespace (or reads the words
// as labels for its rows, one a position) gives one position a word.
export function splitsAtWhitespace(info) {
  return /^(whitespace|labels)\b/.test(String(info?.tokenizer || ""));
}

// Whether the model runs from a text, with numbers of its own: offered in the model menu and the examples. A model
// with no example text needs its numbers typed in (x and weights), which the page offers through the editors of a
// model that reads them and has its own (`editsNumbers`).
export function offered(info) {
  return !!info?.default_text;
}

// The numbers a model that reads x and weights runs on where a request gives none (its entry's `defaults`), as
// {x, w_q, w_k, w_v} for the page's number editors; null for a model without them.
export function numbersOf(info) {
  const n = info?.defaults;
  if (!reads(info, "x") || !reads(info, "weights") || !n) return null;
  return n.x && n.w_q && n.w_k && n.w_v ? { x: n.x, w_q: n.w_q, w_k: n.w_k, w_v: n.w_v } : null;
}
