"""A loaded checkpoint holds its weights once: every tensor of the network is a view of the safetensors file's
mapped pages in the file's own dtype (a bfloat16 checkpoint is not expanded to float32 at loading), a run converts
one block at a time and keeps the stored projections (LayerTrace.held), and what it computes is what the float32
expansion of the same numbers computes, to the bit."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from engine.hooks import cache
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointModel, load_checkpoint
from tests.checkpoints import PROBE, make_model

CPU = torch.device("cpu")
FAMILIES = ("qwen3", "gemma2")  # the bench's two shapes (bench/checkpoints.py): q/k norms; softcaps, post-norms


def tensors_of(obj: Any) -> Iterator[tuple[str, Tensor]]:
    """Every tensor reachable through dataclass fields, tuples and lists of `obj`, with where it was found."""
    stack: list[tuple[str, Any]] = [("", obj)]
    seen: set[int] = set()
    while stack:
        where, item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            yield where, item
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack += [(f"{where}.{f.name}", getattr(item, f.name)) for f in dataclasses.fields(item)]
        elif isinstance(item, tuple | list):
            stack += [(f"{where}[{i}]", x) for i, x in enumerate(item)]


def mappings_of(path: Path) -> list[tuple[int, int]]:
    """The address ranges this process maps `path` at (/proc/self/maps)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and Path(parts[5]) == path.resolve():
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


def in_file(t: Tensor, ranges: list[tuple[int, int]]) -> bool:
    """Whether t's bytes lie in the mapped file (a view of its pages), not in memory of the process's own."""
    start = t.untyped_storage().data_ptr()
    end = start + t.untyped_storage().nbytes()
    return any(lo <= start and end <= hi for lo, hi in ranges)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Per family: (the checkpoint in bfloat16, as Qwen3 ships, and the same numbers expanded to float32)."""
    out = {}
    for family in FAMILIES:
        model, tok = make_model(family)
        half = tmp_path_factory.mktemp(f"{family}-bf16")
        model.to(torch.bfloat16).save_pretrained(half, safe_serialization=True)
        full = tmp_path_factory.mktemp(f"{family}-f32")
        model.float().save_pretrained(full, safe_serialization=True)  # the bfloat16 numbers, each exactly in float32
        for d in (half, full):
            tok.save(str(d / "tokenizer.json"))
        out[family] = (half, full)
    return out


def weights(model: CheckpointModel) -> list[tuple[str, Tensor]]:
    return [*tensors_of(model.net.net), *tensors_of(model.embedding)]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_network_is_a_view_of_the_mapped_file(family: str, checkpoints: dict[str, tuple[Path, Path]]) -> None:
    half, _ = checkpoints[family]
    model = load_checkpoint(family, half, reference=False)
    ranges = mappings_of(half / "model.safetensors")
    assert ranges, "the weights file is not mapped"
    held = weights(model)
    assert len(held) > 10
    copied = [(w, t.dtype) for w, t in held if not in_file(t, ranges) or t.dtype != torch.bfloat16]
    assert not copied, f"{len(copied)} of {len(held)} tensors are copies, not the file's bfloat16 pages: {copied[:3]}"
    # a run keeps the stored projections, not each layer's converted float32 copy (the run cache holds runs)
    run = model.run(RunInput(text=PROBE), CPU, torch.float32)
    assert run.logits is not None and run.logits.dtype == torch.float32
    kept = [w for t in run.layers for w, x in tensors_of(t.held) if not in_file(x, ranges)]
    assert not kept, f"the run holds converted weights: {kept[:3]}"
    # the negative control: the check tells a copy from the file's pages
    _, W_E = next((w, t) for w, t in held if w == ".W_E")
    assert in_file(W_E, ranges)
    assert not in_file(W_E.clone(), ranges)
    assert not in_file(W_E.float(), ranges)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_bfloat16_checkpoint_computes_as_its_float32_expansion(
    family: str, checkpoints: dict[str, tuple[Path, Path]]
) -> None:
    """Every layer's weights, the logits and every hook are those of the float32 checkpoint holding the same
    numbers, exactly; hook_result and QK attribution read the stored projections converted as they are used."""
    half, full = checkpoints[family]
    inp = RunInput(text=PROBE)
    stored, expanded = load_checkpoint(family, half, reference=False), load_checkpoint(family, full, reference=False)
    got, want = stored.run(inp, CPU, torch.float32), expanded.run(inp, CPU, torch.float32)
    assert got.logits is not None and want.logits is not None
    assert torch.equal(got.logits, want.logits)
    ours, theirs = cache(got.result), cache(want.result)
    assert ours.keys() == theirs.keys()
    differ = [k for k in ours if not torch.equal(ours[k], theirs[k])]
    assert not differ, differ[:5]
    if family == "qwen3":
        from engine.analysis.qk import qk_attribution

        a = qk_attribution(got, stored.network(inp, CPU, torch.float32), 1, 0, 5, 2)
        b = qk_attribution(want, expanded.network(inp, CPU, torch.float32), 1, 0, 5, 2)
        assert a == b and len(a.terms) > 4


def test_loading_refuses_a_config_past_the_limits_before_reading_a_tensor(
    checkpoints: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits are checked from config.json before any tensor is read or mapped."""
    from engine.models import checkpoint
    from engine.models.checkpoint import CheckpointError, CheckpointLimits

    def no_reading(*args: Any) -> Any:
        raise AssertionError("a tensor was read before the limits were checked")

    monkeypatch.setattr(checkpoint, "read_tensors", no_reading)
    with pytest.raises(CheckpointError, match="max_parameters"):
        load_checkpoint("qwen3", checkpoints["qwen3"][0], limits=CheckpointLimits(max_parameters=1000))


def test_a_run_converts_each_block_once(
    checkpoints: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run converts each stored block once, as the pass reaches it: what reads only a block's kind, widths or
    pieces (the narrowest window, the run's config, the interventions' bounds) reads the stored block."""
    from engine.stored import StoredBlocks

    read: list[int] = []
    convert = StoredBlocks.__getitem__

    def counted(self: StoredBlocks, i: Any) -> Any:
        read.extend(range(len(self))[i] if isinstance(i, slice) else [i])
        return convert(self, i)

    monkeypatch.setattr(StoredBlocks, "__getitem__", counted)
    monkeypatch.setattr(StoredBlocks, "__iter__", lambda self: (counted(self, i) for i in range(len(self))))
    model = load_checkpoint("gemma2", checkpoints["gemma2"][0], reference=False)
    model.run(RunInput(text=PROBE), CPU, torch.float32)
    assert sorted(read) == list(range(model.sizes.n_layers)), read
