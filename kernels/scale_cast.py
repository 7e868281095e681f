"""`scale_cast(x, s, dtype, divide)`: x / s (or x * s) cast to `dtype` in one pass, with s a
one-element fp32 tensor on the device (no host sync): the per-tensor fp8 quantization and
dequantization around cuDNN's fp8 attention."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_cast(X, Y, S, N, DIVIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    s = tl.load(S)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    y = x / s if DIVIDE else x * s
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


def scale_cast(x: torch.Tensor, s: torch.Tensor, dtype: torch.dtype, divide: bool) -> torch.Tensor:
    """x / s (divide) or x * s as `dtype`, same shape, contiguous; s a one-element fp32 tensor."""
    if s.numel() != 1 or s.dtype != torch.float32 or s.device != x.device:
        raise ValueError(f"s must be one fp32 element on {x.device} (got {tuple(s.shape)} {s.dtype} on {s.device})")
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    n, block = x.numel(), 4096
    _scale_cast[(triton.cdiv(n, block),)](x, y, s, n, DIVIDE=divide, BLOCK=block, num_warps=8)
    return y
