"""How far a checkpoint computed by attnlab's engine is from transformers' own forward pass, on one probe text.

    compare(model, directory | transformers model) ->
        {"library": "transformers 5.24.0",
         "max_abs_diff": {"weights": max over every layer, head, query and key of |attnlab - transformers|,
                          "output":  max |attnlab - transformers| of the final output}}
    or  {"library": None, "reason": "..."} where transformers cannot be imported

Transformers runs its eager attention (attn_implementation="eager", output_attentions=True) in float32 on the
CPU; the final output is the logits for a model that predicts tokens, else the last hidden state (AutoModel for
an encoder). Both read the same token ids (the checkpoint's tokenizer.json on PROBE) and the model's default
masks: causal for decoders, Mistral's sliding window, none for encoders. An image model (vit, deit, dinov2) reads
PROBE_IMAGE's pixels at its config's image size instead, through AutoModel (ViTModel, DeiTModel, Dinov2Model): its
final output is the last hidden state after the final LayerNorm.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.models.image_model import ImageCheckpointModel
from engine.models.run import RunInput

if TYPE_CHECKING:
    from engine.models.checkpoint_model import CheckpointModel

PROBE = (
    "The quick brown fox jumps over the lazy dog; then the dog sleeps.\n"
    "def add(a, b):\n    return a + b  # the sum, 2 + 2 = 4"
)


def probe_image(channels: int, size: int) -> torch.Tensor:
    """(1, C, size, size): smooth stripes plus seeded noise, about as wide as a normalised photograph's pixels."""
    y, x = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    stripes = torch.stack([torch.sin(3 * (c + 1) * x + 2 * y) for c in range(channels)])
    noise = torch.randn((channels, size, size), generator=torch.Generator().manual_seed(0))
    return (stripes + 0.5 * noise)[None]


def transformers_model(directory: Path, decoder: bool) -> Any:
    import transformers

    kind = transformers.AutoModelForCausalLM if decoder else transformers.AutoModel
    return kind.from_pretrained(str(directory), attn_implementation="eager", dtype=torch.float32)


def compare(
    model: CheckpointModel | ImageCheckpointModel, against: str | Path | Any, probe: str = PROBE
) -> dict[str, Any]:
    """The reference dict of the module docstring, for `model` against a directory or an in-process model."""
    try:
        import transformers
    except ImportError as err:
        return {"library": None, "reason": f"transformers is not importable ({err}): pip install transformers"}
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    reference = transformers_model(Path(against), model.sizes.decoder) if isinstance(against, str | Path) else against
    if hasattr(reference, "set_attn_implementation"):
        reference.set_attn_implementation("eager")
    reference = reference.to("cpu", torch.float32).eval()
    library = f"transformers {transformers.__version__}"
    if isinstance(model, ImageCheckpointModel):
        return compare_image(model, reference, library)
    ids = model.pieces.encode(probe).ids
    inp = RunInput(text=probe)
    if len(ids) > model.sizes.max_positions:  # the probe's first pieces, as many as the model has positions
        ids = ids[: model.sizes.max_positions]
        inp = RunInput(tokens=model.pieces.labels(ids))
    run = model.run(inp, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        out = reference(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    weights = max(
        float((theirs[0].double() - ours.attn.weights[0].double()).abs().max())
        for theirs, ours in zip(out.attentions, run.layers, strict=True)
    )
    if run.logits is not None and getattr(out, "logits", None) is not None:
        ours_final, theirs_final = run.logits[0], out.logits[0]
    else:
        theirs_final = out.last_hidden_state[0] if hasattr(out, "last_hidden_state") else out.hidden_states[-1][0]
        ours_final = run.layers[-1].resid_out[0]
    output = float((theirs_final.double() - ours_final.double()).abs().max())
    return {"library": library, "max_abs_diff": {"weights": weights, "output": output}}


def compare_image(model: ImageCheckpointModel, reference: Any, library: str) -> dict[str, Any]:
    """An image model against transformers on the probe image at its config's size."""
    pixels = probe_image(model.embedding.channels, model.image_size)
    run = model.run(RunInput(pixels=pixels), torch.device("cpu"), torch.float32)
    with torch.no_grad():
        out = reference(pixel_values=pixels, output_attentions=True)
    weights = max(
        float((theirs[0].double() - ours.attn.weights[0].double()).abs().max())
        for theirs, ours in zip(out.attentions, run.layers, strict=True)
    )
    output = float((out.last_hidden_state[0].double() - run.layers[-1].resid_out[0].double()).abs().max())
    return {"library": library, "max_abs_diff": {"weights": weights, "output": output}}
