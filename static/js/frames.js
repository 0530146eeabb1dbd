// The streamed arrays form (Accept: application/vnd.attnlab.arrays-stream) read as it arrives: /api/attention's
// answer a layer at a time, the layer the page shows first. Its frames are written down once, in wire/arrays.py:
// each a uint32 length F (little-endian) and F bytes of the arrays form (arrays.js) whose JSON has one key:
//
//   {head: the answer, its `layers` holding the first layer sent}, then {layer: ...} for each other layer,
//   then {tail: {config, timings_ms, ...}}, the fields only the whole pass knows; or {error: {...}} instead.
//
// `frameSplitter` cuts a byte stream into frames (pure, no DOM, no fetch: a test feeds it chunks); `readStream`
// reads a fetch Response with it, hands the head on as soon as it is read, and returns the whole answer.

import { readArrays } from "./arrays.js";

export const STREAM_MEDIA_TYPE = "application/vnd.attnlab.arrays-stream";

// push(chunk) -> the frames it completes, each an ArrayBuffer of one arrays-form document (its own buffer, so the
// typed arrays over it outlive the chunks); left() -> the bytes of a frame begun and not finished.
export function frameSplitter() {
  let size = -1; // the frame being filled: its length, once its 4 length bytes are in
  let frame = null;
  let filled = 0;
  const prefix = new Uint8Array(4);
  let prefixed = 0;
  return {
    push(chunk) {
      const out = [];
      let at = 0;
      while (at < chunk.length) {
        if (size < 0) {
          const take = Math.min(4 - prefixed, chunk.length - at);
          prefix.set(chunk.subarray(at, at + take), prefixed);
          prefixed += take;
          at += take;
          if (prefixed < 4) break;
          size = new DataView(prefix.buffer).getUint32(0, true);
          frame = new Uint8Array(size);
          filled = 0;
        }
        const take = Math.min(size - filled, chunk.length - at);
        frame.set(chunk.subarray(at, at + take), filled);
        filled += take;
        at += take;
        if (filled === size) {
          out.push(frame.buffer);
          size = -1;
          prefixed = 0;
          frame = null;
        }
      }
      return out;
    },
    left: () => (size < 0 ? prefixed : 4 + filled),
  };
}

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

// Read a streamed answer from `resp`: `onHead(head)` once the first layer is in (the answer so far: the head's
// fields and that layer), `onProgress(received, 0)` as bytes come, then the whole answer. An error frame throws
// `toError(body)` (the caller's error type); a stream cut short throws.
export async function readStream(resp, { onHead = null, onProgress = null, toError = (e) => new Error(e.message) } = {}) {
  const reader = resp.body.getReader();
  const split = frameSplitter();
  let head = null;
  const layers = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    received += value.length;
    onProgress?.(received, 0);
    for (const buffer of split.push(value)) {
      const [kind, body] = readFrame(buffer);
      if (kind === "error") throw toError(body);
      if (kind === "head") {
        head = body;
        onHead?.(head);
      } else if (!head) {
        throw new Error(`the streamed answer sent a ${kind} before its head`);
      } else if (kind === "layer") {
        layers.push(body);
      } else {
        return assemble(head, layers, body);
      }
    }
  }
  throw new Error(`the streamed answer ended before its tail (${split.left()} bytes into a frame): it was cut short`);
}
