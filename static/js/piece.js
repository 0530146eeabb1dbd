// How a token label reads on the page, in one place: every chip, axis label, tick, readout and title shows a token
// through here. A label is the piece's own text (engine/tokens.py): " the", "\n", "你" and "◌" for each byte a piece
// holds of the character the piece before began. Shown:
//   a leading or trailing space as ␣ (dim in a chip), a newline as ↵, a tab as →, another control character as its
//   control picture (U+2400 + code), a label with no text as ∅; ◌ stays;
//   each label bidi-isolated (<bdi dir="auto"> in a chip, U+2068 ... U+2069 in plain text such as plotly ticks and
//   canvas labels), so a right-to-left piece reads in its own order and never reorders its neighbours;
//   special tokens ([CLS], <s>, <|endoftext|>) with a distinct style and "special token" in the title.
// Pure helpers a test can call, and one element builder.

export const CONTINUED = "◌";
const MARKS = { " ": "␣", "\n": "↵", "\r": "↵", "\t": "→" };
const NAMES = {
  " ": ["a space", "spaces"],
  "\n": ["a newline", "newlines"],
  "\r": ["a carriage return", "carriage returns"],
  "\t": ["a tab", "tabs"],
};
const FSI = "\u2068"; // first strong isolate: the text's own direction, isolated from what is around it
const PDI = "\u2069";

function markOf(ch) {
  if (ch in MARKS) return MARKS[ch];
  const code = ch.codePointAt(0);
  if (code < 0x20) return String.fromCodePoint(0x2400 + code);
  if (code === 0x7f) return "␡";
  return null;
}

// The label as parts: {text, mark} where mark is true for a stand-in (␣ ↵ → ◌ ...). Spaces are marked at the start
// and the end only; "\r\n" is one ↵.
export function pieceParts(label) {
  const t = String(label ?? "");
  if (t === "") return [{ text: "∅", mark: true }];
  const chars = Array.from(t);
  const lead = chars.findIndex((c) => c !== " ");
  const first = lead < 0 ? chars.length : lead;
  let last = chars.length;
  while (last > first && chars[last - 1] === " ") last--;
  const parts = [];
  const push = (text, mark) => {
    const prev = parts[parts.length - 1];
    if (prev && prev.mark === mark) prev.text += text;
    else parts.push({ text, mark });
  };
  chars.forEach((c, i) => {
    if (c === "\n" && chars[i - 1] === "\r") return;
    const space = c === " " && (i < first || i >= last);
    const mark = space ? MARKS[" "] : c === " " ? null : c === CONTINUED ? c : markOf(c);
    push(mark ?? c, mark != null);
  });
  return parts;
}

// The label as plain text with its marks: "␣the", "↵", "你", "◌◌".
export function pieceText(label) {
  return pieceParts(label)
    .map((p) => p.text)
    .join("");
}

// Right-to-left letters and the controls that change direction: a label holding one is isolated in plain text.
const BIDI =
  /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc\u200f\u202a-\u202e\u2066-\u2069]|[\u{10800}-\u{10fff}\u{1e800}-\u{1efff}]/u;

// Plain text for a place that draws a string as given (plotly ticks, canvas, SVG text, titles): isolated between
// U+2068 and U+2069 where it holds right-to-left text, so it keeps its order and the text around it keeps its own.
export function isolate(text) {
  return BIDI.test(text) ? `${FSI}${text}${PDI}` : text;
}

// pieceText cut to n characters (… at the end), isolated where it needs to be: an axis label.
export function pieceLabel(label, n = Infinity) {
  const chars = Array.from(pieceText(label));
  return isolate(chars.length > n ? `${chars.slice(0, n - 1).join("")}…` : chars.join(""));
}

// What a label is, in words, for a title or an aria-label: its real text (escaped), what its marks stand for, and
// "special token" where it is one.
export function pieceTitle(label, special = false) {
  const t = String(label ?? "");
  const facts = [];
  const lead = t.length - t.replace(/^ +/, "").length;
  const named = (ch, n) => (n === 1 ? NAMES[ch][0] : `${n} ${NAMES[ch][1]}`);
  if (lead && lead < t.length) facts.push(`starts with ${named(" ", lead)}`);
  else if (lead) facts.push(named(" ", lead));
  for (const ch of ["\n", "\t", "\r"]) {
    const n = t.split(ch).length - 1;
    if (n && !(ch === "\r" && t.includes("\r\n"))) facts.push(named(ch, n));
  }
  const held = t.length - t.replace(/^◌+/, "").length;
  if (held) facts.push(`${held} more byte${held === 1 ? "" : "s"} of the character before`);
  if (t === "") facts.push("no text");
  if (special) facts.push("special token");
  return [JSON.stringify(t), ...facts].join(" · ");
}

// One token's text as an element: <bdi class="piece" dir="auto"> holding the text, its marks dim
// (span.piece-mark, aria-hidden), the real text in the title; special tokens get class piece-special.
export function renderPiece(label, { special = false, tag = "bdi" } = {}) {
  const el = document.createElement(tag);
  el.className = `piece${special ? " piece-special" : ""}`;
  el.setAttribute("dir", "auto");
  el.title = pieceTitle(label, special);
  for (const part of pieceParts(label)) {
    if (part.mark) {
      const m = document.createElement("span");
      m.className = "piece-mark";
      m.textContent = part.text;
      el.append(m);
    } else {
      el.append(document.createTextNode(part.text));
    }
  }
  return el;
}

// Which positions of an answer are special tokens: the answer's config.special where the model says so, else
// what a tokenizer's special tokens look like ([CLS] <s> <|endoftext|>).
const SPECIAL_LOOK = /^(\[[A-Z]+\]|<\/?[a-z]+>|<\|[^|]+\|>)$/;
export function specialAt(result, i) {
  const flags = result?.config?.special;
  if (Array.isArray(flags)) return !!flags[i];
  return SPECIAL_LOOK.test(String(result?.tokens?.[i] ?? ""));
}

// A label quoted inside a sentence: “␣the”, isolated so a right-to-left label keeps the sentence in order.
export function pieceQuote(label) {
  return `“${isolate(pieceText(label))}”`;
}
