"""Model building blocks the runtime configures: 3D neighborhood attention and NA blocks.

`NeighborhoodAttention3D` follows the protocol of LTX-2's DiffVAE attention modules: an
`attention_function` attribute called as `attention_function(q, k, v, kernel_size,
is_causal=...)` and a `kernel_size` attribute. `apply_profile` swaps `attention_function`
on every module that has both.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from backends.runtime.attention import na3d
from kernels.na3d_args import as_triple


class NeighborhoodAttention3D(nn.Module):
    """Multi-head 3D neighborhood self-attention on channels-last input (B, T, H, W, dim)."""

    def __init__(self, dim: int, kernel_size, head_dim: int = 64, *, is_causal=False, backend: str = "auto") -> None:
        super().__init__()
        if dim % head_dim:
            raise ValueError(f"dim {dim} is not a multiple of head_dim {head_dim}")
        self.dim, self.head_dim, self.heads = dim, head_dim, dim // head_dim
        self.kernel_size = as_triple(kernel_size, "kernel_size", int)
        self.is_causal = as_triple(is_causal, "is_causal", bool)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.RMSNorm(head_dim)
        self.k_norm = nn.RMSNorm(head_dim)
        self.proj = nn.Linear(dim, dim)
        # Resolved per call (the device is known then), outside any torch.compile graph.
        self.attention_function = torch.compiler.disable(functools.partial(na3d, backend=backend))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5 or x.shape[-1] != self.dim:
            raise ValueError(f"expected (B, T, H, W, {self.dim}), got {tuple(x.shape)}")
        b, t, h, w, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, h, w, 3, self.heads, self.head_dim).unbind(4)
        q, k = self.q_norm(q), self.k_norm(k)
        o = self.attention_function(q, k, v, self.kernel_size, is_causal=self.is_causal)
        return self.proj(o.reshape(b, t, h, w, self.dim))


class NABlock(nn.Module):
    """Pre-norm residual block: neighborhood attention, then an MLP."""

    def __init__(self, dim: int, kernel_size, head_dim: int = 64, mlp_ratio: int = 4, **na_kwargs) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = NeighborhoodAttention3D(dim, kernel_size, head_dim, **na_kwargs)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class BlockStack(nn.Module):
    """A stack of blocks under the name `blocks`, the unit the runtime compiles and offloads."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def na_stack(depth: int, dim: int, kernel_size, head_dim: int = 64, **kwargs) -> BlockStack:
    return BlockStack([NABlock(dim, kernel_size, head_dim, **kwargs) for _ in range(depth)])
