"""engine/vocab.py: the one token -> id lookup the patch metric, the ablation loss and /api/intervene's losses read."""

from engine.vocab import token_ids, vocab_index


def test_a_token_that_two_ids_read_stands_for_its_first_id() -> None:
    vocab = ["a", " b", "a", "c"]
    assert vocab_index(vocab) == {"a": 0, " b": 1, "c": 3}
    assert token_ids(vocab, ["c", "a", " b"]) == [3, 0, 1]


def test_a_token_outside_the_vocabulary_gives_no_ids() -> None:
    assert token_ids(["a", "b"], ["a", "z"]) is None
    assert token_ids(["a", "b"], []) == []


def test_the_index_follows_the_list_it_was_built_for() -> None:
    first = ["x", "y"]
    assert vocab_index(first)["y"] == 1
    second = ["y", "x"]  # another list, even one that reuses the first's id() after it is freed, gets its own index
    assert vocab_index(second)["y"] == 0
    assert vocab_index(first)["y"] == 1
