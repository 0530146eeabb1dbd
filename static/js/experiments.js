// The three panels that test claims instead of showing a heatmap (data-view="experiments"): "Test a claim"
// (POST /api/perturb), interventions (POST /api/intervene: the ablate toggles on the head cards and the weight
// edit under the large head) and "Compare with a pinned run" (POST /api/compare). Their settings live in ui (so the
// URL carries them); what they ask is panels.js's (PANEL_SPECS); this module draws and dispatches.

import { renderPerturb } from "./claims.js";
import { renderCompare } from "./compare.js";
import { headName, renderIntervention } from "./interventions.js";
import { act } from "./actions.js";
import { itemLabels } from "./batch.js";
import {
  defaultPerturbPosition,
  modelInfo,
  multiLayer,
  perturbItem,
  perturbSide,
  pinRequestOf,
  selectView,
} from "./selectors.js";
import { positionLabel } from "./tophead.js";
import { pos } from "./positions.js";
import { within } from "./dom.js";
import { keptHidden, markGiveaways } from "./giveaway.js";

export function deps(s) {
  return [
    s.run.result,
    s.run.full,
    s.run.request,
    s.models,
    s.ui.perturb,
    s.ui.perturbOn,
    s.ui.ablate,
    s.ui.edits,
    s.ui.ablMode,
    s.ui.pin,
    s.ui.query,
    s.ui.item,
    s.panels.perturb,
    s.panels.intervene,
    s.panels.compare,
    keptHidden(s),
  ];
}

export function render(root, s, dispatch) {
  const part = within(root);
  markGiveaways(root, s, ["verdict"]); // a lesson that asks whether a claim holds keeps the verdict out of sight
  writeControls(part, s, dispatch);
  renderPerturb(part("claims-panel"), {
    result: s.panels.perturb.result,
    status: s.panels.perturb.status,
    message: s.panels.perturb.message,
  });
  const slot = s.panels.intervene;
  const status = part("intervene-status");
  status.classList.toggle("bad", slot.status === "error");
  status.textContent =
    slot.status === "error"
      ? slot.message
      : slot.status === "loading"
        ? "running the model with the interventions…"
        : s.ui.ablate.length + s.ui.edits.length
          ? ""
          : "Press “ablate” on a head card, or set one weight under the large head.";
  renderIntervention(part("intervene-body"), {
    result: slot.status === "error" ? null : slot.result,
    status: slot.status,
    multiLayer: multiLayer(s),
    note: slot.result?.note,
    vocabSize: vocabSizeOf(modelInfo(s)),
  });
  renderCompare(part("compare-body"), {
    pin: s.ui.pin,
    current: pinRequestOf(s),
    result: s.panels.compare.result,
    status: s.panels.compare.status,
    message: s.panels.compare.message,
    multiLayer: multiLayer(s),
  });
}

// The model's vocabulary size, as /api/models says it (vocab_size, else the length of its word list); null if none.
function vocabSizeOf(m) {
  if (!m) return null;
  if (Number.isInteger(m.vocab_size)) return m.vocab_size;
  return Array.isArray(m.vocab) ? m.vocab.length : null;
}

function options(sel, tokens, first) {
  const want = [...(first ? [first] : []), ...tokens.map((_, i) => positionLabel(tokens, i))];
  if ([...sel.options].map((o) => o.textContent).join("\n") === want.join("\n")) return;
  const opts = tokens.map((_, i) =>
    Object.assign(document.createElement("option"), { value: String(i), textContent: positionLabel(tokens, i) }),
  );
  if (first) opts.unshift(Object.assign(document.createElement("option"), { value: "", textContent: first }));
  sel.replaceChildren(...opts);
}

function writeControls(part, s, dispatch) {
  const m = modelInfo(s);
  const ui = s.ui;
  const tokens = s.run.result ? s.run.result.tokens : [];
  const canSwap = !!m && !String(m.tokenizer || "").startsWith("labels") && !ui.matrices;
  const kind = part("perturb-kind");
  kind.querySelector("option[value=token]").disabled = !canSwap;
  // with a source every value vector is a source position's: the query side has none to move
  const noValue = perturbSide(s) === "query";
  kind.querySelector("option[value=value]").disabled = noValue;
  const k =
    (canSwap || ui.perturb.kind !== "token") && !(noValue && ui.perturb.kind === "value")
      ? ui.perturb.kind
      : "direction";
  kind.value = k;
  part("perturb-amount").hidden = k === "token";
  part("perturb-amount").setAttribute(
    "aria-label",
    k === "shift" ? "Amount added to every feature" : "Length of the random direction",
  );
  part("perturb-token").hidden = k !== "token";
  if (document.activeElement !== part("perturb-amount")) part("perturb-amount").value = String(ui.perturb.amount);
  if (document.activeElement !== part("perturb-token")) part("perturb-token").value = ui.perturb.token;
  const vocab = part("perturb-vocab");
  const words = m && m.vocab ? m.vocab : [];
  if (vocab.options.length !== words.length)
    vocab.replaceChildren(...words.map((w) => Object.assign(document.createElement("option"), { value: w })));
  part("perturb-kind-help").textContent = canSwap
    ? ""
    : "Token swap needs a model with token embeddings (random, minilm, induction); this one takes numbers.";
  // a batch: the item whose position changes (its own tokens, padded, name the positions)
  const item = perturbItem(s);
  part("perturb-item-wrap").hidden = item == null;
  const own = item == null ? tokens : s.run.full.batch_tokens[item];
  if (item != null) {
    const labels = itemLabels(s.run.full);
    const sel = part("perturb-item");
    const want = [`the item shown (${ui.item})`, ...labels];
    if ([...sel.options].map((o) => o.textContent).join("\n") !== want.join("\n")) {
      sel.replaceChildren(
        ...want.map((t, i) =>
          Object.assign(document.createElement("option"), { value: i ? String(i - 1) : "", textContent: t }),
        ),
      );
    }
    sel.value = ui.perturb.item == null ? "" : String(item);
  }
  // a cross-attention run: which side changes, and the position menu lists that side's tokens
  const side = perturbSide(s);
  part("perturb-side-wrap").hidden = side == null;
  if (side) part("perturb-side").value = side;
  const listed = side === "source" ? s.run.result.source_tokens : own;
  if (listed.length) {
    const S = listed.length;
    const q = Math.min(side ? defaultPerturbPosition(s) : (selectView(s)?.query ?? S - 1), S - 1);
    const sel = part("perturb-position");
    options(
      sel,
      listed,
      side === "source"
        ? `source position ${positionLabel(listed, q)}`
        : `the retrieval query (${positionLabel(listed, q)})`,
    );
    sel.value = ui.perturb.position == null ? "" : String(Math.min(ui.perturb.position, S - 1));
  }
  part("perturb-off").hidden = !ui.perturbOn;
  part("abl-mode").value = ui.ablMode;
  part("iv-clear").disabled = ui.ablate.length + ui.edits.length === 0;
  const ml = multiLayer(s);
  const list = part("iv-list");
  const items = [
    ...ui.ablate.map((a) => ({
      id: `a${a.layer}.${a.head}`,
      text: `${headName(a.layer, a.head, ml)} ${a.mode}-ablated`,
      drop: act.ablationDropped(a.layer, a.head),
    })),
    ...ui.edits.map((e, i) => ({
      id: `e${i}`,
      text: `${headName(e.layer, e.head, ml)} ${pos(e.query)}→${pos(e.key)} = ${e.weight}`,
      drop: act.editDropped(i),
    })),
  ];
  list.replaceChildren(
    ...items.map((it) => {
      const b = Object.assign(document.createElement("button"), { type: "button", className: "iv-chip" });
      b.dataset.item = it.id;
      b.textContent = `${it.text} ✕`;
      b.setAttribute("aria-label", `Remove: ${it.text}`);
      b.addEventListener("click", () => dispatch(it.drop));
      return b;
    }),
  );
  if (!items.length)
    list.append(
      Object.assign(document.createElement("span"), { className: "muted small", textContent: "No intervention yet." }),
    );
  part("pin-a").disabled = !s.run.request;
  part("unpin").disabled = !ui.pin;
  part("pin-a").textContent = ui.pin ? "Pin this run as A instead" : "Pin as A";
}

// The form's perturbation; `was` the one in the state: a new side names positions of another sequence, so its
// position starts again from the default.
function perturbFromForm(part, was) {
  const amount = Number.parseFloat(part("perturb-amount").value);
  const pos = part("perturb-position").value;
  const item = part("perturb-item-wrap").hidden ? "" : part("perturb-item").value;
  const side = part("perturb-side-wrap").hidden ? null : part("perturb-side").value === "source" ? "source" : "query";
  const moved = side != null && side !== (was.side ?? "query");
  return {
    position: pos === "" || moved ? null : Number(pos),
    kind: ["token", "shift", "value"].includes(part("perturb-kind").value) ? part("perturb-kind").value : "direction",
    amount: Number.isFinite(amount) ? amount : 1,
    token: part("perturb-token").value.trim(),
    ...(item === "" ? {} : { item: Number(item) }),
    ...(side == null ? (was.side ? { side: was.side } : {}) : { side }),
  };
}

export function bind(root, store) {
  const part = within(root);
  const { dispatch } = store;
  part("perturb-form").addEventListener("submit", (e) => {
    e.preventDefault();
    dispatch(act.perturbSet(perturbFromForm(part, store.getState().ui.perturb), true)); // the button always asks again
  });
  for (const id of [
    "perturb-item",
    "perturb-side",
    "perturb-position",
    "perturb-kind",
    "perturb-amount",
    "perturb-token",
  ]) {
    part(id).addEventListener("change", () =>
      dispatch(act.perturbSet(perturbFromForm(part, store.getState().ui.perturb))),
    );
  }
  part("perturb-off").addEventListener("click", () => {
    dispatch(act.perturbSet(store.getState().ui.perturb, false));
    part("perturb-run").focus();
  });
  part("abl-mode").addEventListener("change", (e) =>
    dispatch(act.ablModeSet(e.target.value === "mean" ? "mean" : "zero")),
  );
  part("iv-clear").addEventListener("click", () => dispatch(act.interventionsCleared()));
  part("pin-a").addEventListener("click", () => dispatch(act.pinned()));
  part("unpin").addEventListener("click", () => {
    dispatch(act.unpinned());
    part("pin-a").focus();
  });
}
