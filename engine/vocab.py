"""Token strings to vocabulary ids, for the analyses that read a logit or a next-token loss by token.

A vocabulary is the model's list of readable pieces, one per id (ModelInfo.vocab). Two ids may read the same
(a checkpoint's byte pieces, say): a token string then stands for its first id, everywhere the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

_INDEXES: dict[int, tuple[list[str], dict[str, int]]] = {}


def vocab_index(vocab: list[str]) -> dict[str, int]:
    """token -> its first id, built once per vocabulary list (a model keeps its list for its lifetime)."""
    found = _INDEXES.get(id(vocab))
    if found is None or found[0] is not vocab:
        index: dict[str, int] = {}
        for i, t in enumerate(vocab):
            index.setdefault(t, i)
        found = (vocab, index)
        _INDEXES[id(vocab)] = found
    return found[1]


def token_ids(vocab: list[str], tokens: Sequence[str]) -> list[int] | None:
    """Each token's first id; None when any token is not in the vocabulary."""
    index = vocab_index(vocab)
    ids = [index.get(t) for t in tokens]
    return None if any(i is None for i in ids) else [i for i in ids if i is not None]
