"""Generating tokens through the KV cache, with each new token's attention row.

After the input is decoded position by position (engine/analysis/decode.py), each new token is chosen from the
last position's logits and fed back through the same cached forward:

    p_t      = softmax(logits_t / temperature)          over the top_k largest logits when top_k is given
    token_t+1 = argmax p_t                              greedy
             ~ p_t                                     sample, drawn with a torch.Generator seeded by `seed`
    x_t+1    = the model's embedding of token_t+1 at position t + 1
    row      = the new query's weights over the t + 2 cached keys, per layer and head

Under causal masking a generated token's row is the full pass's row on the extended sequence, and greedy's token
is the argmax of that pass's logits at the position before it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from engine.errors import InputError
from engine.forward import KVCache, Network, forward
from engine.masks import eligibility
from engine.models.base import AttentionModel, Encoded, RunInput
from engine.models.declare import able

SamplingKind = Literal["greedy", "sample"]


@dataclass(frozen=True)
class Sampling:
    tokens: int  # how many tokens to generate
    sampling: SamplingKind = "greedy"
    seed: int = 0  # for "sample": the generator's seed
    temperature: float = 1.0  # > 0; divides the logits before the softmax
    top_k: int | None = None  # sample among the k most likely tokens only


@dataclass(frozen=True)
class GeneratedToken:
    position: int  # where it stands in the extended sequence
    id: int  # its index in the unembedding
    token: str  # its readable label
    p: float  # its probability under the model's distribution at the position before (temperature 1)
    special: bool  # a special token of the tokenizer (<|endoftext|>, </s>...)
    weights: list[list[list[float]]]  # per layer, per head: its query's weights over position + 1 keys


def check_generation(model: AttentionModel, spec: Sampling, prompt: int) -> None:
    """A 422 naming `generate` where the model does not predict tokens, or past the model's positions."""
    if not model.capabilities.predicts_tokens or model.info.vocab is None:
        raise InputError(
            "generate",
            f"{model.name} does not predict tokens, so it has none to generate: "
            f"generate with {able('predicts_tokens')}",
        )
    if spec.temperature <= 0:
        raise InputError("generate.temperature", f"got temperature {spec.temperature}: give a number above 0")
    if spec.top_k is not None and spec.top_k < 1:
        raise InputError("generate.top_k", f"got top_k {spec.top_k}: give at least 1, or leave it out")
    limit = model.info.max_tokens
    if limit is not None and prompt + spec.tokens > limit:
        raise InputError(
            "generate.tokens",
            f"{prompt} input tokens + {spec.tokens} generated = {prompt + spec.tokens} positions, but {model.name} "
            f"has {limit}: generate at most {max(limit - prompt, 0)}",
        )


def choose(logits: Tensor, spec: Sampling, generator: torch.Generator) -> tuple[int, float]:
    """The next token from one position's logits (V,), and the model's probability of it."""
    logits = logits.double().cpu()
    p = torch.softmax(logits, dim=-1)
    if spec.sampling == "greedy":
        chosen = int(torch.argmax(logits))
    else:
        scaled = (logits - logits.max()) / spec.temperature  # the largest at 0: no inf / inf at a tiny temperature
        if spec.top_k is not None and spec.top_k < scaled.numel():
            kth = torch.topk(scaled, spec.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        chosen = int(torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=generator))
    return chosen, float(p[chosen])


def extended(model: AttentionModel, inp: RunInput, tokens: list[str], token_id: int) -> Encoded:
    """The input with one more token at the end, encoded the way the model encodes given tokens."""
    vocab = model.info.vocab
    assert vocab is not None
    return model.encode_sequence(replace(inp, text=None, tokens=[*tokens, vocab[token_id]], texts=None))


def generate(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    net: Network,
    cache: KVCache,
    logits: Tensor,
    spec: Sampling,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[list[GeneratedToken], Encoded]:
    """`spec.tokens` new tokens after `enc`, whose K and V are in `cache` and whose last logits (V,) are `logits`.
    Returns the new tokens and the extended input (labels of the whole sequence, read together)."""
    s, total = len(enc.tokens), len(enc.tokens) + spec.tokens
    masks = model.resolve_masks(inp, s)
    if masks.padding is not None:
        masks = replace(masks, padding=(*masks.padding, *[True] * spec.tokens))
    eligible = eligibility(masks, total, device)  # (S + N, S + N)
    generator = torch.Generator().manual_seed(spec.seed)
    out: list[GeneratedToken] = []
    current = enc
    for t in range(s, total):
        token_id, p = choose(logits, spec, generator)
        current = extended(model, inp, current.tokens, token_id)
        x = current.x[-1:].to(device=device, dtype=dtype)[None]  # (1, 1, D)
        step = forward(x, net, eligible[t : t + 1, : t + 1], scale=inp.scale, all_masked=inp.all_masked, cache=cache)
        assert step.kv is not None and step.logits is not None
        cache, logits = step.kv, step.logits[0, -1]
        rows = [layer.attn.weights[0, :, 0, :].float().tolist() for layer in step.layers]  # per layer (H, t + 1)
        special = bool(current.special[t]) if current.special is not None else False
        out.append(GeneratedToken(position=t, id=token_id, token=current.tokens[t], p=p, special=special, weights=rows))
    labels = current.tokens  # a character split over generated pieces reads whole once all its pieces are there
    return [replace(g, token=labels[g.position]) for g in out], current
