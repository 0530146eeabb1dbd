"""An image as tokens: its patches embedded, the model's own tokens before them, learned positions added.

    pixels     (B, C, H, W) already resized and normalised by the caller, H and W multiples of the patch size P
    patches    = Conv2d(pixels; W_patch, b_patch, stride P)      (B, D, rows, cols), rows = H / P, cols = W / P
               read row by row: patch (r, c) is token r * cols + c of the grid
    x_0        = [CLS, DIST] + [patches] + W_pos                   DIST where the model has one (DeiT)
               then the registers after CLS, without positions      (DINOv2 with registers)

W_pos holds the lead tokens' positions, then the config's own grid of g x g patches row by row. An image whose grid
is another (rows x cols) reads the grid's positions resized bicubically to rows x cols, as transformers'
interpolate_pos_encoding does (antialiased for DINOv2 with registers); the lead tokens keep theirs.

The tokens are named `[CLS]`, `[DIST]`, `[REG1]` .. `[REGn]` and `p(r,c)`: the patch in row r and column c of the
grid, both counted from 0 at the top left, as the grid's axes are (patch_grid gives rows and columns), so p(r,c)
covers pixel rows r P .. r P + P - 1 and columns c P .. c P + P - 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


def wide(t: Tensor) -> Tensor:
    """`t` in float32 where it holds 16-bit floats (a checkpoint stored in bfloat16 or float16), else itself."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


def patch_label(row: int, col: int) -> str:
    return f"p({row},{col})"


def grid_tokens(grid: Tensor) -> Tensor:
    """(B, D, rows, cols) -> (B, rows * cols, D): the grid read row by row, patch (r, c) as token r * cols + c."""
    return grid.flatten(2).transpose(1, 2)


def resize_grid(grid: Tensor, rows: int, cols: int, antialias: bool) -> Tensor:
    """(1, D, g, g) -> (1, D, rows, cols): bicubic, corners not aligned, computed in float32, as transformers."""
    resized = F.interpolate(grid.float(), size=(rows, cols), mode="bicubic", align_corners=False, antialias=antialias)
    return resized.to(grid.dtype)


@dataclass(frozen=True)
class PatchEmbedding:
    """pixels (B, C, H, W) -> x_0 (B, S, D), S = the lead tokens + the registers + rows * cols."""

    W_patch: Tensor  # (D, C, P, P) the patch projection, a torch Conv2d's weight
    b_patch: Tensor  # (D,)
    cls: Tensor  # (D,) the [CLS] token
    W_pos: Tensor  # (lead + g * g, D) the lead tokens' positions, then the config's g x g grid row by row
    dist: Tensor | None = None  # (D,) DeiT's distillation token, after [CLS]
    registers: Tensor | None = None  # (R, D) DINOv2's register tokens, after [CLS], without a position
    antialias: bool = False  # positions resized with antialiasing (DINOv2 with registers)

    @property
    def patch_size(self) -> int:
        return int(self.W_patch.shape[-1])

    @property
    def channels(self) -> int:
        return int(self.W_patch.shape[1])

    @property
    def lead(self) -> int:
        """Tokens with a position before the patches: [CLS], and [DIST] where there is one."""
        return 1 if self.dist is None else 2

    @property
    def grid(self) -> int:
        """g: the side of the config's own grid of patches, which W_pos covers."""
        return round((self.W_pos.shape[0] - self.lead) ** 0.5)

    @property
    def n_registers(self) -> int:
        return 0 if self.registers is None else int(self.registers.shape[0])

    def patch_grid(self, height: int, width: int) -> tuple[int, int]:
        """(rows, cols) of an image of height x width pixels."""
        return height // self.patch_size, width // self.patch_size

    def labels(self, rows: int, cols: int) -> list[str]:
        """Every token's name, in order (the module docstring)."""
        lead = ["[CLS]", *(["[DIST]"] if self.dist is not None else [])]
        registers = [f"[REG{i + 1}]" for i in range(self.n_registers)]
        return [lead[0], *registers, *lead[1:], *(patch_label(r, c) for r in range(rows) for c in range(cols))]

    def positions(self, rows: int, cols: int, height: int, width: int) -> Tensor:
        """(lead + rows * cols, D): W_pos as it is for the config's grid of a square image, else the grid's
        positions resized bicubically to rows x cols (transformers' interpolate_pos_encoding, its condition too)."""
        pos = wide(self.W_pos)
        g = self.grid
        if rows * cols == g * g and height == width:
            return pos
        d = pos.shape[-1]
        grid = pos[self.lead :].reshape(1, g, g, d).permute(0, 3, 1, 2)  # (1, D, g, g), as the patches lie
        resized = resize_grid(grid, rows, cols, self.antialias)  # (1, D, rows, cols)
        return torch.cat((pos[: self.lead], grid_tokens(resized)[0]))

    def __call__(self, pixels: Tensor) -> Tensor:
        """pixels (B, C, H, W) -> x_0 (B, S, D), in the weights' dtype (float32 where they are 16-bit)."""
        b, _, height, width = pixels.shape
        rows, cols = self.patch_grid(height, width)
        W, bias = wide(self.W_patch), wide(self.b_patch)
        patches = grid_tokens(F.conv2d(pixels.to(W.dtype), W, bias, stride=self.patch_size))  # (B, rows * cols, D)
        lead = [wide(self.cls)] + ([] if self.dist is None else [wide(self.dist)])
        x = torch.cat((torch.stack(lead)[None].expand(b, -1, -1), patches), dim=1)
        x = x + self.positions(rows, cols, height, width)
        if self.registers is not None:
            regs = wide(self.registers)[None].expand(b, -1, -1)
            x = torch.cat((x[:, :1], regs, x[:, 1:]), dim=1)
        return x
