// The JSON API the page is built on: GET /api/models, POST /api/attention, /api/heads, /api/heads/top, /api/perturb,
// /api/intervene, /api/compare, /api/decode and each declared analysis by its name (`analyse`); the training lab's
// routes through `callJson`.
// Errors come back as {"error": {status, code, field, message, details}}; `describeError` turns one into plain words.
// The page's own attention run comes in the arrays form (arrays.js: matrices as Float32Array rows, no number parsed
// from text), float16 when it is large; its errors are JSON as everywhere else.

import { MEDIA_TYPE, readArrays } from "./arrays.js";
import { STREAM_MEDIA_TYPE, fetchFrames } from "./frames.js";

// What to do about an error, by its code and field (never by its English text). The message itself is the
// server's, which names the field and the numbers.
const HINTS = {
  invalid_input: "Change the marked setting and the page runs again.",
  no_eligible_key: "Every query needs at least one key it may attend to: unmask one, or set “All-masked rows” to zero.",
  invalid_request: "Change the marked setting and the page runs again.",
  too_large: "Ask for less: a shorter sequence, fewer heads or a narrower width.",
  unknown_model: "Pick a model from the list.",
  model_unavailable: "Pick a model from the list.",
  out_of_range: "A number is outside what this model accepts.",
  busy: "The server is busy; try again in a moment.",
  network: "Is `attnlab serve` still running?",
};

// Fields whose limits a person running the server can raise, and the setting that does it, by the status the
// server answers with: 413 for too many characters (text, texts[i], tokens[i], source.text), 422 for too many
// tokens or too many texts in a batch.
const SETTINGS = {
  text: { 413: "ATTNLAB_MAX_TEXT_CHARS", 422: "ATTNLAB_MAX_TOKENS" },
  texts: { 413: "ATTNLAB_MAX_TEXT_CHARS", 422: "ATTNLAB_MAX_TOKENS or ATTNLAB_MAX_BATCH" },
  tokens: { 413: "ATTNLAB_MAX_TEXT_CHARS", 422: "ATTNLAB_MAX_TOKENS" },
  source: { 413: "ATTNLAB_MAX_TEXT_CHARS", 422: "ATTNLAB_MAX_TOKENS" },
  include: { 422: "ATTNLAB_MAX_RESULT_VALUES" },
};

// The setting that raises the limit an error hit, or null: a pure helper a test can call.
export function limitSetting(status, field) {
  const root = (field || "").split(/[.[]/)[0];
  return (SETTINGS[root] && SETTINGS[root][status]) || null;
}

export class ApiError extends Error {
  constructor(status, code, field, message, details = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    this.details = details;
  }
}

// {code, field, message, hint} for an error body (or anything else a failed request produced).
export function describeError(err) {
  if (err instanceof ApiError) {
    const message = err.message || `The server answered ${err.status}.`;
    const root = (err.field || "").split(/[.[]/)[0];
    const setting = limitSetting(err.status, err.field);
    let hint = HINTS[err.code] || "";
    if (err.code === "too_large" && root === "include" && setting) {
      hint = `Pick one layer in the Layer menu, or shorten the text. Whoever runs the server can raise the limit with ${setting}.`;
    } else if (err.code === "too_large" && setting) {
      const example = setting.split(" ")[0];
      hint =
        // the message already says to shorten the input
        `Whoever runs the server can raise this limit with the ${setting} setting ` +
        `(for example ${example}=1024 attnlab serve); a trained model's own limit cannot be raised.`;
    }
    return { code: err.code || "http_error", field: err.field || null, message, hint };
  }
  if (err && err.name === "TypeError") {
    return { code: "network", field: null, message: "Could not reach the attnlab server.", hint: HINTS.network };
  }
  return { code: "page", field: null, message: String((err && err.message) || err), hint: "" };
}

// A JSON answer, or the ApiError its error body (or its status) describes.
export async function parse(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  if (resp.ok && body) return body;
  const e = body && body.error;
  if (e) throw apiError({ ...e, status: e.status ?? resp.status });
  throw new ApiError(resp.status, "http_error", null, `The server answered ${resp.status} ${resp.statusText}.`);
}

// A JSON call of a route the page drives itself (the training lab's /api/train...): GET unless `options.method` says
// otherwise, a POST's or PATCH's body sent as JSON; the answer's JSON, null for a 204 (a run deleted), or the
// ApiError of its error body.
export async function callJson(path, options = {}) {
  const sends = options.method && options.method !== "GET"; // the API reads a POST's or PATCH's body as JSON
  const headers = { accept: "application/json", ...(sends ? { "content-type": "application/json" } : {}) };
  const resp = await fetch(path, { ...options, headers });
  return resp.status === 204 ? null : parse(resp);
}

export async function fetchModels() {
  const body = await parse(await fetch("/api/models", { headers: { accept: "application/json" } }));
  return body.models;
}

async function post(path, request, signal) {
  const resp = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify(request),
    signal,
  });
  return parse(resp);
}

// True for the 422 the server gives when a result would hold more numbers than it sends at once.
export function isTooLarge(err) {
  return err instanceof ApiError && err.code === "too_large" && err.field === "include";
}

// Head-type scores for every (layer, head): {scored_on, probe_tokens, segment_len, heads: [...]}.
export function fetchHeadTypes(request, signal) {
  return post("/api/heads", request, signal);
}

// The heads that put the most weight from one query on one key: {tokens, query, key, heads: [{layer, head, weight}]}.
export function fetchTopHeads(request, signal) {
  return post("/api/heads/top", request, signal);
}

// Change one position's input and check each mask's promise through every layer (see SPEC "Analyses").
export function fetchPerturb(request, signal) {
  return post("/api/perturb", request, signal);
}

// Ablate heads or set single weights; the model before and after.
export function fetchIntervene(request, signal) {
  return post("/api/intervene", request, signal);
}

// Two runs and, per head, B − A weights.
export function fetchCompare(request, signal) {
  return post("/api/compare", request, signal);
}

// Causal decoding one position at a time with a KV cache: every step's new query row, the cache's size, the check
// against the full pass.
export function fetchDecode(request, signal) {
  return post("/api/decode", request, signal);
}

// A declared analysis by its name (GET /api/analyses): POST /api/NAME, JSON in and out.
export function analyse(name, request, signal) {
  return post(`/api/${name}`, request, signal);
}

// Above this many matrix values a run travels as float16 (2 bytes a value, about 3 significant digits): minilm's
// six layers at 128 tokens are 2.4 M. Below it float32, so that the small worked examples stay exact to the last digit.
export const FLOAT16_ABOVE = 1_000_000;

// The precision to ask for a result of `values` matrix numbers.
export function precisionFor(values) {
  return values > FLOAT16_ABOVE ? "float16" : "float32";
}

// POST /api/attention in the arrays form: the result as its JSON has it, except that each float matrix is an Array
// of Float32Array rows and 1-D arrays are typed arrays (arrays.js). An answer that is not the arrays form (an error,
// or a server or proxy that only speaks JSON) is read as JSON. Aborting `signal` stops the download as well.
// `onProgress(received, total)` hears how far the download is (total: 0 when the server did not say), from (0, total)
// when the answer starts. `run` names the run (X-Attnlab-Run) so that fetchProgress can follow it meanwhile.
// `onHead(head)`: ask for the streamed form (frames.js; the body's first_layer first) and hear the answer's first
// layer as soon as it is in; a server that sends the arrays form whole is read as before, and onHead not called.
export async function fetchAttention(request, signal, onProgress = null, run = null, onHead = null) {
  const accept = onHead ? `${STREAM_MEDIA_TYPE}, ${MEDIA_TYPE};q=0.9` : MEDIA_TYPE;
  const headers = { "content-type": "application/json", accept };
  if (run) headers["x-attnlab-run"] = run;
  const init = { method: "POST", headers, body: JSON.stringify(request) };
  let resp;
  if (onHead) {
    // streamed, downloaded in a worker (frames.js): the page's thread gets whole frames only
    const got = await fetchFrames("/api/attention", init, signal, { onHead, onProgress, toError: apiError });
    if (got.result) return got.result;
    resp = got.resp; // a server that sent the answer whole (or an error): read below, as always
  } else {
    resp = await fetch("/api/attention", { ...init, signal });
    onProgress?.(0, Number(resp.headers.get("content-length")) || 0);
  }
  const type = (resp.headers.get("content-type") || "").split(";")[0].trim();
  if (resp.ok && type === MEDIA_TYPE) return readArrays(await readBody(resp, onProgress));
  return parse(resp);
}

// An error body's {status, code, field, message, details} as the ApiError it describes.
function apiError(e) {
  return new ApiError(e.status, e.code, e.field, e.message, e.details || []);
}

// A response's body as an ArrayBuffer, read chunk by chunk so that `onProgress(received, total)` can follow it.
// Into one buffer of the announced length when there is one (a gzipping proxy announces fewer bytes than the
// stream gives: then the chunks are joined at the end).
export async function readBody(resp, onProgress) {
  if (!onProgress || !resp.body) return resp.arrayBuffer();
  const total = Number(resp.headers.get("content-length")) || 0;
  const reader = resp.body.getReader();
  let whole = total ? new Uint8Array(total) : null;
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (whole && received + value.length <= total) {
      whole.set(value, received);
    } else {
      if (whole) chunks.push(whole.subarray(0, received));
      whole = null;
      chunks.push(value);
    }
    received += value.length;
    onProgress(received, total);
  }
  if (whole && received === total) return whole.buffer;
  if (whole) chunks.push(whole.subarray(0, received));
  const out = new Uint8Array(received);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out.buffer;
}

// Where a named run is on the server: {stage: queued | layers | writing | done | failed, done, total, ahead, elapsed_ms}.
// The run travels on another connection and can reach the server after this ask: the server waits up to `waitMs`
// for it before answering 404.
export async function fetchProgress(run, signal, waitMs = 0) {
  const url = `/api/progress/${run}${waitMs ? `?wait_ms=${waitMs}` : ""}`;
  return parse(await fetch(url, { headers: { accept: "application/json" }, signal }));
}

// A name for a run (X-Attnlab-Run): 24 random hex digits (crypto.getRandomValues works on plain http too).
export function runName() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `page-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// POST /api/attention as JSON, for the small answers that carry no matrices (the audit, the next words).
export function fetchAttentionJson(request, signal) {
  return post("/api/attention", request, signal);
}

// JSON.stringify's replacer for results that hold typed arrays (the arrays form's rows): plain arrays of numbers,
// as the JSON API would have sent them (a bare Float32Array would come out as {"0": ..., "1": ...}).
export function plainArrays(_key, value) {
  return ArrayBuffer.isView(value) && !(value instanceof DataView) ? Array.from(value) : value;
}

// The same result as a NumPy .npz archive (one array per matrix, the rest in meta.json).
export async function fetchAttentionNpz(request) {
  const resp = await fetch("/api/attention", {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/x-npz" },
    body: JSON.stringify(request),
  });
  if (!resp.ok) await parse(resp);
  return resp.blob();
}

// Before/after with every layer's weights; when that is more than the server sends, only the deltas, with a note.
export async function fetchInterveneOrDeltas(request, signal) {
  try {
    return await fetchIntervene(request, signal);
  } catch (err) {
    if (!(err instanceof ApiError && err.code === "too_large")) throw err;
    const result = await fetchIntervene({ ...request, include: [] }, signal);
    return {
      ...result,
      note: `${describeError(err).message} The before/after heatmaps are left out; the rest is complete.`,
    };
  }
}

// A compare over every layer; when that is more than the server sends, over `fallbackLayer` alone.
export async function fetchCompareOrLayer(request, signal) {
  const { fallbackLayer, ...body } = request;
  try {
    return await fetchCompare(body, signal);
  } catch (err) {
    if (!(err instanceof ApiError && err.code === "too_large") || body.a.layer != null) throw err;
    const layer = fallbackLayer ?? 0;
    return fetchCompare({ a: { ...body.a, layer }, b: { ...body.b, layer } }, signal);
  }
}
