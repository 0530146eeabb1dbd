from __future__ import annotations

import pytest
import torch

from engine.errors import InputError
from engine.masks import MaskSpec, eligibility, empty_rows

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
