// Which views a draw paints at once and which after: a view in sight (its box within the viewport, or MARGIN_PX
// beyond it) draws now; one further down the page, or inside a closed <details>, draws after the browser has
// painted the views in sight, nearest the viewport first, in tasks of its own (main.js keeps that queue). A
// 512-token page holds about 10,700 elements, most of them below the fold (the large head, the retrieval diagram,
// the blockwise lesson's key table); drawn in the same task as the views in sight, they kept the first screen from
// being painted for 700-800 ms after the first layer was in.

export const MARGIN_PX = 200;

// Where `root` sits (a DOMRect-like {top, bottom, width, height}), read from the layout as last painted. A root
// laid out as `display: contents` has no box of its own: its children's union stands for it.
export function boxOf(root) {
  const r = root.getBoundingClientRect();
  if (r.width || r.height || getComputedStyle(root).display !== "contents") return r;
  const range = document.createRange();
  range.selectNodeContents(root);
  return range.getBoundingClientRect();
}

// How far below (or above) the viewport a box lies, in px; 0 when it is in sight, MARGIN_PX counted as in sight.
// null when the box has no size and is not in a closed <details>: a root that is hidden until it draws something
// (the error banner) draws at once, since only its own draw can show it.
export function distance(box, viewport, closed = false) {
  if (closed) return Infinity;
  if (!box.width && !box.height) return null;
  if (box.bottom < -MARGIN_PX) return -MARGIN_PX - box.bottom;
  if (box.top > viewport + MARGIN_PX) return box.top - viewport - MARGIN_PX;
  return 0;
}

// Whether view `v` is in sight (or has no box to place it by).
export function inSight(v) {
  const d = distance(boxOf(v.root), window.innerHeight, !!v.root.closest("details:not([open])"));
  return d === null || d === 0;
}

// The views of `due` ([view, deps] pairs) to draw now and the ones to draw after the paint, nearest first.
// `known`: the views already waiting from an earlier draw, which stay waiting without a new read of their place.
export function split(due, known = new Set()) {
  const now = [];
  const later = [];
  const viewport = window.innerHeight;
  for (const item of due) {
    const root = item[0].root;
    if (known.has(item[0])) {
      later.push([item, item[0].far ?? 0]);
      continue;
    }
    const d = distance(boxOf(root), viewport, !!root.closest("details:not([open])"));
    item[0].far = d;
    if (d === null || d === 0) now.push(item);
    else later.push([item, d]);
  }
  later.sort((a, b) => a[1] - b[1]);
  return { now, later: later.map(([item]) => item) };
}

// `fn` once the browser has painted what the current task wrote: the frame's callback runs before its paint, and a
// task queued from it after. A hidden page paints no frames, so there it runs after a plain task; a page whose
// frames are held back (a window covered by another) runs it after FRAME_WAIT_MS.
export const FRAME_WAIT_MS = 250;

export function afterPaint(fn) {
  if (document.visibilityState === "hidden") return void setTimeout(fn, 0);
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    fn();
  };
  const timer = setTimeout(once, FRAME_WAIT_MS);
  requestAnimationFrame(() => nextTask(once));
}

// `fn` in a task of its own, without the 4 ms clamp that nested timers get.
export function nextTask(fn) {
  const channel = new MessageChannel();
  channel.port1.onmessage = () => {
    channel.port1.close();
    fn();
  };
  channel.port2.postMessage(null);
}
