"""One forward pass for every model, with named hook points and interventions passed in as data.

A model is a stack of blocks over an input x_0 (B, S, D). Each block is one attention layer with the
optional pieces that real architectures put around it (norms: engine/norms.py; MLPs: engine/feedforward.py):

    resid_pre  = x
    h          = Norm_pre(x)                if ln_pre          (pre-LN decoders: induction, GPT-2, LLaMA)
    E          = eligible AND |q - k| < window   if the block has its own window, else eligible
    attn       = Attention(h, E)            engine.attention.attention, with this layer's interventions
    a          = Norm_post_attn(attn.output) if ln_post_attn, else attn.output   (Gemma-2/3, OLMo-2: the sublayer's
                                            output normed before it joins the residual)
    resid_mid  = x + a                      if residual, else a (a single attention layer)
    m          = Norm_attn(resid_mid)       if ln_attn, else resid_mid   (post-LN encoders: BERT, MiniLM)
    u          = Norm_pre_mlp(m)            if ln_pre_mlp, else m        (pre-LN: what the MLP reads)
    f          = Norm_post_mlp(MLP(u))      if ln_post_mlp, else MLP(u)  (Gemma-2/3, OLMo-2)
    resid_post = m + f                      if mlp, else m   (a mixture of experts also gives its routing)
    x'         = Norm_mlp(resid_post)       if ln_mlp, else resid_post   what the block passes on
    logits     = Norm_final(x) W_U + b_U    if the model unembeds (after its last layer); b_U where it has one (Phi-2)

A parallel block (GPT-NeoX's use_parallel_residual) reads x in both branches instead:

    u          = Norm_pre_mlp(x)
    resid_post = x + a + f                  = resid_mid + f

so resid_mid there is x plus the attention branch alone: the stream as it would stand had the MLP not run, a sum
the model itself never passes on.

A layer's kind: one eligibility E_0 (the request's masks: causal, padding, a window, blocked cells) comes in for
every layer, and a block with its own `window` (Gemma-2's and Gemma-3's local layers) narrows it for itself alone,
so a local layer and a global one in the same pass see E_0 AND |q - k| < window and E_0. The window is symmetric:
under a causal E_0 a query keeps itself and the window - 1 keys before it (Gemma, gpt-oss), in an encoder the
window - 1 keys on each side too (ModernBERT's local_attention / 2 on each side: window = local_attention / 2 + 1).
The window counts positions (a query decoded after a KV cache sits at the cache's length), so the cache and the
whole pass agree;
the layer's E is what its AttentionOutput.eligible holds, and what the answer reports for it. The layer's rotary
(its theta) is its own already: AttentionWeights.rotary.

Every intermediate has a name, TransformerLens's hook name with TransformerLens's meaning, without hooks
registered on modules (global state that outlives a run): `engine.hooks.cache(result)`, the table in engine/hooks.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from engine import progress, stop
from engine.attention import AllMaskedPolicy, AttentionOutput, AttentionWeights, attention
from engine.blockwise import BlockMask
from engine.errors import AllMaskedRowsError
from engine.feedforward import MLP, Routing, feed_forward
from engine.interventions import NO_INTERVENTIONS, Interventions, Patches, PatchHook, shift_input
from engine.masks import within_window
from engine.norms import Norm
from engine.softcap import softcap_
from engine.timing import timed


@dataclass(frozen=True)
class Block:
    attn: AttentionWeights
    residual: bool = True  # x + attention(x); False: the block's output is the attention output itself
    ln_pre: Norm | None = None  # before attention (pre-LN); engine/norms.py
    ln_attn: Norm | None = None  # after the attention residual (post-LN)
    mlp: MLP | None = None  # engine/feedforward.py
    ln_mlp: Norm | None = None  # after the feed-forward residual (post-LN)
    ln_pre_mlp: Norm | None = None  # before the feed-forward, off the residual (pre-LN decoders)
    parallel: bool = False  # attention and feed-forward both read x (GPT-NeoX): x' = x + Attn(.) + MLP(.)
    window: int | None = None  # this layer's own window, ANDed with the request's masks (a local layer); None: global
    ln_post_attn: Norm | None = None  # on the attention output before it joins the residual (Gemma-2/3, OLMo-2)
    ln_post_mlp: Norm | None = None  # on the feed-forward output before it joins the residual

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Block:
        def move(m: Norm | None) -> Norm | None:
            return None if m is None else m.to(device, dtype)

        return Block(
            attn=self.attn.to(device, dtype),
            residual=self.residual,
            ln_pre=move(self.ln_pre),
            ln_attn=move(self.ln_attn),
            mlp=None if self.mlp is None else self.mlp.to(device, dtype),
            ln_mlp=move(self.ln_mlp),
            ln_pre_mlp=move(self.ln_pre_mlp),
            parallel=self.parallel,
            window=self.window,
            ln_post_attn=move(self.ln_post_attn),
            ln_post_mlp=move(self.ln_post_mlp),
        )

    @property
    def kind(self) -> str:
        """'local 512' for a layer with its own window of 512, else 'global' (what /api/models says of it)."""
        return "global" if self.window is None else f"local {self.window}"


@dataclass(frozen=True)
class LayerKind:
    """What kind of attention one layer is, as /api/models says it: local (its own window) or global, its rotary
    theta, its score softcap."""

    index: int
    kind: str  # "local" (its own window), "no_positions" (no rotary among layers with it) or "global"
    window: int | None  # the local window; None for a global layer
    rope_theta: float | None  # the layer's rotary base; None without rotary
    softcap: float | None  # the layer's score softcap; None without one


def layer_kinds(net: Network) -> tuple[LayerKind, ...]:
    """Every layer's kind, in order: a layer with its own window is local; a layer without rotary in a model whose
    other layers rotate sees no position at all (SmolLM3's every fourth layer: position reaches it only through the
    mask); every other layer is global (a model without rotary anywhere reads positions from its embeddings)."""
    rotates = any(b.attn.rotary is not None for b in net.held_blocks)

    def kind(b: Block) -> str:
        if b.window is not None:
            return "local"
        return "no_positions" if rotates and b.attn.rotary is None else "global"

    return tuple(
        LayerKind(i, kind(b), b.window, None if b.attn.rotary is None else b.attn.rotary.theta, b.attn.softcap)
        for i, b in enumerate(net.held_blocks)
    )


@dataclass(frozen=True)
class Unembed:
    """logits = Norm_final(x) W_U (+ b_U where the model has a bias), then c tanh(logits / c) where the model caps
    its logits (Gemma-2's final softcap c: engine/softcap.py)."""

    ln_final: Norm
    W_U: Tensor  # (D, V)
    b_U: Tensor | None = None  # (V,) a bias on the logits (Phi-2's lm_head); None: none
    softcap: float | None = None  # final-logit softcap c; None: the logits as the product makes them

    def __call__(self, x: Tensor) -> Tensor:
        u = self.to(x.device, x.dtype)  # itself where it is in x's dtype; else a checkpoint's stored 16-bit W_U
        logits = u.ln_final(x) @ u.W_U  # (B, S, V)
        logits = logits if u.b_U is None else logits + u.b_U
        return logits if u.softcap is None else softcap_(logits, u.softcap)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Unembed:
        b_U = None if self.b_U is None else self.b_U.to(device=device, dtype=dtype)
        return Unembed(self.ln_final.to(device, dtype), self.W_U.to(device=device, dtype=dtype), b_U, self.softcap)


@dataclass(frozen=True)
class Network:
    """Everything a forward pass reads besides the input: the blocks, and the unembedding if any."""

    blocks: Sequence[Block]  # a tuple, or a checkpoint's stored blocks converted as they are read (engine/stored.py)
    unembed: Unembed | None = None

    @property
    def held_blocks(self) -> Sequence[Block]:
        """The blocks as the network holds them: a checkpoint's stored blocks where its blocks convert as they are
        read (engine/stored.py), else the blocks. For what reads a block's kind, widths and which pieces it has
        (its window, its norms) or keeps it (LayerTrace.held) rather than computing with it: nothing converted."""
        stored: Sequence[Block] | None = getattr(self.blocks, "stored", None)
        return self.blocks if stored is None else stored

    def held(self, i: int) -> Block:
        """Block i as the network holds it (held_blocks)."""
        return self.held_blocks[i]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Network:
        return Network(
            tuple(b.to(device, dtype) for b in self.blocks),
            None if self.unembed is None else self.unembed.to(device, dtype),
        )


@dataclass(frozen=True)
class KVCache:
    """Per layer, the keys and values of every position decoded so far: what step t + 1 attends over.

    K (B, G, S_past, d_head) and V (B, G, S_past, d_v) per layer; a forward given a cache appends the new
    positions' K and V and returns the longer cache in ForwardResult.kv.
    """

    layers: tuple[tuple[Tensor, Tensor] | None, ...]

    @classmethod
    def empty(cls, n_layers: int) -> KVCache:
        return cls((None,) * n_layers)

    @property
    def length(self) -> int:
        first = self.layers[0]
        return 0 if first is None else first[0].shape[2]

    @property
    def nbytes(self) -> int:
        return sum(kv[0].nbytes + kv[1].nbytes for kv in self.layers if kv is not None)


@dataclass
class LayerTrace:
    index: int
    attn: AttentionOutput
    resid_in: Tensor  # (B, S, D) what the layer read: resid_pre
    resid_mid: Tensor  # (B, S, D') x + attention output (the output alone without a residual), before any norm
    resid_out: Tensor  # (B, S, D') what the layer passed on: resid_post, after Norm_mlp where there is one
    held: AttentionWeights  # the projections this layer used, as the network holds them (Network.held): a
    # checkpoint's in its stored dtype, not a converted copy that the run (and the run cache) would keep
    mlp_out: Tensor | None = None  # (B, S, D) the feed-forward's output, where there is one
    attn_in: Tensor | None = None  # (B, S, D) Norm_pre(x), what attention read, in a pre-LN block
    mlp_in: Tensor | None = None  # (B, S, D') Norm_attn(resid_mid) in a post-LN block
    resid_post: Tensor | None = None  # (B, S, D') before Norm_mlp, in a block that has one (else resid_out)
    mlp_norm: Tensor | None = None  # (B, S, D) Norm_pre_mlp(.), what the feed-forward read, in a pre-LN block
    window: int | None = None  # the block's own window (a local layer): attn.eligible is the masks narrowed by it
    attn_post: Tensor | None = None  # (B, S, D) Norm_post_attn(attn.output), what joined the residual, where normed
    mlp_post: Tensor | None = None  # (B, S, D) Norm_post_mlp(mlp_out), what joined the residual, where normed
    routing: Routing | None = None  # the experts each position used and their weights, in a mixture of experts

    @property
    def weights(self) -> AttentionWeights:
        """The projections this layer used, in the run's device and dtype: `held` itself, or a checkpoint's stored
        16-bit projections converted (exactly) as they are read."""
        w, x = self.held, self.resid_in
        return w if (w.W_Q.dtype, w.W_Q.device) == (x.dtype, x.device) else w.to(x.device, x.dtype)


@dataclass
class ForwardResult:
    embed: Tensor  # (B, S, D) x_0 after any input intervention
    layers: list[LayerTrace]
    logits: Tensor | None = None  # (B, S, V) after the last layer, for models that unembed
    kv: KVCache | None = None  # the cache after this pass, when the pass was given one

    @property
    def final(self) -> Tensor:
        """The model's last output: logits when it predicts tokens, else the last layer's output."""
        return self.logits if self.logits is not None else self.layers[-1].resid_out


def joining(
    raw: Tensor, norm: Norm | None, hook: PatchHook, index: int, patch: Patches | None
) -> tuple[Tensor, Tensor | None]:
    """A sublayer's output (B, S, D) as it joins the residual: (raw, Norm_post(raw)) where the block has the post
    norm, else (raw, None). A patch at `hook` replaces what joins (hook_attn_out / hook_mlp_out), the normed one
    where there is one."""
    normed = norm(raw) if norm is not None else None
    if patch is None or patch.hook != hook:
        return raw, normed
    if normed is not None:
        return raw, patch.apply(hook, index, normed)
    return patch.apply(hook, index, raw), None


def block_forward(
    index: int,
    x: Tensor,
    block: Block,
    eligible: Tensor | BlockMask,
    *,
    scale: bool,
    all_masked: AllMaskedPolicy,
    interventions: Interventions,
    source: Tensor | None = None,
    past: tuple[Tensor, Tensor] | None = None,
) -> LayerTrace:
    """One block on x (B, S, D): the data flow of the module docstring. Keys and values come from `source` when
    given (cross-attention), after the cached `past` ones when given (decoding)."""
    h = block.ln_pre(x) if block.ln_pre is not None else x
    try:
        out = attention(
            h,
            block.attn,
            layer_eligible(eligible, block.window),
            scale=scale,
            all_masked=all_masked,
            interventions=interventions.for_layer(index),
            source=source,
            past=past,
        )
    except AllMaskedRowsError as err:  # a row the request's masks leave a key, but not this layer's window
        if block.window is None:
            raise
        where = f" in layer {index}, whose own window of {block.window} narrows the masks"
        raise AllMaskedRowsError(err.rows, where) from err
    patch = interventions.patch
    raw, attn_post = joining(out.output, block.ln_post_attn, "attn_out", index, patch)
    out = out if raw is out.output else replace(out, output=raw)
    a = attn_post if attn_post is not None else raw
    mid = x + a if block.residual else a
    m = block.ln_attn(mid) if block.ln_attn is not None else mid
    read = x if block.parallel else m
    u = block.ln_pre_mlp(read) if block.ln_pre_mlp is not None else read
    post, mlp_out, mlp_post, routing = m, None, None, None
    if block.mlp is not None:
        raw, routing = feed_forward(block.mlp, u)
        mlp_out, mlp_post = joining(raw, block.ln_post_mlp, "mlp_out", index, patch)
        post = m + (mlp_post if mlp_post is not None else mlp_out)
    y = block.ln_mlp(post) if block.ln_mlp is not None else post
    return LayerTrace(
        index,
        out,
        x,
        mid,
        y,
        block.attn,
        mlp_out,
        attn_in=h if block.ln_pre is not None else None,
        mlp_in=m if block.ln_attn is not None else None,
        resid_post=post if block.ln_mlp is not None else None,
        mlp_norm=u if block.ln_pre_mlp is not None else None,
        window=block.window,
        attn_post=attn_post,
        mlp_post=mlp_post,
        routing=routing,
    )


def layer_eligible(eligible: Tensor | BlockMask, window: int | None) -> Tensor | BlockMask:
    """What one layer attends under: the request's eligibility narrowed by the layer's own window, if any."""
    if window is None:
        return eligible
    if isinstance(eligible, BlockMask):
        return eligible.within(window)
    return within_window(eligible, window)


def narrowest(net: Network) -> int | None:
    """The narrowest window of any layer's own (None: every layer global): under it a row loses the most keys, so
    a batch's padding rows that some local layer leaves without a key are found by it."""
    return min((b.window for b in net.held_blocks if b.window is not None), default=None)


def forward(
    x: Tensor,
    net: Network,
    eligible: Tensor | BlockMask,
    *,
    scale: bool = True,
    all_masked: AllMaskedPolicy = "error",
    interventions: Interventions = NO_INTERVENTIONS,
    last_layer: int | None = None,
    timings: dict[str, float] | None = None,
    source: Tensor | None = None,
    cache: KVCache | None = None,
    after: ForwardResult | None = None,
) -> ForwardResult:
    """x_0 (B, S, D) through blocks 0..last_layer; logits only when every block ran and the model unembeds.

    source (B, S_k, D): every layer's keys and values come from it (cross-attention; single-layer models).
    cache: the KV cache of the positions before x (decoding); eligible then has S_past + S key columns.
    after: a pass of this same input that stopped early (its last_layer): its layers are kept as they are and the
    blocks after them run on its last resid_out, so a pass in two parts is the pass in one, to the bit.
    """
    timings = {} if timings is None else timings
    last = len(net.blocks) - 1 if last_layer is None else last_layer
    first = 0 if after is None else len(after.layers)
    x = shift_input(x, interventions.shift) if after is None else after.layers[-1].resid_out
    embed = x if after is None else after.embed
    layers: list[LayerTrace] = [] if after is None else list(after.layers)
    kv: list[tuple[Tensor, Tensor] | None] = [] if after is None else [(t.attn.k, t.attn.v) for t in after.layers]
    for i in range(first, last + 1):
        block = net.blocks[i]
        stop.check()  # whoever asked may have gone: stop between layers rather than finish the pass
        past = cache.layers[i] if cache is not None else None
        if interventions.patch is not None and interventions.patch.hook == "resid_pre":
            x = interventions.patch.apply("resid_pre", i, x)
        with timed(timings, f"layer_{i}", x.device):
            trace = block_forward(
                i,
                x,
                block,
                eligible,
                scale=scale,
                all_masked=all_masked,
                interventions=interventions,
                source=source,
                past=past,
            )
        trace.held = net.held(i).attn  # the run keeps the stored projections, not the block's converted copy
        layers.append(trace)
        kv.append((trace.attn.k, trace.attn.v))
        x = trace.resid_out
        progress.report("layers", i + 1, last + 1)
    logits = None
    if net.unembed is not None and len(layers) == len(net.blocks):
        with timed(timings, "unembed", x.device):
            logits = net.unembed(x)
    return ForwardResult(embed, layers, logits, KVCache(tuple(kv)) if cache is not None else None)
