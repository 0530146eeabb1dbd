"""The bracket-matching score: how much weight each closing bracket puts on its own opening bracket.

Token level: the characters of the tokens' labels, read in order, are matched as brackets are ((), [], {}) with a
stack; each closing character matched to an opening one gives the pair (token holding the closing character, token
holding the opening one). A pair inside one token ("()" as one piece) is skipped, and so is a closing character
that does not match the open bracket on top of the stack (it is left unmatched; the stack stays). Special tokens
([CLS], <|endoftext|>) hold no brackets.

    bracket_match = mean over pairs (q, k) of W[q, k]          (None when the text has no pair across tokens)

A head that always attends from a closing bracket to its opening one scores 1.0.
"""

from __future__ import annotations

import torch
from torch import Tensor

OPENING = {")": "(", "]": "[", "}": "{"}


def bracket_pairs(labels: list[str], special: list[bool] | None = None) -> list[tuple[int, int]]:
    """(query, key) token positions: the token closing a bracket and the token that opened it, in text order."""
    stack: list[tuple[str, int]] = []
    pairs: list[tuple[int, int]] = []
    for position, label in enumerate(labels):
        if special is not None and special[position]:
            continue
        for char in label:
            if char in "([{":
                stack.append((char, position))
            elif char in OPENING and stack and stack[-1][0] == OPENING[char]:
                _, opened = stack.pop()
                if opened != position:
                    pairs.append((position, opened))
    return pairs


def bracket_match_score(weights: Tensor, pairs: list[tuple[int, int]], eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over the pairs of W[q, k]; pairs a mask excludes are left out."""
    if eligible is not None:
        pairs = [(q, k) for q, k in pairs if bool(eligible[q, k])]
    if not pairs:
        return None
    q = torch.tensor([p[0] for p in pairs], device=weights.device)
    k = torch.tensor([p[1] for p in pairs], device=weights.device)
    return weights[:, q, k].mean(dim=-1)
