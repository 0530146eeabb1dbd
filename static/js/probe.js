// The head-type probe a person chooses: its segment lengths and seed (POST /api/heads `probe`). Each length is a
// probe of L random vocabulary words repeated; a head's induction is its lowest score over the lengths, so a head
// that attends a fixed distance back (high on one length only) is not taken for an induction head. The helpers on
// top are pure; the two fields of the head-types panel are drawn and bound at the bottom.

import { act } from "./actions.js";
import { parseLengths } from "./headfilters.js";

// The `probe` field of the /api/heads body, or {} to leave the server's default (lengths [] and seed 0).
export function probeRequest(ui) {
  const lengths = ui.hlens || [];
  const seed = ui.hseed || 0;
  if (!lengths.length && !seed) return {};
  return { probe: { ...(lengths.length ? { segment_lengths: lengths } : {}), seed } };
}

// A head's score on each probe length, for a cell's tooltip: "by segment length: 17 0.915 · 24 0.933 · 31 0.956;
// the lowest is the score". "" when the score has no lengths (measured on your text, or no probe).
export function byLengthText(byLength) {
  const entries = Object.entries(byLength || {});
  if (!entries.length) return "";
  const each = entries.map(([length, v]) => `${length} ${v == null ? "–" : v.toFixed(3)}`).join(" · ");
  return entries.length > 1 ? `by segment length: ${each}; the lowest is the score` : `segment length ${each}`;
}

// One sentence on the probes induction was measured on (`probe`: the first probe's tokens, L its length), or why
// there is no induction score.
export function probeSentence(result, probe, L) {
  if (!probe) {
    return " Induction needs a vocabulary to draw a repeated sequence from; this model has none, so it has no induction score.";
  }
  const lengths = result.probe?.segment_lengths || [L];
  if (lengths.length === 1) {
    return ` Induction is measured on a probe: ${L} random tokens from the model's vocabulary, then the same ${L} again (seed ${result.seed}).`;
  }
  return (
    ` Induction is measured on ${lengths.length} probes, one per segment length L (${lengths.join(", ")}): L random tokens ` +
    `from the model's vocabulary, then the same L again (seed ${result.seed}). A head's score is its lowest over the ` +
    "lengths (each length's is in the cell's tooltip): a head that only looks a fixed distance back scores high on one length alone."
  );
}

// ---- the panel's two fields (Probe lengths, seed) ------------------------------------------------------------------

export function renderProbeFields(lengthsField, seedField, ui) {
  if (document.activeElement !== lengthsField) {
    lengthsField.value = ui.hlens.join(", ");
    lengthsField.removeAttribute("aria-invalid");
  }
  if (document.activeElement !== seedField) seedField.value = String(ui.hseed);
}

// The probe is asked for when a field is left or Enter pressed, not on every key; a value the server would refuse
// marks its field instead.
export function bindProbeFields(lengthsField, seedField, dispatch) {
  lengthsField.addEventListener("change", (e) => {
    const lengths = parseLengths(e.target.value);
    e.target.toggleAttribute("aria-invalid", lengths === null);
    if (lengths !== null) dispatch(act.headFilterSet({ hlens: lengths }));
  });
  seedField.addEventListener("change", (e) => {
    const seed = Number(e.target.value);
    const ok = Number.isInteger(seed) && seed >= 0 && seed <= 2 ** 32 - 1;
    e.target.toggleAttribute("aria-invalid", !ok);
    if (ok) dispatch(act.headFilterSet({ hseed: seed }));
  });
}
