// What the page's helper tests share: the page's modules by file name, and answers read as plain data.
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

// The page's modules: a copy of static/js/ beside a package.json saying "type": "module" (tests/pagejs.py makes it),
// or static/js/ itself where node tells a .js file's module syntax unasked (node 20.19 and later do).
const ROOT = process.env.ATTNLAB_PAGE_JS
  ? pathToFileURL(process.env.ATTNLAB_PAGE_JS + "/")
  : new URL("../../static/js/", import.meta.url);

/** One of the page's ES modules (static/js/<name>), imported as the page imports it. */
export const mod = (name) => import(new URL(name, ROOT));

/** A value as plain data: undefined read as null (keys kept), arrays and objects copied, numbers as they are. */
export function plain(x) {
  if (x === undefined) return null;
  if (Array.isArray(x)) return x.map(plain);
  if (x && typeof x === "object") return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, plain(v)]));
  return x;
}

/** `actual`, as plain data, deeply equal to `expected`. */
export function eq(actual, expected, message) {
  assert.deepStrictEqual(plain(actual), expected, message);
}

/** null or undefined. */
export function none(x, message) {
  assert.ok(x === null || x === undefined, message ?? `expected nothing, got ${JSON.stringify(x)}`);
}
