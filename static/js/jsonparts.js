// The data as a JSON file written in parts, so minilm's every layer at 512 tokens fits: one string of it would be
// past what a browser holds. Numbers are written as the JSON API writes them: a float32 at its shortest, a float16
// by its bit pattern's shortest digits (nothing widened). Pure helpers (a test imports them) and `jsonBlob`.

import { halfRows, halfValues } from "./arrays.js";

// A part of the file: the text written is cut into strings of about this many characters, each made a Blob at once,
// and the file is one Blob of those parts. The whole never is one string (V8 stops at 2^29 characters: minilm at 512
// tokens with every layer's scores and weights is about 300 MB of JSON).
export const PART_CHARS = 1 << 22;

// The shortest decimal that reads back as the same float32, as the JSON API writes a float32 (0.1, not
// 0.10000000149011612). Digits that read back at p read back at p + 1, so the count is found by bisection.
export function float32Text(v) {
  if (!Number.isFinite(v)) return "null";
  if (v === 0) return "0";
  let lo = 1;
  let hi = 9;
  while (lo < hi) {
    const p = (lo + hi) >> 1;
    if (Math.fround(Number(v.toPrecision(p))) === v) hi = p;
    else lo = p + 1;
  }
  return String(Number(v.toPrecision(lo)));
}

let halfTable = null;

// Each float16 bit pattern's shortest decimal that reads back as the same float16 (at most 5 digits; NumPy prints a
// float16 so), for all 65536: a float16 answer's values are written by lookup, and nothing is widened.
export function halfTexts() {
  if (halfTable) return halfTable;
  const value = halfValues();
  halfTable = new Array(65536);
  for (let h = 0; h < 65536; h++) {
    const v = value[h];
    const mag = h & 0x7fff;
    if (!Number.isFinite(v)) halfTable[h] = "null";
    else if (mag === 0) halfTable[h] = "0";
    else {
      // a decimal reads back as this pattern when it is nearer to it than to either neighbour of the same sign
      const below = value[h - 1];
      const above = mag < 0x7bff ? value[h + 1] : 2 * v - below;
      let text = String(v);
      for (let p = 1; p <= 5; p++) {
        const d = Number(v.toPrecision(p));
        if (Math.abs(d - v) < Math.abs(d - below) && Math.abs(d - v) < Math.abs(d - above)) {
          text = String(d);
          break;
        }
      }
      halfTable[h] = text;
    }
  }
  return halfTable;
}

const isTyped = (v) => ArrayBuffer.isView(v) && !(v instanceof DataView);
const isLeaf = (v) => v === null || typeof v !== "object";
// a row written on one line: a typed array, or an Array of numbers, booleans, strings and nulls
const isRow = (v) => isTyped(v) || (Array.isArray(v) && v.every(isLeaf));

// One row as JSON text: float16 patterns by lookup, float32 at its shortest, other numbers as JSON writes them.
export function rowText(row, half = false) {
  const cells = new Array(row.length);
  if (half) {
    const t = halfTexts();
    for (let i = 0; i < row.length; i++) cells[i] = t[row[i]];
  } else if (row instanceof Float32Array) {
    for (let i = 0; i < row.length; i++) cells[i] = float32Text(row[i]);
  } else if (isTyped(row)) {
    for (let i = 0; i < row.length; i++) cells[i] = Number.isFinite(Number(row[i])) ? String(row[i]) : "null";
  } else {
    for (let i = 0; i < row.length; i++) cells[i] = JSON.stringify(row[i]) ?? "null";
  }
  return `[${cells.join(",")}]`;
}

// `data` as a JSON Blob, written part by part: objects and lists one entry a line (indented by one space a level),
// a row of numbers on one line; a matrix that came as float16 is read as its bit patterns (arrays.js halfRows), so a
// head the views never showed is not widened to be written. Between parts it lets the page breathe and calls
// onProgress(characters written so far).
export async function jsonBlob(data, onProgress = () => {}) {
  const blobs = [];
  let strings = [];
  let chars = 0;
  let written = 0;
  const flush = () => {
    if (strings.length) blobs.push(new Blob(strings));
    strings = [];
    chars = 0;
  };
  const write = async (text) => {
    strings.push(text);
    chars += text.length;
    written += text.length;
    if (chars >= PART_CHARS) {
      flush();
      onProgress(written);
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
  };
  const walk = async (v, pad, half = false) => {
    if (v && typeof v.toJSON === "function") v = v.toJSON();
    if (isLeaf(v)) return write(JSON.stringify(v) ?? "null");
    if (half ? isTyped(v) : isRow(v)) return write(rowText(v, half));
    const inner = `${pad} `;
    if (Array.isArray(v)) {
      if (!v.length) return write("[]");
      await write("[\n");
      for (let i = 0; i < v.length; i++) {
        await write(inner);
        await walk(v[i], inner, half);
        await write(i < v.length - 1 ? ",\n" : "\n");
      }
      return write(`${pad}]`);
    }
    const keys = Object.keys(v).filter((k) => v[k] !== undefined && typeof v[k] !== "function");
    if (!keys.length) return write("{}");
    await write("{\n");
    for (const [i, k] of keys.entries()) {
      const bits = halfRows(v, k); // a float16 matrix's patterns, read without widening it
      await write(`${inner}${JSON.stringify(k)}: `);
      await walk(bits ?? v[k], inner, !!bits);
      await write(i < keys.length - 1 ? ",\n" : "\n");
    }
    return write(`${pad}}`);
  };
  await walk(data, "");
  flush();
  return new Blob(blobs, { type: "application/json" });
}
