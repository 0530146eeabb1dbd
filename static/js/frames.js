// The streamed arrays form (Accept: application/vnd.attnlab.arrays-stream) read as it arrives: /api/attention's
// answer a layer at a time, the layer the page shows first. Its frames are written down once, in wire/arrays.py:
// each a uint32 length F (little-endian) and F bytes of the arrays form (arrays.js) whose JSON has one key:
//
//   {head: the answer, its `layers` holding the first layer sent}, then {layer: ...} for each other layer,
//   then {tail: {config, timings_ms, ...}}, the fields only the whole pass knows; or {error: {...}} instead.
//
// `fetchFrames` downloads it in a dedicated worker (fetchworker.js: the bytes are cut into frames there, off the
// main thread, and each frame's buffer handed over whole), hands the head on as soon as it is in, and gives the
// whole answer; `readStream` does the same from a Response on the main thread, where no worker can start.

import { readArrays } from "./arrays.js";
import { STREAM_TYPE, frameSplitter } from "./fetchworker.js";

export const STREAM_MEDIA_TYPE = STREAM_TYPE;

// One frame's document as [kind, body].
export function readFrame(buffer) {
  const doc = readArrays(buffer);
  const kinds = Object.keys(doc);
  if (kinds.length !== 1 || !["head", "layer", "tail", "error"].includes(kinds[0])) {
    throw new Error(`a frame of the streamed form holds head, layer, tail or error; this one ${kinds.join(", ")}`);
  }
  return [kinds[0], doc[kinds[0]]];
}

// The whole answer from the head, the other layers and the tail: the tail's fields over the head's, every layer in
// index order, the head's own layer object kept (a view that drew it has nothing new to draw).
export function assemble(head, layers, tail) {
  const all = [...head.layers, ...layers].sort((a, b) => a.index - b.index);
  return { ...head, ...tail, layers: all };
}

// Collects a streamed answer's frames: `take(buffer)` reads one and returns the whole answer once its tail is in (else
// null), calling `onHead(head, bytes)` when the head is in (bytes: the stream's through it); an error frame throws
// toError(body).
function collector(onHead, toError) {
  let head = null;
  const layers = [];
  return (buffer) => {
    const [kind, body] = readFrame(buffer);
    if (kind === "error") throw toError(body);
    if (kind === "head") {
      head = body;
      onHead?.(head, 4 + buffer.byteLength); // and the bytes through it
    } else if (!head) {
      throw new Error(`the streamed answer sent a ${kind} before its head`);
    } else if (kind === "layer") {
      layers.push(body);
    } else {
      return assemble(head, layers, body);
    }
    return null;
  };
}

function cutShort(left) {
  return new Error(`the streamed answer ended before its tail (${left} bytes into a frame): it was cut short`);
}

// Read a streamed answer from `resp`: `onHead(head)` once the first layer is in (the answer so far: the head's
// fields and that layer), `onProgress(received, expected)` as bytes come (expected: through the end of the frame
// being read), then the whole answer. An error frame throws
// `toError(body)` (the caller's error type); a stream cut short throws.
export async function readStream(
  resp,
  { onHead = null, onProgress = null, toError = (e) => new Error(e.message) } = {},
) {
  const reader = resp.body.getReader();
  const split = frameSplitter();
  const take = collector(onHead, toError);
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    received += value.length;
    const complete = split.push(value);
    onProgress?.(received, split.expected());
    for (const buffer of complete) {
      const whole = take(buffer);
      if (whole) return whole;
    }
  }
  throw cutShort(split.left());
}

let worker = null; // the download worker, started on the first streamed request; false where none can start
let lastId = 0;
const listeners = new Map(); // request id -> what hears its messages

function downloader() {
  if (worker === null) {
    try {
      worker = new Worker(import.meta.resolve("./fetchworker.js"), { type: "module" });
      worker.onmessage = (e) => listeners.get(e.data.id)?.(e.data);
      // a worker that cannot run (its module refused, say): every request it holds goes again on the main thread
      worker.onerror = () => {
        worker = false;
        for (const hear of [...listeners.values()]) hear({ kind: "failed", name: "WorkerError", message: "" });
      };
    } catch {
      worker = false;
    }
  }
  return worker || null;
}

// started with the page, not with its first run: a worker's start would otherwise delay the run's request
if (typeof Worker !== "undefined" && typeof document !== "undefined") downloader();

// fetch(url, init) for an answer that may come streamed: {result} (the whole answer, `onHead(head)` heard first) when
// it came streamed, else {resp} (a Response, its body whole) to read as any other. The download and the cutting into
// frames run in the worker; only whole frames come to this thread. Aborting `signal` stops the download.
export function fetchFrames(
  url,
  init,
  signal,
  { onHead = null, onProgress = null, toError = (e) => new Error(e.message) } = {},
) {
  const onMain = async () => {
    const resp = await fetch(url, { ...init, signal });
    const type = (resp.headers.get("content-type") || "").split(";")[0].trim();
    return resp.ok && type === STREAM_TYPE
      ? { result: await readStream(resp, { onHead, onProgress, toError }) }
      : { resp };
  };
  const w = downloader();
  if (!w) return onMain();
  const id = ++lastId;
  return new Promise((resolve, reject) => {
    const take = collector(onHead, toError);
    let head = null; // the response's head, once in
    const done = (settle, value) => {
      listeners.delete(id);
      signal?.removeEventListener("abort", aborted);
      settle(value);
    };
    const aborted = () => {
      w.postMessage({ id, abort: true });
      done(reject, new DOMException("the request was aborted", "AbortError"));
    };
    if (signal?.aborted) return aborted();
    signal?.addEventListener("abort", aborted);
    listeners.set(id, (msg) => {
      try {
        if (msg.kind === "response") {
          head = msg;
          onProgress?.(0, msg.length);
        } else if (msg.kind === "frame") {
          const whole = take(msg.buffer);
          if (whole) done(resolve, { result: whole });
        } else if (msg.kind === "progress") {
          onProgress?.(msg.received, msg.expected);
        } else if (msg.kind === "body") {
          const headers = { "content-type": head.type };
          done(resolve, {
            resp: new Response(msg.buffer, { status: head.status, statusText: head.statusText, headers }),
          });
        } else if (msg.kind === "end") {
          done(reject, cutShort(msg.left));
        } else if (msg.name === "WorkerError" && !head) {
          listeners.delete(id);
          onMain().then(
            (v) => done(resolve, v),
            (e) => done(reject, e),
          );
        } else {
          // a network failure reads as fetch's own (TypeError), which the page words as "could not reach"
          done(reject, msg.name === "TypeError" ? new TypeError(msg.message) : new Error(msg.message));
        }
      } catch (err) {
        w.postMessage({ id, abort: true });
        done(reject, err);
      }
    });
    w.postMessage({ id, url: new URL(url, location.href).href, init });
  });
}
