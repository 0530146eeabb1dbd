// The examples menu: a model, a text and what to look at first. Pure: the page turns one into state.
// An example may build its text from the model's vocabulary (`repeat`), and may name a query/key pair by its
// words (`pair`), resolved against the model's own tokens once they come back. `answer` (a selector; DEFAULT_ANSWER
// without one) is the panel that holds what the example asks: the page opens scrolled to it (reveal.js).

import { offered } from "./capabilities.js";

export const DEFAULT_ANSWER = '[data-view="heads"]'; // every head's map
export const HEAD_TYPES = "#headtypes-panel";

export const EXAMPLES = [
  { model: "textbook", text: null, label: "Textbook: the chapter's worked example (causal, x5 padding)" },
  { model: "random", text: "the cat sat on the mat", label: "Random: the cat sat on the mat" },
  { model: "random", text: "the dog saw the dog", label: "Random: a repeated token gets the same vector" },
  { model: "random", text: "A B C D A B C D", label: "Random: A B C D A B C D (toggle positions)" },
  {
    model: "random",
    text: "attention lets every token look back at the tokens before it and mix their values",
    options: { heads: 8 },
    label: "Random: a longer sentence, 8 heads",
  },
  {
    model: "minilm",
    text: "The animal didn't cross the street because it was too tired",
    pair: { query: "it", key: "animal" },
    // the control for the claim: with "wide", "it" is the street; a head that resolves "it" moves off "animal"
    contrast: "The animal didn't cross the street because it was too wide",
    answer: "#tophead-panel", // the heads ranked by it -> animal, the strongest opened large
    label: "MiniLM: which heads make “it” look at “animal”?",
  },
  {
    model: "induction",
    repeat: { words: 12, seed: 7 },
    sort: "induction",
    // word 8's second copy (position 20) -> the word after its first copy (position 9): one induction step
    pair: { at: [20, 9] },
    answer: HEAD_TYPES,
    label: "Induction: 12 random words, twice — find the induction head",
  },
  {
    model: "pycode",
    text:
      "def scale(values, factor):\n    return [v * factor for v in values]\n\n\n" +
      "print(scale([1, 2, 3], 2), len([4, 5]))\n",
    sort: "bracket_match",
    // the ")" of "scale(values, factor):" -> its "("
    pair: { query: "):", key: "(" },
    answer: HEAD_TYPES,
    label: "Pycode: which head matches brackets?",
  },
  {
    model: "pycode",
    text:
      "for i in range(len(items)):\n    total += items[i] * weights[i]\n" +
      "for i in range(len(items)):\n    total += items[i] * weights[i]\n",
    sort: "induction",
    answer: HEAD_TYPES,
    label: "Pycode: induction on repeated code",
  },
];

// A small seeded generator (mulberry32): the same seed gives the same words on every machine.
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// n distinct words drawn from vocab with this seed, then the same n again: the sequence an induction head completes.
export function repeatedWords(vocab, n, seed) {
  const pool = [...vocab];
  const rand = seededRandom(seed);
  const words = [];
  const want = Math.min(n, pool.length);
  while (words.length < want) {
    const i = Math.floor(rand() * pool.length);
    words.push(pool.splice(i, 1)[0]);
  }
  return [...words, ...words];
}

// The menu for the models served: EXAMPLES, then each other model's own example text.
export function examplesFor(models) {
  const listed = new Set(EXAMPLES.map((e) => e.model));
  const extra = models
    .filter((m) => !listed.has(m.name) && offered(m))
    .map((m) => ({ model: m.name, text: m.default_text, label: `${m.name}: ${m.default_text.slice(0, 50)}` }));
  return EXAMPLES.concat(extra);
}

// The example's text for this model's info: its own text, or its repeated vocabulary words.
export function exampleText(example, info) {
  if (example.repeat) {
    if (!info || !info.vocab || !info.vocab.length) return null;
    return repeatedWords(info.vocab, example.repeat.words, example.repeat.seed).join(" ");
  }
  return example.text;
}

// [query, key] positions for a pair named by words: the query word's first occurrence, and the key word's
// last occurrence before it (or anywhere, if none comes before); or given as positions `at`.
// Null when either word is not a token.
export function resolvePair(tokens, pair) {
  if (pair.at) return pair.at.every((i) => i >= 0 && i < tokens.length) ? [...pair.at] : null;
  const lower = tokens.map((t) => String(t).toLowerCase());
  const q = lower.indexOf(pair.query.toLowerCase());
  if (q < 0) return null;
  const before = lower.slice(0, q).lastIndexOf(pair.key.toLowerCase());
  const k = before >= 0 ? before : lower.indexOf(pair.key.toLowerCase());
  return k < 0 ? null : [q, k];
}
