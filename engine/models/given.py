"""Matrices typed in: a score matrix (S x S) or a weight matrix (S x S), optionally values (S x d_v).

The chapter's exercises start from a supplied score tensor, and its figures from two heads' weights. Neither has
an X or projections, so this model makes the ordinary forward pass compute exactly what was typed:

    x_0 = I_S                                   (S, S): position i is the i-th unit vector
    scores:  W_Q = scores, W_K = I_S            Q K^T = scores I = scores, times 1 (the scale does not apply)
    pattern: W_Q = W_K = 0, and the layer's      the scores are 0; the softmax's weights are replaced by the
             `pattern` = the typed weights       pattern, as typed (engine/attention.py)
    W_V = values (or I_S without them)           V = values, contexts = weights @ values

so the masks, the softmax, the statistics and every view are the ones any model gets. A pattern is checked
against the masks in force: a cell a mask excludes must hold 0 (it is refused, not zeroed, so a row is never
changed behind the learner's back), and every row that has an eligible key must sum to 1 within ROW_SUM_TOLERANCE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import ClassVar

import torch
from torch import Tensor

from engine.attention import AttentionWeights
from engine.errors import InputError
from engine.forward import ForwardResult, Network
from engine.interventions import NO_INTERVENTIONS, Interventions
from engine.masks import MaskSpec, reason_grids
from engine.models.base import AttentionModel, Encoded, ModelInfo, ModelRun, RunConfig, RunInput, one_layer, row_labels
from engine.models.declare import Capabilities
from engine.stats import FIXED_QK

ROW_SUM_TOLERANCE = 1e-3  # a typed row of weights may sum to 1 +- this (three decimals, as a learner types them)
SCORES_SAY = (
    "a score matrix typed in, used as given (no X, W_Q or W_K, so `scale` does not apply: scale_factor 1), "
    "the masks applied to it, then the softmax; contexts = weights x values"
)
# what the model runs on where a request types nothing in: a small score matrix to start from
EXAMPLE_SCORES = [[2.0, 0.5, -1.0, 0.0], [1.0, 3.0, 0.0, -2.0], [0.0, 1.0, 2.0, 1.0], [-1.0, 0.5, 1.5, 2.5]]
PATTERN_SAY = "a weight matrix typed in, used as given (no scores: the scores are 0); contexts = weights x values"


class GivenModel(AttentionModel):
    name = "given"
    reads = frozenset({"text", "tokens", "scores", "pattern", "values"})  # text and tokens label the rows
    capabilities = Capabilities(decode=False, batches=False, cross_attention=False)
    breaks: ClassVar[Mapping[str, str]] = {FIXED_QK.name: "the scores are typed in, not made by a W_Q W_K^T"}
    needs_input = False  # the matrices are the input
    architecture = SCORES_SAY
    info = ModelInfo(
        name=name,
        description=(
            "Your own matrices: `scores` (S x S, used as given, masks applied, then the softmax) or `pattern` "
            "(S x S weights, used as given), optional `values` (S x d_v) for the contexts. One head, one layer; "
            "with neither, it runs on its example score matrix (`defaults`)."
        ),
        n_layers=1,
        n_heads=1,
        n_kv_heads=1,
        d_model=0,
        d_head=0,
        d_v=0,
        tokenizer="labels for the rows (default x1..xS)",
        default_text="x1 x2 x3 x4",
        defaults={"scores": EXAMPLE_SCORES},
    )

    def count_tokens(self, inp: RunInput) -> int:
        m = inp.scores if inp.scores is not None else inp.pattern
        return int(m.shape[0]) if m is not None else len(EXAMPLE_SCORES)

    def encode_sequence(self, inp: RunInput) -> Encoded:
        inp = with_example(inp)
        if inp.scores is not None and inp.pattern is not None:
            raise InputError("pattern", "give scores or pattern, not both: the softmax of scores makes a pattern")
        field, m = ("scores", inp.scores) if inp.scores is not None else ("pattern", inp.pattern)
        assert m is not None  # with_example gave the example's
        s = check_square(field, m)
        if inp.pattern is not None:
            check_weights(inp.pattern)
        if inp.values is not None and inp.values.shape[0] != s:
            raise InputError("values", f"got {inp.values.shape[0]} rows for {s} positions: give one value row per key")
        tokens = row_labels(inp, s, field)
        return Encoded(tokens, torch.eye(s, dtype=torch.float64), from_tokens=False)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        inp = with_example(inp)
        m = inp.scores if inp.scores is not None else inp.pattern
        assert m is not None  # encode refused it
        s = m.shape[0]
        eye = torch.eye(s, dtype=torch.float64)
        zero = torch.zeros(1, s, 1, dtype=torch.float64)
        if inp.scores is not None:  # (1, S, S): Q = I scores, K = I I
            W_Q, W_K, pattern = inp.scores[None], eye[None], None
        else:  # one zero column: every score 0, the weights replaced by the pattern (1, S, S)
            W_Q, W_K, pattern = zero, zero, m[None]
        W_V = (inp.values if inp.values is not None else eye)[None]  # (1, S, d_v)
        w = AttentionWeights(W_Q=W_Q, W_K=W_K, W_V=W_V, scale=1.0, pattern=pattern)
        return one_layer(w.to(device, dtype))

    def run(
        self,
        inp: RunInput,
        device: torch.device,
        dtype: torch.dtype,
        *,
        interventions: Interventions = NO_INTERVENTIONS,
        encoded: Encoded | None = None,
        after: ModelRun | None = None,
    ) -> ModelRun:
        """The shared run; an input shift is refused, since x_0 = I only carries the typed matrices (shifting it
        would change the scores themselves, not an input)."""
        if interventions.shift:
            raise InputError(
                "change.kind", "the given model has no input vectors to shift: its matrices are typed in; move a value"
            )
        return super().run(inp, device, dtype, interventions=interventions, encoded=encoded, after=after)

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        raise InputError(
            "change.kind",
            "the given model's tokens only label typed-in matrices: a token swap changes nothing; move a value",
        )

    def eligibility(self, inp: RunInput, enc: Encoded, device: torch.device) -> tuple[MaskSpec, Tensor]:
        """The masks in force, and (for a pattern) the check that they leave the typed weights as they are."""
        masks, eligible = super().eligibility(inp, enc, device)
        if inp.pattern is not None:
            check_pattern_masks(inp.pattern, masks, eligible.cpu())
        return masks, eligible

    def run_config(self, net: Network, fwd: ForwardResult, enc: Encoded) -> RunConfig:
        config = super().run_config(net, fwd, enc)
        given = net.blocks[0].attn.pattern is not None
        return replace(config, architecture=PATTERN_SAY if given else SCORES_SAY)


def with_example(inp: RunInput) -> RunInput:
    """The input, with the example score matrix where it types in neither scores nor a pattern."""
    if inp.scores is not None or inp.pattern is not None:
        return inp
    return replace(inp, scores=torch.tensor(EXAMPLE_SCORES, dtype=torch.float64))


def check_square(field: str, m: Tensor) -> int:
    rows, cols = m.shape
    if rows != cols:
        raise InputError(field, f"got {rows} x {cols}: it needs one row and one column per position (S x S)")
    return int(rows)


def check_weights(pattern: Tensor) -> None:
    """Weights are at least 0 (a row's sum is checked with the masks, which may leave a row no key)."""
    bad = (pattern < 0).nonzero()
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise InputError(f"pattern[{i}][{j}]", f"got {float(pattern[i, j]):g}: an attention weight is at least 0")


def check_pattern_masks(pattern: Tensor, masks: MaskSpec, eligible: Tensor) -> None:
    """A cell a mask excludes holds 0, and a row with an eligible key sums to 1 within ROW_SUM_TOLERANCE (a row
    with none holds only zeros, which the all_masked policy then refuses or keeps)."""
    on_masked = ((pattern != 0) & ~eligible).nonzero()
    if len(on_masked):
        i, j = (int(v) for v in on_masked[0])
        why = [name for name, grid in reason_grids(masks, pattern.shape[0]).items() if bool(grid[i, j])]
        raise InputError(
            f"pattern[{i}][{j}]",
            f"holds weight {float(pattern[i, j]):g} but the {' and '.join(why)} mask excludes query {i} -> key {j}:"
            f" set it to 0 or lift the mask (a masked cell holds exactly 0)",
        )
    sums = pattern.sum(dim=-1)
    for i in eligible.any(dim=-1).nonzero().flatten().tolist():
        if abs(float(sums[i]) - 1.0) > ROW_SUM_TOLERANCE:
            raise InputError(
                f"pattern[{i}]",
                f"row {i} sums to {float(sums[i]):.6g}: a row of weights sums to 1 (within {ROW_SUM_TOLERANCE:g})",
            )
