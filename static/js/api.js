// The JSON API the page is built on: GET /api/models, POST /api/attention, /api/heads, /api/heads/top, /api/perturb,
// /api/intervene, /api/compare, /api/decode, /api/cost and /api/scale-sweep.
// Errors come back as {"error": {status, code, field, message, details}}; `describeError` turns one into plain words.

const HINTS = {
  invalid_input: "Change the highlighted setting and the page runs again.",
  invalid_request: "One of the settings is not valid.",
  too_large: "Ask for less: a shorter sequence, fewer heads or a narrower width.",
  unknown_model: "Pick a model from the list.",
  out_of_range: "A number is outside what this model accepts.",
  busy: "The server is busy; try again in a moment.",
};

export class ApiError extends Error {
  constructor(status, code, field, message, details = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    this.details = details;
  }
}

// {message, hint} for an error body (or anything else a failed request produced).
export function describeError(err) {
  if (err instanceof ApiError) {
    let message = err.message;
    if (/no eligible key/.test(message)) {
      return {
        message,
        hint: "Every query needs at least one key it may attend to: unmask one, or set “All-masked rows” to zero.",
      };
    }
    const big = /would hold ([\d,]+) numbers, limit ([\d,]+)/.exec(message);
    if (err.code === "too_large" && big) {
      return {
        message: `This view needs ${big[1]} numbers, more than the server sends in one response (${big[2]}).`,
        hint: "Pick one layer in the Layer menu, or shorten the text.",
      };
    }
    if (!message) message = `The server answered ${err.status}.`;
    return { message, hint: HINTS[err.code] || "" };
  }
  if (err && err.name === "TypeError") {
    return { message: "Could not reach the attnlab server.", hint: "Is `attnlab serve` still running?" };
  }
  return { message: String((err && err.message) || err), hint: "" };
}

async function parse(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  if (resp.ok && body) return body;
  const e = body && body.error;
  if (e) throw new ApiError(e.status ?? resp.status, e.code, e.field, e.message, e.details || []);
  throw new ApiError(resp.status, "http_error", null, `The server answered ${resp.status} ${resp.statusText}.`);
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

// Score, KV-cache and parameter counts for a shape; with measure: true, one layer measured on this server.
export function fetchCost(request, signal) {
  return post("/api/cost", request, signal);
}

// Figure 21.5: the spread of q·k against d_k, unscaled and scaled.
export function fetchScaleSweep(request, signal) {
  return post("/api/scale-sweep", request, signal);
}

export function fetchAttention(request, signal) {
  return post("/api/attention", request, signal);
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
