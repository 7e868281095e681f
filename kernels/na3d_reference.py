"""Brute-force 3D neighborhood attention, straight from the semantics (small sizes only).

For a query at position p on an axis of length L with kernel k: window start =
clamp(p - k//2, 0, L - k), window = [start, start + k); per-axis causal: [max(p - k + 1, 0), p].
Softmax over the window's k_t*k_h*k_w keys, accumulated in fp32 (fp64 for fp64 inputs).
"""

from __future__ import annotations

import torch

from kernels.na3d_args import BoolOr3, IntOr3, check_na3d


def window(length: int, kernel: int, causal: bool, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(start, end) of every position's window on one axis; end is exclusive."""
    p = torch.arange(length, device=device)
    if causal:
        return (p - kernel + 1).clamp(min=0), p + 1
    start = (p - kernel // 2).clamp(0, length - kernel)
    return start, start + kernel


def axis_mask(length: int, kernel: int, causal: bool, device=None) -> torch.Tensor:
    """[L, L] boolean: query position (row) may attend key position (column)."""
    start, end = window(length, kernel, causal, device)
    key = torch.arange(length, device=device)
    return (key[None, :] >= start[:, None]) & (key[None, :] < end[:, None])


def na3d_mask(shape: tuple[int, int, int], kernel, causal, device=None) -> torch.Tensor:
    """[THW, THW] boolean neighbourhood mask over flattened (T, H, W) tokens."""
    mt, mh, mw = (axis_mask(n, k, c, device) for n, k, c in zip(shape, kernel, causal))
    full = mt[:, None, None, :, None, None] & mh[None, :, None, None, :, None] & mw[None, None, :, None, None, :]
    n = shape[0] * shape[1] * shape[2]
    return full.reshape(n, n)


def na3d_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3, *,
                   scale: float | None = None, is_causal: BoolOr3 = False) -> torch.Tensor:
    kernel, causal = check_na3d(q, k, v, kernel_size, is_causal)
    b, t, h, w, heads, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    mask = na3d_mask((t, h, w), kernel, causal, q.device)
    acc = torch.promote_types(q.dtype, torch.float32)
    qf, kf, vf = (x.to(acc).reshape(b, t * h * w, heads, x.shape[-1]).transpose(1, 2) for x in (q, k, v))
    scores = (qf @ kf.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    out = scores.softmax(dim=-1) @ vf
    return out.transpose(1, 2).reshape(b, t, h, w, heads, v.shape[-1]).to(q.dtype)
