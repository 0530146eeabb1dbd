"""bracket_match: the weight from each closing bracket's token to its opening bracket's token, hand-computed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.brackets import bracket_match_score, bracket_pairs
from engine.analysis.heads import head_type_scores
from engine.models.base import RunInput
from engine.models.random_layer import RandomModel
from server.config import Settings
from tests.fixtures import make_app_client

CPU = torch.device("cpu")


def test_pairs_follow_nesting_and_skip_a_pair_inside_one_token() -> None:
    #            0     1    2    3    4    5     6    7    8
    labels = ["f", "(", "g", "[", "x", "]", "()", ")", "{"]
    # "]" at 5 closes "[" at 3; "()" at 6 is one token: skipped; ")" at 7 closes "(" at 1; "{" never closes
    assert bracket_pairs(labels) == [(5, 3), (7, 1)]


def test_a_closing_bracket_that_does_not_match_is_left_out() -> None:
    assert bracket_pairs(["(", "]", ")"]) == [(2, 0)]
    assert bracket_pairs(["a", ")", "b"]) == []
    # a special token's characters are not brackets
    assert bracket_pairs(["[CLS", "(", ")", "]"], [True, False, False, False]) == [(2, 1)]


def test_pairs_span_pieces_that_hold_more_than_the_bracket() -> None:
    # byte-level BPE pieces: "(x" opens, "))" closes two
    assert bracket_pairs(["f", "((", "x", "))"]) == [(3, 1), (3, 1)]


def test_score_is_the_mean_weight_on_the_pairs() -> None:
    w = torch.zeros(2, 4, 4, dtype=torch.float64)
    w[:, torch.arange(4), torch.arange(4)] = 1.0  # head 0 attends to itself
    w[1, 2] = torch.tensor([0.25, 0.75, 0.0, 0.0])  # head 1: query 2 puts 0.75 on key 1
    w[1, 3] = torch.tensor([0.5, 0.1, 0.4, 0.0])
    pairs = [(2, 1), (3, 0)]
    got = bracket_match_score(w, pairs)
    assert got is not None
    assert got.tolist() == pytest.approx([0.0, (0.75 + 0.5) / 2])
    assert bracket_match_score(w, []) is None
    eligible = torch.ones(4, 4, dtype=torch.bool)
    eligible[3, 0] = False  # a masked pair is left out of the mean
    left = bracket_match_score(w, pairs, eligible)
    assert left is not None and left.tolist() == pytest.approx([0.0, 0.75])


def test_head_types_score_brackets_on_the_callers_text() -> None:
    model = RandomModel()
    text = "f ( x [ y ] ) z"
    table = head_type_scores(model, CPU, torch.float64, inp=RunInput(text=text))
    w = model.run(RunInput(text=text), CPU, torch.float64).layers[0].attn.weights[0]  # (H, S, S)
    for row in table[0]:
        h = row["head"]
        assert isinstance(h, int)
        assert row["bracket_match"] == pytest.approx(float((w[h, 5, 3] + w[h, 6, 1]) / 2), abs=1e-12)
    plain = head_type_scores(model, CPU, torch.float64, inp=RunInput(text="no brackets here"))
    assert all(row["bracket_match"] is None for row in plain[0])


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(device="cpu", models="textbook,random", allowed_hosts="testserver")
    with make_app_client(settings) as c:
        yield c


def test_api_heads_answers_bracket_match(client: TestClient) -> None:
    body = client.post("/api/heads", json={"model": "random", "text": "( a ) ( b )"}).json()
    att = client.post("/api/attention", json={"model": "random", "text": "( a ) ( b )", "include": ["weights"]})
    heads = att.json()["layers"][0]["heads"]
    assert len(body["heads"]) == len(heads)
    for row in body["heads"]:
        w = heads[row["head"]]["weights"]
        expected = (w[2][0] + w[5][3]) / 2
        assert row["bracket_match"] == pytest.approx(expected, abs=1e-5)
    none = client.post("/api/heads", json={"model": "textbook"}).json()
    assert none["heads"][0]["bracket_match"] is None
