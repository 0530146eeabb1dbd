// The two element builders every view uses (text goes in as text only, never as HTML), and the widths read
// before a draw writes anything.

const SVG = "http://www.w3.org/2000/svg";

// An HTML element with properties set and optional text.
export function node(tag, props = {}, text) {
  const n = Object.assign(document.createElement(tag), props);
  if (text !== undefined) n.textContent = text;
  return n;
}

// An SVG element with attributes set and optional text.
export function el(name, attrs = {}, text) {
  const n = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

const widths = new WeakMap(); // element -> its width, read by noteWidth before this draw wrote anything

// Read `el`'s width now, while the page's layout is still the one last painted (main.js calls each view's
// `measure` before any view draws): a read after the draws have written would lay the whole page out again.
export function noteWidth(el) {
  if (el) widths.set(el, el.clientWidth);
}

// The width noted for `el` in this draw (once), else read now; `fallback` when it has none (not laid out).
export function widthOf(el, fallback) {
  const noted = widths.get(el);
  widths.delete(el);
  return (noted ?? el.clientWidth) || fallback;
}

// A view's parts, looked up inside its own root: `within(root)("retrieval")` is the element with that id in `root`
// (null when it holds none), so a view draws into the element it is given, wherever that is, and never into another
// copy of its markup elsewhere in the document.
export function within(root) {
  return (id) => root.querySelector(`#${id}`);
}

// An element an action changed, scrolled just into the viewport when it lies wholly outside it (above or below).
export function bringIntoView(element) {
  const r = element.getBoundingClientRect();
  if (r.bottom <= 0 || r.top >= window.innerHeight) element.scrollIntoView({ block: "nearest" });
}
