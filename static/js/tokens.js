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
    const idx = document.createElement("span");
    idx.className = "idx";
    idx.textContent = String(i);
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = token;
    b.append(idx, text);
    b.addEventListener("click", () => handlers.onPad(i));
    b.addEventListener("mouseenter", () => handlers.onHover(i));
    b.addEventListener("focus", () => handlers.onHover(i));
    b.addEventListener("mouseleave", () => handlers.onHover(null));
    b.addEventListener("blur", () => handlers.onHover(null));
    root.append(b);
    if (focused === String(i)) b.focus();
  });
}
