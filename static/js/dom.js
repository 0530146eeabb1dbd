// The two element builders every view uses: text goes in as text only (never as HTML).

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
