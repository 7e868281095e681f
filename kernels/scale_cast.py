"""`scale_cast(x, s, dtype, divide)`: x / s (or x * s) cast to `dtype` in one pass, with s on the
device (no host sync): one fp32 element (the per-tensor fp8 quantization and dequantization around
cuDNN's fp8 attention), or one per row of a 2-D x (fp8 rows dequantized)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.int8_gemm import FP8_MAX


def to_e4m3(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """t / scale in float8_e4m3fn, clamped to its 448 (torch ops: a compiled graph fuses them)."""
    return (t.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


@triton.jit
def _scale_cast(X, Y, S, N, ROW, DIVIDE: tl.constexpr, PER_ROW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    s = tl.load(S + offs // ROW, mask=mask, other=1.0) if PER_ROW else tl.load(S)
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    y = x / s if DIVIDE else x * s
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


def scale_cast(x: torch.Tensor, s: torch.Tensor, dtype: torch.dtype, divide: bool) -> torch.Tensor:
    """x / s (divide) or x * s as `dtype`, same shape, contiguous; s fp32 on x's device, one element
    or (for a 2-D x) one a row."""
    per_row = x.dim() == 2 and s.shape == x.shape[:1] and s.numel() != 1
    if (s.numel() != 1 and not per_row) or s.dtype != torch.float32 or s.device != x.device:
        raise ValueError(f"s must be one fp32 element, or one a row of a 2-D x, on {x.device} (got {tuple(s.shape)} "
                         f"{s.dtype} on {s.device} for x of shape {tuple(x.shape)})")
    x, s = x.contiguous(), s.contiguous()
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    n, block = x.numel(), 4096
    if n:
        _scale_cast[(triton.cdiv(n, block),)](x, y, s, n, x.shape[-1] if per_row else 1, DIVIDE=divide,
                                              PER_ROW=per_row, BLOCK=block, num_warps=8)
    return y
