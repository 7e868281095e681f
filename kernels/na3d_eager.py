"""Tiled 3D neighborhood attention with torch SDPA: any device, fixed memory for scores.

The query volume is cut into (T, H, W) tiles small enough that one tile's scores against
its key halo fit `score_budget` bytes; each tile runs one masked SDPA call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.na3d_args import BoolOr3, IntOr3, check_na3d
from kernels.na3d_reference import axis_mask, window

DEFAULT_SCORE_BUDGET = 256 * 2**20


def _halo(length: int, kernel: int, causal: bool, lo: int, hi: int) -> tuple[int, int]:
    start, end = window(length, kernel, causal)
    return int(start[lo]), int(end[hi - 1])


def plan_tiles(shape, kernel, batch_heads: int, budget: int) -> tuple[int, int, int]:
    """Largest (t, h, w) query tile whose fp32 scores against its halo fit `budget` bytes."""
    tile = list(shape)

    def cost(tl):
        nq = tl[0] * tl[1] * tl[2]
        nk = 1
        for n, k, L in zip(tl, kernel, shape):
            nk *= min(n + k - 1, L)
        return batch_heads * nq * nk * 4

    while cost(tile) > budget and max(tile) > 1:
        i = max(range(3), key=lambda a: tile[a])
        tile[i] = (tile[i] + 1) // 2
    return tuple(tile)


def na3d_eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3, *,
               scale: float | None = None, is_causal: BoolOr3 = False,
               score_budget: int = DEFAULT_SCORE_BUDGET) -> torch.Tensor:
    kernel, causal = check_na3d(q, k, v, kernel_size, is_causal,
                                dtypes=(torch.float32, torch.float16, torch.bfloat16))
    b, t, h, w, heads, d = q.shape
    shape = (t, h, w)
    scale = d ** -0.5 if scale is None else scale
    masks = [axis_mask(n, kk, c, q.device) for n, kk, c in zip(shape, kernel, causal)]
    tile = plan_tiles(shape, kernel, b * heads, score_budget)
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)

    def heads_first(x):  # (B, t, h, w, heads, d) -> (B, heads, t*h*w, d)
        return x.permute(0, 4, 1, 2, 3, 5).reshape(b, heads, -1, x.shape[-1])

    for t0 in range(0, t, tile[0]):
        t1 = min(t0 + tile[0], t)
        kt0, kt1 = _halo(t, kernel[0], causal[0], t0, t1)
        for h0 in range(0, h, tile[1]):
            h1 = min(h0 + tile[1], h)
            kh0, kh1 = _halo(h, kernel[1], causal[1], h0, h1)
            for w0 in range(0, w, tile[2]):
                w1 = min(w0 + tile[2], w)
                kw0, kw1 = _halo(w, kernel[2], causal[2], w0, w1)
                m = (masks[0][t0:t1, kt0:kt1][:, None, None, :, None, None]
                     & masks[1][h0:h1, kh0:kh1][None, :, None, None, :, None]
                     & masks[2][w0:w1, kw0:kw1][None, None, :, None, None, :])
                m = m.reshape((t1 - t0) * (h1 - h0) * (w1 - w0), -1)
                qt = heads_first(q[:, t0:t1, h0:h1, w0:w1])
                kt_ = heads_first(k[:, kt0:kt1, kh0:kh1, kw0:kw1])
                vt = heads_first(v[:, kt0:kt1, kh0:kh1, kw0:kw1])
                o = F.scaled_dot_product_attention(qt, kt_, vt, attn_mask=m, scale=scale)
                out[:, t0:t1, h0:h1, w0:w1] = o.reshape(b, heads, t1 - t0, h1 - h0, w1 - w0, -1).permute(
                    0, 2, 3, 4, 1, 5)
    return out
