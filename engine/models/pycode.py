"""`pycode`: a small LLaMA-family code model attnlab trains and ships (engine/train_pycode.py).

Its checkpoint, engine/checkpoints/pycode/, is an ordinary Hugging Face directory (config.json, model.safetensors,
tokenizer.json) with its card, attnlab.json (held-out loss, what it was trained on, the heads measured); it is
served like any user's checkpoint, through load_checkpoint, every layer computed by attnlab's engine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.models.checkpoint import load_checkpoint
from engine.models.checkpoint_model import CheckpointModel
from engine.models.declare import ModelSource

DIRECTORY = Path(__file__).resolve().parent.parent / "checkpoints" / "pycode"
# the default text: brackets nested and side by side, and a repeat (engine/train_pycode_eval.py measures heads on it)
DEFAULT_TEXT = """def scale(values, factor):
    return [v * factor for v in values]


def shift(values, offset):
    return [v + offset for v in values]


print(scale([1, 2, 3], 2), shift([1, 2, 3], 1))
"""


HAS_KIND = 0.4  # a head "is" of a kind from this score on (the head-types panel's threshold, headtypes.js)
KINDS = (  # card key, words, what it was measured on
    ("bracket_match", "bracket-matching", "the default text"),
    ("previous_token_on_default_text", "previous-token", "the default text"),
    ("induction", "induction", "the seeded probe of segment length 24"),
)


def heads_line(card: dict) -> str:
    """What the card's head scores say, in words: "; bracket-matching head 2.1 (0.51 on the default text), ...";
    a kind whose best score is under HAS_KIND is said to be missing, with that best score."""
    found = card.get("heads", {})
    parts = []
    for key, words, on in KINDS:
        row = found.get(key)
        if not isinstance(row, dict) or row.get("head") is None:
            continue
        if row["score"] >= HAS_KIND:
            parts.append(f"{words} head {row['head']} ({row['score']:.2f} on {on})")
        else:
            parts.append(f"no {words} head (best {row['score']:.2f} on {on})")
    return "; " + ", ".join(parts) if parts else ""


def reference_from(card: dict) -> dict:
    """The card's comparison with transformers, measured when pycode was trained, as a reason (it was not
    re-measured at this load)."""
    ref = card.get("reference") or {}
    diff = ref.get("max_abs_diff") or {}
    if not ref.get("library") or not diff:
        return {"library": None, "reason": "pycode is not compared with transformers at load"}
    return {
        "library": None,
        "reason": (
            f"measured when trained, not at each load: against {ref['library']} the weights differ by at most "
            f"{diff.get('weights', float('nan')):.1e} and the output by {diff.get('output', float('nan')):.1e} "
            "(tests/test_pycode.py measures it again)"
        ),
    }


class PycodeModel(CheckpointModel):
    """The built-in code model: a checkpoint like any other, loaded from the directory attnlab ships."""

    name = "pycode"

    @classmethod
    def build(cls, source: ModelSource | None = None) -> CheckpointModel:
        if source is not None:
            raise ValueError(f"pycode reads its own checkpoint ({DIRECTORY}); serve another as NAME=DIR")
        # compared with transformers when trained and by tests/test_pycode.py, not at every start (about 7 s)
        model = load_checkpoint("pycode", DIRECTORY, model_class=cls, reference=False)
        assert isinstance(model, cls), "pycode's checkpoint is a text model"
        card = model.card
        model.reference = reference_from(card)
        loss = card.get("held_out_loss")
        description = (
            f"pycode: a {model.info.n_layers}-layer LLaMA-family code model (rotary positions, RMSNorm, SwiGLU, "
            f"{model.info.n_heads} heads over {model.info.n_kv_heads} K/V groups, width {model.info.d_model}) "
            "trained by attnlab on the Python standard library"
            + (f" and {len(card['extra_code'])} packages' Python" if card.get("extra_code") else "")
            + (f", held-out loss {loss:.2f} nats per token" if isinstance(loss, int | float) else "")
            + heads_line(card)
            + "."
        )
        model.info = replace(model.info, description=description, default_text=DEFAULT_TEXT)
        return model
