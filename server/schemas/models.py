"""GET /api/models: every model a server serves, built-in or a checkpoint, with what it is, what it reads and can
do, and (checkpoints) how closely attnlab's forward pass matches transformers' own on it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.models.declare import InputField as _InputField


class Served(BaseModel):
    """An answer's part: a field the route does not declare here is an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class ModelCapabilities(Served):
    """What a model can do, as it declares it (engine/models/declare.py Capabilities)."""

    decode: bool = Field(description="decodes one position at a time with a KV cache (/api/decode); false: an encoder")
    batches: bool = Field(description="takes a batch of texts (`texts`)")
    cross_attention: bool = Field(description="keys and values may come from a `source` sequence")
    predicts_tokens: bool = Field(description="unembeds: next-token predictions (config.next_word, /api/intervene)")


InputField = _InputField  # engine/models/declare.py: one list of the input fields a model may read


class ReferenceDiff(Served):
    weights: float | None = Field(
        description="the largest |difference| between attnlab's and transformers' attention weights, over every "
        "layer's every head, on the probe"
    )
    output: float | None = Field(
        description="the same for the final output: logits for a model that predicts tokens, else the last hidden state"
    )


class ModelReference(Served):
    """A checkpoint measured at load against transformers' eager forward pass on a fixed probe, in float32."""

    library: str | None = Field(description="what it was compared with ('transformers 5.24.0'); null: not compared")
    max_abs_diff: ReferenceDiff | None = Field(None, description="the differences found; null when not compared")
    reason: str | None = Field(None, description="why it was not compared (transformers not installed, say)")


class ModelExperts(Served):
    count: int = Field(description="experts in each mixture-of-experts layer")
    top_k: int = Field(description="experts each position uses")


class LayerKindOut(Served):
    """One layer's kind of attention (engine/forward.py LayerKind)."""

    index: int
    kind: str = Field(
        description="local: the layer has its own window (Gemma's sliding layers); no_positions: no rotary in a "
        "model whose other layers rotate (SmolLM3's every fourth layer: position reaches it only through the "
        "masks); global: it sees the request's masks alone"
    )
    window: int | None = Field(description="a local layer's window: its queries see keys with |q - k| < window")
    rope_theta: float | None = Field(description="the layer's rotary base (theta); null without rotary")
    softcap: float | None = Field(description="the layer's score softcap c (scores = c tanh(scores / c)); null: none")


class ShippedSamples(Served):
    digits: int = Field(
        description="handwritten digits, named digit-0 ... digit-(digits - 1): 8x8 grey, light ink on black"
    )
    photos: list[str] = Field(description="the photographs, by name")


class ImageInput(Served):
    """What an image model reads (`image` or `sample` in a request), from its config and preprocessor_config.json."""

    channels: int = Field(description="colour channels: 1 (grey) or 3 (RGB); an image is converted to them")
    size: list[int] = Field(description="[height, width] every image is resized to before its patches are cut")
    patch_size: int = Field(description="a patch's side in pixels")
    patch_grid: list[int] = Field(description="[rows, cols] of patches: the tokens p(row,col) after [CLS]")
    samples: ShippedSamples = Field(description="the shipped images a request may name in `sample`")


class ModelEntry(Served):
    name: str
    description: str
    family: str = Field(
        description="what the model is: a checkpoint's config model_type (llama, gpt2, bert, ...), minilm's bert, "
        "or a built-in model's own name (textbook, random, custom, induction)"
    )
    n_layers: int
    n_heads: int = Field(description="query heads per layer (at the default options for a model with options)")
    n_kv_heads: int = Field(description="key/value heads per layer: fewer than n_heads when K/V are grouped")
    d_model: int = Field(description="the width of the residual stream")
    vocab_size: int | None = Field(description="tokens in its vocabulary; null: it has none (it reads x, or words)")
    max_positions: int | None = Field(description="positions it has embeddings for; null: no limit of its own")
    reference: ModelReference | None = Field(
        description="a checkpoint's match to transformers, measured at load; null for built-in models"
    )
    card: dict[str, Any] = Field(
        default_factory=dict,
        description="what the checkpoint says of itself (its attnlab.json beside config.json: held-out loss, "
        "training, ...); {} when none",
    )
    layers: int = Field(description="as n_layers (kept for clients that read it)")
    heads: int = Field(description="as n_heads")
    kv_heads: int = Field(description="as n_kv_heads")
    d_head: int
    d_v: int
    max_tokens: int | None
    tokenizer: str = Field(description="how text becomes tokens: `whitespace` for models that split it at spaces")
    default_text: str | None
    default_masks: dict[str, Any] | None
    options: dict[str, Any] = Field(description="the options the model takes, each with its default ({}: none)")
    capabilities: ModelCapabilities
    reads: list[InputField] = Field(
        description="the input fields the model reads; a request that gives another of them is a 422 naming it "
        "(`heads` and `kv_heads` go with `weights`)"
    )
    defaults: dict[str, Any] = Field(
        default_factory=dict, description="the numbers the model runs on where a request gives none (x, w_q, ...)"
    )
    breaks: dict[str, str] = Field(
        default_factory=dict,
        description="assumptions of attnlab's statistics that do not hold for this model, each with why "
        "(fixed_qk: one fixed W_Q W_K^T per head); the statistics that make them are null in its answers",
    )
    layer_kinds: list[LayerKindOut] = Field(
        default_factory=list,
        description="each layer's kind, in order: local (its own window) or global, its rotary theta and softcap "
        "(the page shows them as 'L0 local 512 · L1 global')",
    )
    vocab: list[str] | None = None
    experts: ModelExperts | None = Field(
        None,
        description="a mixture-of-experts model's experts per layer and how many each position uses (an answer "
        "with include experts says which, per layer and position); null: a dense feed-forward in every layer",
    )
    image: ImageInput | None = Field(
        None, description="a model that reads pixels: the images it takes and how it cuts them; null for the others"
    )
    sinks: bool = Field(
        False,
        description="its layers have a learned sink logit per head (gpt-oss): each head's answer then sends `sink`, "
        "the weight each query gave it, beside `weights`",
    )


class UnavailableModel(Served):
    name: str
    reason: str = Field(
        description="why it is not loaded: the command that installs a missing package, or what is wrong with a "
        "checkpoint directory (the file or config field) and what to do"
    )


class ModelsResponse(Served):
    models: list[ModelEntry]
    unavailable: list[UnavailableModel] = Field(default_factory=list)
