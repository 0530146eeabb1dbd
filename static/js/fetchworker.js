// A dedicated worker that downloads a streamed answer (frames.js) off the page's main thread: it fetches, cuts the
// bytes into frames and hands each frame's buffer over whole (transferred, not copied). The page's main thread then
// reads a frame's arrays in place and draws; it never touches the tens of megabytes of chunks in between.
//
// Messages. In: {id, url, init} (a fetch to make; init without a signal), {id, abort: true}. Out, for each id:
//   {id, kind: "response", ok, status, statusText, type, length}   once the response's head is in
//   {id, kind: "frame", buffer}                                      each whole frame of a streamed answer
//   {id, kind: "body", buffer}                                       any other answer, whole (JSON, an error...)
//   {id, kind: "progress", received, expected}                       bytes so far, and through the end of the frame
//                                                                    being read (its length is its first 4 bytes);
//                                                                    at most every PROGRESS_MS
//   {id, kind: "end", left} | {id, kind: "failed", name, message}    the last message (left: bytes of a cut frame)
//
// Imports nothing: a worker does not read the page's import map. `frameSplitter` is exported for the page's own
// fallback (no worker) and for tests; importing this module in a window runs nothing else.

export const STREAM_TYPE = "application/vnd.attnlab.arrays-stream";
const PROGRESS_MS = 100;

// push(chunk) -> the frames it completes, each an ArrayBuffer of one arrays-form document, a buffer of its own (so
// it can be transferred, and the typed arrays over it outlive the chunks); left() -> bytes of a frame begun, not
// finished; expected() -> bytes through the end of the frame being read, once its length is in (else those so far).
// A frame is a uint32 length F (little-endian) and F bytes (wire/arrays.py).
export function frameSplitter() {
  let size = -1; // the frame being filled: its length, once its 4 length bytes are in
  let frame = null;
  let filled = 0;
  const prefix = new Uint8Array(4);
  let prefixed = 0;
  let done = 0; // bytes of the frames completed
  return {
    expected: () => done + (size < 0 ? prefixed : 4 + size),
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
          done += 4 + size;
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

const running = new Map(); // id -> its AbortController

async function download(id, url, init, post) {
  const controller = new AbortController();
  running.set(id, controller);
  try {
    const resp = await fetch(url, { ...init, signal: controller.signal });
    const type = (resp.headers.get("content-type") || "").split(";")[0].trim();
    const length = Number(resp.headers.get("content-length")) || 0;
    post({ id, kind: "response", ok: resp.ok, status: resp.status, statusText: resp.statusText, type, length });
    if (!resp.ok || type !== STREAM_TYPE || !resp.body) {
      const buffer = await resp.arrayBuffer();
      post({ id, kind: "body", buffer }, [buffer]);
      post({ id, kind: "end", left: 0 });
      return;
    }
    const reader = resp.body.getReader();
    const split = frameSplitter();
    let received = 0;
    let told = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      received += value.length;
      for (const buffer of split.push(value)) post({ id, kind: "frame", buffer }, [buffer]);
      const now = performance.now();
      if (now - told >= PROGRESS_MS) {
        told = now;
        post({ id, kind: "progress", received, expected: split.expected() });
      }
    }
    post({ id, kind: "end", left: split.left() });
  } catch (err) {
    post({ id, kind: "failed", name: err?.name || "Error", message: String(err?.message || err) });
  } finally {
    running.delete(id);
  }
}

// In a worker only: a window that imports this module for frameSplitter starts nothing.
if (typeof WorkerGlobalScope !== "undefined" && globalThis instanceof WorkerGlobalScope) {
  globalThis.onmessage = (e) => {
    const { id, url, init, abort } = e.data;
    if (abort) running.get(id)?.abort();
    else download(id, url, init, (msg, transfer = []) => globalThis.postMessage(msg, transfer));
  };
}
