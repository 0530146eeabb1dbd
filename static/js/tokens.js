// Token chips: one per position. Click (or Enter/Space) marks a token as padding and back;
// hovering one lights its row and column up in every head.

export function renderTokens(root, view, handlers) {
  const focused = root.contains(document.activeElement) ? document.activeElement.dataset.index : null;
  root.replaceChildren();
  view.tokens.forEach((token, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "token";
    b.setAttribute("data-testid", "token");
    b.dataset.index = String(i);
    const padded = view.masks.padded.includes(i);
    b.classList.toggle("padded", padded);
    b.setAttribute("aria-pressed", padded ? "true" : "false");
    b.title = padded ? `Position ${i} is padding: click to make it a real token` : `Click to mark position ${i} as padding`;
    if (view.locked) {
      // a batch item's padding comes from its length, not from a click
      b.setAttribute("aria-disabled", "true");
      b.title = padded ? `Position ${i} pads this item to the batch's longest text` : `Position ${i}`;
    }
    const idx = document.createElement("span");
    idx.className = "idx";
    idx.textContent = String(i);
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = token;
    b.append(idx, text);
    if (!view.locked) b.addEventListener("click", () => handlers.onPad(i));
    b.addEventListener("mouseenter", () => handlers.onHover(i));
    b.addEventListener("focus", () => handlers.onHover(i));
    b.addEventListener("mouseleave", () => handlers.onHover(null));
    b.addEventListener("blur", () => handlers.onHover(null));
    root.append(b);
    if (focused === String(i)) b.focus();
  });
}

// What a model that predicts tokens (induction) expects next at each position: the result's `config.next_word`
// ({token, p} per position), one chip per position under the tokens, ✓ when it is the token that does come next.
export function nextWordRows(tokens, nextWord) {
  if (!nextWord || !nextWord.length) return [];
  return nextWord.map((w, i) => {
    const next = i + 1 < tokens.length ? tokens[i + 1] : null;
    return { position: i, token: tokens[i], predicted: w.token, p: w.p, right: next != null && w.token === next };
  });
}

export function renderNextWords(root, tokens, nextWord) {
  const rows = nextWordRows(tokens, nextWord);
  root.hidden = !rows.length;
  root.replaceChildren();
  if (!rows.length) return;
  const right = rows.filter((r) => r.right).length;
  const head = document.createElement("p");
  head.className = "muted small nw-head";
  head.textContent = `The model's next-word prediction after each position (top-1, probability); ✓ = the word that comes next: ${right} of ${rows.length - 1}.`;
  const list = document.createElement("ol");
  list.className = "next-words";
  for (const r of rows) {
    const li = document.createElement("li");
    li.className = `nw${r.right ? " right" : ""}`;
    li.dataset.position = String(r.position);
    li.dataset.predicted = r.predicted;
    li.dataset.p = String(r.p);
    li.title = `after position ${r.position} “${r.token}” the model predicts “${r.predicted}” with p = ${r.p.toFixed(3)}`;
    const idx = document.createElement("span");
    idx.className = "idx";
    idx.textContent = String(r.position);
    const word = document.createElement("span");
    word.className = "word";
    word.textContent = `${r.right ? "✓ " : ""}${r.predicted}`;
    const p = document.createElement("span");
    p.className = "p";
    p.textContent = r.p.toFixed(2);
    li.append(idx, word, p);
    list.append(li);
  }
  root.append(head, list);
}
