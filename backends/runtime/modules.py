"""Small models that follow LTX-2's module protocols (for tests, demos and smoke checks).

- `NeighborhoodAttention3D`: LTX-2's DiffVAE NA protocol: `attention_function(self, q, k, v)`
  with q, k, v (B, T, H, W, heads, head_dim), q already multiplied by `self.scale`, the window
  in `self.kernel_size`.
- `DenseAttention`: LTX-2's DiT protocol: `attention_function(q, k, v, heads)` on
  (B, S, heads * head_dim), and `masked_attention_function(q, k, v, heads, mask)`.
`apply_profile` installs its callables on these exactly as on LTX-2's own modules.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from backends.runtime.attention import NAFunction
from backends.runtime.dense_attention import DenseFunction
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
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.RMSNorm(head_dim)
        self.k_norm = nn.RMSNorm(head_dim)
        self.proj = nn.Linear(dim, dim)
        self.attention_function = NAFunction(backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5 or x.shape[-1] != self.dim:
            raise ValueError(f"expected (B, T, H, W, {self.dim}), got {tuple(x.shape)}")
        b, t, h, w, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, h, w, 3, self.heads, self.head_dim).unbind(4)
        q, k = self.q_norm(q) * self.scale, self.k_norm(k)
        o = self.attention_function(self, q.contiguous(), k.contiguous(), v.contiguous())
        return self.proj(o.reshape(b, t, h, w, self.dim))


class DenseAttention(nn.Module):
    """Multi-head self-attention on (B, S, dim) with LTX-2's DiT attention slots."""

    def __init__(self, dim: int, head_dim: int = 64) -> None:
        super().__init__()
        self.heads, self.dim_head = dim // head_dim, head_dim
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim) for _ in range(3))
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Identity())
        self.attention_function = DenseFunction("pytorch")
        self.masked_attention_function = DenseFunction("pytorch")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        out = (self.attention_function(q, k, v, self.heads) if mask is None
               else self.masked_attention_function(q, k, v, self.heads, mask))
        return self.to_out(out)


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


class _GeluProj(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.proj(x), approximate="tanh")


class DenseBlock(nn.Module):
    """Pre-norm residual block of dense attention and an MLP, with LTX-2's module names
    (`attn1.to_q`, ..., `ff.net.0.proj`, `ff.net.2`)."""

    def __init__(self, dim: int, head_dim: int = 64, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = DenseAttention(dim, head_dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Module()
        self.ff.net = nn.Sequential(_GeluProj(dim, mlp_ratio * dim), nn.Identity(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x))
        return x + self.ff.net(self.norm2(x))


class BlockStack(nn.Module):
    """A stack of blocks under the name `transformer_blocks`, the unit the runtime compiles and offloads."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.transformer_blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.transformer_blocks:
            x = block(x)
        return x


def na_stack(depth: int, dim: int, kernel_size, head_dim: int = 64, **kwargs) -> BlockStack:
    return BlockStack([NABlock(dim, kernel_size, head_dim, **kwargs) for _ in range(depth)])


def dense_stack(depth: int, dim: int, head_dim: int = 64) -> BlockStack:
    return BlockStack([DenseBlock(dim, head_dim) for _ in range(depth)])
