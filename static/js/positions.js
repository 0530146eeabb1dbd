// Positions as the page prints them: from 0, the API's count (the default), or from 1, as the chapter counts
// (Display · "Count positions from 1", ui.from1, `from1=1` in the link). The API, the state and the link stay
// 0-based; only what a person reads, and what a person types as a position, is in the count shown. main.js sets the
// count before each draw and redraws every view when it changes, so every module prints through `pos`.

let base = 0;

// Set the count from the state's `from1`; true when it changed (every view is then redrawn).
export function countFrom1(on) {
  const next = on ? 1 : 0;
  const changed = next !== base;
  base = next;
  return changed;
}

// The count in force: 0 or 1.
export function firstPosition() {
  return base;
}

// A 0-based position as printed.
export function pos(i) {
  return i == null ? i : Number(i) + base;
}

// A position as a person typed it, in the count shown, as the API's 0-based index.
export function typedPos(n) {
  return n - base;
}

// Several positions as printed, with commas: "1, 4".
export function posList(list) {
  return Array.from(list, (i) => pos(i)).join(", ");
}
