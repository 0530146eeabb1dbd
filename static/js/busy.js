// The busy indicator (data-view="busy"): while the attention run is in flight, "Running… 3 s" near the top of the
// page; once the run has taken a moment, where the server is ("Waiting for the server (2 requests ahead of yours)…",
// "Computing layer 3 of 6…", from GET /api/progress),
// then, as the answer downloads, "Receiving 12.3 of 79.2 MB…", each over a progress bar; once the layer shown of a
// streamed answer is drawn, "Receiving the other 5 layers: 40.1 MB…"; while only analysis panels are loading, which ones ("Updating head types… 2 s"). The views stay where they
// are (dimmed a little by the CSS under body.busy, which main.js sets) rather than blanked. The element is a
// polite live region that stays in the document; the seconds are aria-hidden, so a screen reader hears what is
// running once, not every tick.

import { slotOf } from "./registry.js";

export const TICK_MS = 250; // how often the seconds are redrawn

// What each analysis panel (store.js PANELS) is called in the indicator; a registered one says (registry.js).
export const PANEL_WORDS = {
  headTypes: "head types",
  top: "top heads",
  perturb: "the claim",
  intervene: "interventions",
  compare: "the comparison",
  decode: "decoding",
  nextWords: "next words",
};

// {kind: "run" | "panels" | null, text}: what is running, from the state.
export function busyOf(s) {
  if (s.run.status === "loading") return { kind: "run", ...runText(s.run.progress) };
  if (s.run.rest) return { kind: "rest", ...restText(s.run.progress, s.run.result) };
  const names = Object.entries(s.panels || {})
    .filter(([, slot]) => slot && slot.status === "loading")
    .map(([name]) => PANEL_WORDS[name] || slotOf(name)?.words || name);
  if (names.length) return { kind: "panels", text: `Updating ${names.join(", ")}…` };
  return { kind: null, text: "" };
}

// The run's words and bar ({value, max} or null) at its stage (store.js runProgress).
export function runText(p) {
  if (p?.stage === "receiving" && p.done > 0) {
    return {
      text: `Receiving ${receivedText(p.done, p.total)}…`,
      bar: p.total ? { value: p.done, max: p.total } : null,
    };
  }
  if (p?.stage === "layers" && p.total) {
    return {
      text: `Computing layer ${Math.min(p.done + 1, p.total)} of ${p.total}…`,
      bar: { value: p.done, max: p.total },
    };
  }
  if (p?.stage === "queued") return { text: `Waiting for the server${queueText(p.ahead)}…`, bar: null }; // a compute slot
  if (p?.stage === "writing") return { text: "Writing the answer…", bar: null };
  return { text: "Running…", bar: null };
}

// While a streamed run's other layers come (the layer shown is drawn): how many, and how much has come.
// The total is an estimate (each other layer about as many bytes as the first frame): "of about".
export function restText(p, result) {
  const others = result ? result.config.n_layers - result.layers.length : 0;
  const what = `the other ${others} layer${others === 1 ? "" : "s"}`;
  if (p?.stage !== "receiving" || !(p.done > 0)) return { text: `Receiving ${what}…`, bar: null };
  const got = receivedText(p.done, p.total).replace(" of ", " of about ");
  return { text: `Receiving ${what}: ${got}…`, bar: p.total ? { value: p.done, max: p.total } : null };
}

// Where a queued run stands: " (2 requests ahead of yours)", " (yours is next)", or "" when the server does not say.
export function queueText(ahead) {
  if (ahead == null) return "";
  if (ahead === 0) return " (yours is next)";
  return ` (${ahead} ${ahead === 1 ? "request" : "requests"} ahead of yours)`;
}

// "12.3 of 79.2 MB" (or "12.3 MB" when the total was not announced); kB below a megabyte.
export function receivedText(received, total) {
  const mb = total >= 1e6 || received >= 1e6;
  const f = (n) => (mb ? (n / 1e6).toFixed(1) : (n / 1e3).toFixed(0));
  const unit = mb ? "MB" : "kB";
  return total > 0 ? `${f(received)} of ${f(total)} ${unit}` : `${f(received)} ${unit}`;
}

// "3 s" once a second has passed, "" before.
export function elapsedText(ms) {
  const s = Math.floor(ms / 1000);
  return s >= 1 ? `${s} s` : "";
}

const clocks = new WeakMap(); // root -> {kind, since, timer}

export function deps(s) {
  return [s.run.status, s.run.rest, s.run.progress, s.panels];
}

export function render(root, s) {
  const busy = busyOf(s);
  const pill = root.querySelector("[data-role=pill]");
  const label = root.querySelector("[data-role=label]");
  const seconds = root.querySelector("[data-role=seconds]");
  const clock = clocks.get(root);
  root.dataset.busy = busy.kind || "";
  if (!busy.kind) {
    if (clock) clearInterval(clock.timer);
    clocks.delete(root);
    pill.hidden = true;
    label.textContent = "";
    seconds.textContent = "";
    return;
  }
  if (label.textContent !== busy.text) label.textContent = busy.text;
  const bar = root.querySelector("[data-role=progress]");
  bar.hidden = !busy.bar;
  if (busy.bar) {
    bar.max = busy.bar.max;
    bar.value = busy.bar.value;
  }
  pill.hidden = false;
  if (clock && clock.kind === busy.kind) return; // still the same wait: the clock keeps counting
  if (clock) clearInterval(clock.timer);
  const since = performance.now();
  const tick = () => {
    seconds.textContent = elapsedText(performance.now() - since);
  };
  tick();
  clocks.set(root, { kind: busy.kind, since, timer: setInterval(tick, TICK_MS) });
}
