"""A network kept as its checkpoint stores it, each block converted to the run's dtype only while it runs.

A checkpoint's tensors stay as safetensors maps them from the file (engine/models/checkpoint.py): a bfloat16 file
stays bfloat16, its pages shared with the file. A run in float32 reads

    blocks[i]   = stored block i, its tensors converted to the run's device and dtype (exactly: every bfloat16 or
                  float16 number is a float32 number), made when the forward pass reaches layer i and dropped
                  after it
    unembed     = the stored unembedding; Unembed converts its matrix to the input's dtype as it multiplies

so the server holds the file's bytes once, and a run holds one block's converted weights at a time besides them,
where converting the whole network once would hold twice the file (a float32 copy of a bfloat16 checkpoint) beside
the mapped file itself. A tensor already in the run's dtype and on its device is the stored one, not a copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import torch

from engine.forward import Block, Network


class StoredBlocks(Sequence[Block]):
    """The stored blocks, each read as converted to `device` and `dtype`."""

    def __init__(self, blocks: Sequence[Block], device: torch.device, dtype: torch.dtype) -> None:
        self.stored = tuple(blocks)
        self.device = device
        self.dtype = dtype

    @overload
    def __getitem__(self, i: int) -> Block: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Block, ...]: ...

    def __getitem__(self, i: int | slice) -> Block | tuple[Block, ...]:
        if isinstance(i, slice):
            return tuple(b.to(self.device, self.dtype) for b in self.stored[i])
        return self.stored[i].to(self.device, self.dtype)

    def holding(self, blocks: Sequence[Block]) -> StoredBlocks:
        """Other stored blocks (the same with their rotary pinned, say), converted as these are."""
        return StoredBlocks(blocks, self.device, self.dtype)

    def __len__(self) -> int:
        return len(self.stored)

    def __iter__(self) -> Iterator[Block]:
        return (b.to(self.device, self.dtype) for b in self.stored)


def converted_per_block(net: Network, device: torch.device, dtype: torch.dtype) -> Network:
    """`net` as a run on `device` in `dtype` reads it, with nothing converted ahead of the block that uses it."""
    stored = net.blocks.stored if isinstance(net.blocks, StoredBlocks) else net.blocks
    return Network(StoredBlocks(stored, device, dtype), net.unembed)
