// The arrays form (Accept: application/vnd.attnlab.arrays) read into the result as its JSON has it, with no number
// parsed from text. The layout is written down once, in wire/arrays.py beside its writer and NumPy reader:
//
//   "ATNA", a uint32 header length H (little-endian), H bytes of JSON in which each array is
//   {"$array": {dtype, shape, offset}}, then the arrays from the next multiple of 8, each at a multiple of 8;
//   a list of items sharing a matrix (a layer's heads) is {"$items" | "$columns", "$stacked": {key: spec}}.
//
// What comes back: a float matrix is an Array of Float32Array rows (float64: Float64Array), views over one block,
// so m[q][k], m.length and m[q].length read as they do on JSON's nested arrays (row.map gives a typed array back:
// use Array.from(row) where a row must hold something other than numbers); a 1-D array is one typed array; a
// bool grid (eligible, reasons) is nested Arrays of true/false, as in JSON. float16 widens to float32 when first
// read: each item of a stack (a head's scores, say) is widened on the first access to it, and reads back the same
// rows every time after, so a 512-token answer's unshown heads and layers cost nothing until a view reads them.
// A view that needs no float (a thumbnail's colours, a block's largest weight) reads the float16 bit patterns
// themselves with halfRows(item, key), and widens nothing.

export const MEDIA_TYPE = "application/vnd.attnlab.arrays";
const MAGIC = "ATNA";

let halfTable = null;

// float16 bit pattern -> its value, for all 65536 patterns (256 kB, built once).
function halfToFloat() {
  if (halfTable) return halfTable;
  halfTable = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    let v;
    if (exp === 0) v = frac * 2 ** -24;
    else if (exp === 31) v = frac ? NaN : Infinity;
    else v = (1 + frac / 1024) * 2 ** (exp - 15);
    halfTable[h] = sign * v;
  }
  return halfTable;
}

// The value of every float16 bit pattern: halfValues()[bits] (a Float32Array of 65536, shared: do not write to it).
export function halfValues() {
  return halfToFloat();
}

// float16 values (as their bit patterns) widened into a new Float32Array.
export function widenHalf(bits) {
  const table = halfToFloat();
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
  return out;
}

const TYPED = {
  float32: Float32Array,
  float64: Float64Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
};

function count(shape) {
  return shape.reduce((a, b) => a * b, 1);
}

// A flat typed array as nested rows: 1-D stays flat; otherwise Arrays down to typed-array rows (subarray views).
function nest(flat, shape) {
  if (shape.length <= 1) return flat;
  const inner = count(shape.slice(1));
  const out = new Array(shape[0]);
  for (let i = 0; i < shape[0]; i++) out[i] = nest(flat.subarray(i * inner, (i + 1) * inner), shape.slice(1));
  return out;
}

function nestBool(flat, shape) {
  if (shape.length === 0) return !!flat[0];
  if (shape.length === 1) return Array.from(flat, (x) => x !== 0);
  const inner = count(shape.slice(1));
  return Array.from({ length: shape[0] }, (_, i) =>
    nestBool(flat.subarray(i * inner, (i + 1) * inner), shape.slice(1)),
  );
}

const halves = new WeakMap(); // item -> {key: () => its float16 bit rows}: what halfRows reads

// An item's float16 matrix as its bit patterns (an Array of Uint16Array rows, views over the answer: no copy, no
// widening), or null when the item's `key` did not come as float16 in a stack. For a view that only compares
// values or looks their colours up: for values that are not negative, the patterns' order is the values' order.
export function halfRows(item, key) {
  const raw = item && typeof item === "object" ? halves.get(item)?.[key] : null;
  return raw ? raw() : null;
}

export function readArrays(buffer) {
  const bytes = new Uint8Array(buffer);
  if (bytes.length < 8) throw new Error(`the arrays form is at least 8 bytes; got ${bytes.length}`);
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (magic !== MAGIC) throw new Error(`not the attnlab arrays form: it starts with ${JSON.stringify(magic)}`);
  const length = new DataView(buffer, bytes.byteOffset).getUint32(4, true);
  if (8 + length > bytes.length)
    throw new Error(`the header claims ${length} bytes but only ${bytes.length - 8} follow`);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const start = bytes.byteOffset + Math.ceil((8 + length) / 8) * 8;

  // the flat values of one array, as a typed array (bool: Uint8Array of 0/1)
  function flat(spec) {
    const n = count(spec.shape);
    const at = start + spec.offset;
    if (spec.dtype === "float16") return widenHalf(new Uint16Array(buffer, at, n));
    if (spec.dtype === "bool") return new Uint8Array(buffer, at, n);
    const Typed = TYPED[spec.dtype];
    if (!Typed) throw new Error(`the arrays form holds dtype ${spec.dtype}, which this reader does not know`);
    return new Typed(buffer, at, n);
  }

  function array(spec) {
    return spec.dtype === "bool" ? nestBool(flat(spec), spec.shape) : nest(flat(spec), spec.shape);
  }

  function build(node) {
    if (Array.isArray(node)) return node.map(build);
    if (node === null || typeof node !== "object") return node;
    const keys = Object.keys(node);
    if (keys.length === 1 && keys[0] === "$array" && node.$array && typeof node.$array === "object") {
      return array(node.$array);
    }
    if (node.$stacked && (node.$items || node.$columns)) {
      let items;
      if (node.$columns) {
        const n = Object.values(node.$stacked)[0].shape[0];
        items = Array.from({ length: n }, (_, i) =>
          Object.fromEntries(Object.entries(node.$columns).map(([k, values]) => [k, values[i]])),
        );
      } else {
        items = build(node.$items);
      }
      for (const [key, spec] of Object.entries(node.$stacked)) {
        if (spec.dtype === "float16") {
          // each item widened when first read (a head the views never show is never widened), once: its getter
          // gives back the same rows every time; halfRows gives its bit patterns, widening nothing
          const all = new Uint16Array(buffer, start + spec.offset, count(spec.shape));
          const shape = spec.shape.slice(1);
          const inner = count(shape);
          items.forEach((item, i) => {
            const bits = all.subarray(i * inner, (i + 1) * inner);
            let rows = null;
            let raw = null;
            Object.defineProperty(item, key, {
              get: () => (rows ??= nest(widenHalf(bits), shape)),
              enumerable: true,
              configurable: true,
            });
            if (!halves.has(item)) halves.set(item, {});
            halves.get(item)[key] = () => (raw ??= nest(bits, shape));
          });
          continue;
        }
        const whole = array(spec);
        items.forEach((item, i) => {
          item[key] = whole[i];
        });
      }
      return items;
    }
    const out = {};
    for (const k of keys) out[k] = build(node[k]);
    return out;
  }

  return build(header);
}
