// The audit record (`include: ["audit"]` on /api/attention): one record of everything the chapter says to check
// about an attention run — widths, heads, projection shapes, scale, softmax axis, masks, dtype, device, lengths,
// score range, entropy, masked weight, row sums, cache policy, measured memory and speed, the engine against torch's
// scaled_dot_product_attention, and a perturbation verdict per mask (a batch: per text, while the server's bound
// allows, the texts left named). The page downloads it as JSON and lists the
// headline numbers. The panel's one declaration (`panel`, read by registry.js: what it asks, how it draws) on top of
// pure helpers a test imports; `renderAudit` only draws.

import { act } from "./actions.js";
import { formatBytes } from "./decode.js";
import { node, within } from "./dom.js";
import { download } from "./exporter.js";

export const SDPA_TOLERANCE = 1e-5; // the engine agrees with torch's SDPA below this

// The POST /api/attention body for the audit record: the run as it is (bug, batch and all), with the audit only.
export function auditRequest(attention) {
  const { layer: _layer, ...rest } = attention;
  return { ...rest, include: ["audit"] };
}

export function auditFilename(model) {
  return `attnlab-audit-${String(model || "custom").replace(/[^A-Za-z0-9_.-]+/g, "_")}.json`;
}

const sci = (v) => (v === 0 ? "0" : Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5 ? v.toExponential(2) : v.toFixed(4));

// The headline lines: [{key, text, ok?, note?, flag?}]; ok true/false for a check, undefined for a fact; note: a
// line that explains the one above it; flag: a fact to look at.
export function auditLines(a) {
  const lines = [
    {
      key: "sdpa_max_diff",
      text:
        `engine vs torch scaled_dot_product_attention: max |Δ| ${sci(a.sdpa_max_diff)}` +
        (a.sdpa_max_diff < SDPA_TOLERANCE ? " — they agree" : " — they disagree"),
      ok: a.sdpa_max_diff < SDPA_TOLERANCE,
    },
    {
      key: "max_masked_weight",
      text: `largest weight on a masked key: ${sci(a.max_masked_weight)}`,
      ok: a.max_masked_weight === 0,
    },
    {
      key: "max_row_sum_error",
      text: `largest |row sum − 1|: ${sci(a.max_row_sum_error)}`,
      ok: a.max_row_sum_error < 1e-4,
    },
    {
      key: "peak_bytes",
      text: `peak memory ${formatBytes(a.peak_bytes)}, ${a.ms.toFixed(1)} ms, ${Math.round(a.tokens_per_s).toLocaleString("en-US")} tokens/s (${a.device}, ${a.dtype})`,
    },
    {
      // the cost panel's "Measure here" reports another peak for the same shape: say what each one covers
      key: "peak_scope",
      text:
        `that peak is the whole forward pass of this run: all ${a.layers} layer${a.layers === 1 ? "" : "s"} and what the ` +
        "model does around attention (embeddings, MLPs, the output, where it has them), with every intermediate the page is sent; the " +
        "cost panel's “Measure here” measures one attention layer alone, on random weights of this shape, so its peak is smaller",
      note: true,
    },
    {
      key: "shape",
      text: `d_model ${a.d_model}, ${a.heads} heads on ${a.kv_heads} K/V groups, ${headWidths(a)}, ${a.layers} layer${a.layers === 1 ? "" : "s"}; ${a.valid_tokens} of ${a.seq_len * a.batch} positions real`,
    },
    {
      key: "scale",
      text: `scale ${!a.scale.on ? "off" : a.scale.factor !== null ? `on: × ${a.scale.factor.toFixed(4)} (1/√d_k)` : `on, per head: × ${a.scale.per_head.map((f) => f.toFixed(4)).join(", ")} (1/√d_k of each)`}`,
    },
    softmaxLine(a.softmax_axis),
    repeatedLine(a.repeated_rows),
  ];
  for (const p of a.perturbation || []) {
    const item = p.item === null || p.item === undefined ? "" : `text ${p.item} `;
    lines.push({
      key: item ? `perturbation.${p.item}.${p.mask}` : `perturbation.${p.mask}`,
      text: `${item}${p.mask}: ${p.verdict}`,
      ok: p.holds,
    });
  }
  const unchecked = uncheckedLine(a);
  if (unchecked) lines.push(unchecked);
  return lines;
}

// A batch's texts left without verdicts (past the server's ATTNLAB_MAX_AUDIT_RUNS): said, so the verdicts above are
// not read as covering every text. The server's note names the texts checked, those left and how to check one.
export function uncheckedLine(a) {
  const left = a.perturbation_unchecked || [];
  if (!left.length) return null;
  const text =
    a.perturbation_note || `texts ${left.join(", ")} of ${a.batch} not checked (past ATTNLAB_MAX_AUDIT_RUNS)`;
  return { key: "perturbation_unchecked", text, flag: true };
}

function headWidths(a) {
  if (a.d_k !== null) return `d_k ${a.d_k}, d_v ${a.d_v}`;
  const heads = a.projections.per_head;
  return `d_k per head ${heads.map((h) => h.W_Q[1]).join(", ")}, d_v ${heads.map((h) => h.W_V[1]).join(", ")}`;
}

// The softmax axis measured on the run's weights beside the one the engine declares: a check.
export function softmaxLine(axis) {
  const sums = `rows off by at most ${axis.row_sum_error === null ? "—" : sci(axis.row_sum_error)}, columns by ${axis.column_sum_error === null ? "—" : sci(axis.column_sum_error)}`;
  const ok = axis.measured === axis.declared;
  const text = ok
    ? `softmax over ${axis.measured}, measured: ${sums}`
    : `softmax measured over ${axis.measured === "neither" ? "neither axis" : axis.measured}, declared over ${axis.declared}: ${sums}`;
  return { key: "softmax_axis", text, ok };
}

// Identical weight rows within a head: a flag to look at (identical tokens, one key taking all the weight, or a bug),
// not a failure.
export function repeatedLine(rows) {
  if (rows.count === 0) return { key: "repeated_rows", text: "no two queries of a head have identical weight rows" };
  const shown = rows.examples
    .slice(0, 3)
    .map(
      (e) =>
        `layer ${e.layer} head ${e.head}${e.item === null ? "" : ` text ${e.item}`}: queries ${e.queries[0]} and ${e.queries[1]}`,
    );
  const more = rows.count > shown.length ? ", …" : "";
  return {
    key: "repeated_rows",
    text: `flag: ${rows.count} repeated weight row${rows.count === 1 ? "" : "s"} in ${rows.heads} head${rows.heads === 1 ? "" : "s"} (${shown.join("; ")}${more})`,
    flag: true,
  };
}

// view: {audit, status, message, model}
export function renderAudit(el, view) {
  el.replaceChildren();
  el.classList.toggle("bad", view.status === "error");
  if (view.status === "loading") {
    el.append(node("p", { className: "muted small" }, "auditing the run (measured, and one perturbation per mask)…"));
    return;
  }
  if (view.status === "error") {
    el.append(node("p", { className: "bad" }, view.message));
    return;
  }
  const a = view.audit;
  if (!a) return;
  el.dataset.sdpaMaxDiff = String(a.sdpa_max_diff);
  el.dataset.peakBytes = String(a.peak_bytes);
  el.dataset.tokensPerS = String(a.tokens_per_s);
  el.append(
    node(
      "p",
      { className: "small" },
      `Downloaded ${auditFilename(view.model)} (${Object.keys(a).length} fields). In short:`,
    ),
  );
  const ul = node("ul", { className: "audit-lines" });
  for (const l of auditLines(a)) {
    const li = node(
      "li",
      { className: l.ok === true ? "holds" : l.ok === false ? "leak" : l.note ? "muted small" : l.flag ? "flag" : "" },
      `${l.ok === true ? "✓ " : l.ok === false ? "✗ " : ""}${l.text}`,
    );
    li.dataset.key = l.key;
    ul.append(li);
  }
  el.append(ul);
}

export const panel = {
  analysis: "attention", // POST /api/attention, as JSON, with include ["audit"]
  words: "the audit",
  // an audit describes the run it was taken of: another run clears it
  request: (s, value, slot) => {
    if (!slot.nonce || !s.run.request) return null;
    const req = auditRequest(s.run.request);
    return slot.asked === JSON.stringify(req) ? req : null;
  },
  nonce: true,
  // the request the button asks of the run on screen, as its key
  asked: (s) => ({ asked: s.run.request ? JSON.stringify(auditRequest(s.run.request)) : null }),
  after: (result) =>
    download(
      auditFilename(result.model),
      new Blob([JSON.stringify(result.audit, null, 1)], { type: "application/json" }),
    ),
  render(root, slot) {
    renderAudit(within(root)("audit-summary"), {
      audit: slot.status === "error" ? null : slot.result?.audit,
      status: slot.status,
      message: slot.message,
      model: slot.result?.model,
    });
  },
  bind(root, { dispatch, getState }) {
    within(root)("audit-export").addEventListener("click", () => {
      const s = getState();
      if (s.run.request) dispatch(act.panelAsked("audit", { fields: panel.asked(s) }));
    });
  },
};
