from __future__ import annotations

import pytest
import torch

from engine.errors import InputError
from engine.masks import MaskSpec, eligibility, empty_rows, reason_grids

T, F = True, False


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (MaskSpec(), [[T, T, T, T]] * 4),
        (MaskSpec(causal=True), [[T, F, F, F], [T, T, F, F], [T, T, T, F], [T, T, T, T]]),
        (MaskSpec(window=2), [[T, T, F, F], [T, T, T, F], [F, T, T, T], [F, F, T, T]]),
        # window with causal: itself and the w-1 positions before it
        (MaskSpec(causal=True, window=2), [[T, F, F, F], [T, T, F, F], [F, T, T, F], [F, F, T, T]]),
        # padding is per key: no query may attend to a padded position
        (MaskSpec(padding=(T, F, T, T)), [[T, F, T, T]] * 4),
        (MaskSpec(blocked=((0, 3), (2, 2))), [[T, T, T, F], [T, T, T, T], [T, T, F, T], [T, T, T, T]]),
        (
            MaskSpec(causal=True, padding=(T, T, T, F), blocked=((2, 0),)),
            [[T, F, F, F], [T, T, F, F], [F, T, T, F], [T, T, T, F]],
        ),
    ],
)
def test_eligibility_combines_masks_by_exclusion(spec: MaskSpec, expected: list[list[bool]]) -> None:
    assert eligibility(spec, 4).tolist() == expected


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (MaskSpec(padding=(T, T)), "masks.padding", "got 2 padding flags for 4 positions"),
        (MaskSpec(window=0), "masks.window", "window must be >= 1"),
        (MaskSpec(blocked=((0, 1), (4, 0))), "masks.blocked[1]", "0..3"),
        (MaskSpec(blocked=((-1, 0),)), "masks.blocked[0]", "outside the 4 x 4 grid"),
    ],
)
def test_bad_masks_name_field_and_limit(spec: MaskSpec, field: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        eligibility(spec, 4)
    assert err.value.field == field and words in err.value.message


@pytest.mark.parametrize("window", [4, 5, 2**62, 2**63, 2**64 + 3, 10**30])
def test_a_window_wider_than_the_sequence_allows_every_pair(window: int) -> None:
    # |q - k| is at most S - 1: a huge window must read as "no window", never overflow int64 or mask everything
    assert eligibility(MaskSpec(window=window), 4).all()
    assert (
        eligibility(MaskSpec(causal=True, window=window), 4).tolist() == eligibility(MaskSpec(causal=True), 4).tolist()
    )


def test_empty_rows_finds_rows_without_keys() -> None:
    e = torch.ones(3, 3, dtype=torch.bool)
    e[1] = False
    assert empty_rows(e) == [1]
    assert empty_rows(eligibility(MaskSpec(causal=True), 5)) == []


def _specs(seq_len: int) -> list[MaskSpec]:
    """Every combination of the four masks on `seq_len` positions."""
    padding = tuple(i % 3 != 1 for i in range(seq_len))
    blocked = ((0, 0), (seq_len - 1, 1), (2, 2))
    out = []
    for causal in (False, True):
        for window in (None, 2):
            for pad in (None, padding):
                for cells in ((), blocked):
                    out.append(MaskSpec(causal=causal, window=window, padding=pad, blocked=cells))
    return out


@pytest.mark.parametrize("spec", _specs(5))
def test_reason_grids_explain_every_masked_cell(spec: MaskSpec) -> None:
    grids = reason_grids(spec, 5)
    in_force = {"causal": spec.causal, "window": spec.window is not None, "padding": spec.padding is not None}
    in_force["blocked"] = bool(spec.blocked)
    assert set(grids) == {name for name, on in in_force.items() if on}
    any_reason = torch.zeros(5, 5, dtype=torch.bool)
    for name, grid in grids.items():
        assert grid.shape == (5, 5) and grid.dtype == torch.bool
        alone = MaskSpec(**{f: getattr(spec, f) for f in ("causal", "window", "padding", "blocked") if f == name})
        assert torch.equal(grid, ~eligibility(alone, 5)), name  # each grid is its own mask and nothing else
        any_reason |= grid
    assert torch.equal(~any_reason, eligibility(spec, 5))


def test_padded_positions_are_the_padding_mask_by_position() -> None:
    by_position = MaskSpec(causal=True, padded=(1, 3)).with_length(5)
    assert by_position == MaskSpec(causal=True, padding=(T, F, T, F, T))
    assert MaskSpec(padded=()).with_length(3).padding == (T, T, T)
    with pytest.raises(InputError) as e:
        MaskSpec(padded=(0, 5)).with_length(5)
    assert e.value.field == "masks.padded[1]" and "0..4" in str(e.value)
    with pytest.raises(InputError) as e:
        MaskSpec(padded=(0,), padding=(T, T)).with_length(2)
    assert e.value.field == "masks.padded"


def test_a_run_describes_its_masks_for_the_answer() -> None:
    """The run carries its masks as plain values and, for one sequence, the pairs each leaves eligible, so that an
    answer is written from the run's data; a batch, whose items have their own padding, has no one count."""
    from engine.masks import pair_counts
    from engine.models.base import RunInput
    from engine.models.random_layer import RandomModel

    model, masks = RandomModel(), MaskSpec(causal=True, window=2, blocked=((3, 1),))
    one = model.run(RunInput(text="a b c d e", masks=masks), torch.device("cpu"), torch.float32)
    assert one.mask_values == masks.to_dict() == {"causal": T, "padding": None, "window": 2, "blocked": [[3, 1]]}
    assert one.pairs == pair_counts(masks, 5)
    assert one.pairs["causal"] == 15 and one.pairs["blocked"] == 24  # S (S + 1) / 2 and S x S less one cell
    causal = MaskSpec(causal=True)
    batch = model.run(RunInput(texts=["a b c", "d"], masks=causal), torch.device("cpu"), torch.float32)
    assert batch.pairs is None
    assert batch.mask_values == causal.to_dict()
