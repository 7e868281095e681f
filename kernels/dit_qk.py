"""LTX-2's DiT pre-attention in one pass: q and k RMS-normalised over all heads, then SPLIT RoPE.

LTX-2 v1.2.0's `PytorchPreAttention` (ltx_core/model/transformer/ops.py) runs `q_norm` and `k_norm`
(`torch.nn.RMSNorm` over the whole inner dimension, heads x head_dim) and then, with positional
embeddings, its SPLIT rotary embedding (rope.py, `apply_split_rotary_emb`): each head's dimension is
two halves x1, x2, and with the table entries c = cos[b, h, t, j], s = sin[b, h, t, j] of the pair
j, out1 = x1 c - x2 s and out2 = x2 c + x1 s. Eagerly, and as Inductor compiles it, that is several
passes over q and k through transposed views (the tables are (B, heads, T, head_dim / 2)). Here a
program takes one token's row of q or of k (one launch for both), reads it and the token's table
rows once (q's and k's programs of one token side by side where they share the tables, so the second
reads them from L2), computes in fp32 and writes once: in the dtype LTX-2's ops would give (q's, promoted with
the tables'), or, given scales, in float8_e4m3fn (x / scale, clamped to 448) for cuDNN's fp8
attention (`runtime.dense_attention.QKBound`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.adaln import Refused, row_warps
from kernels.na3d_triton import interpreting
from kernels.scale_cast import to_e4m3

__all__ = ["Refused", "check", "norm_rope_torch", "out_dtype", "qk_norm_rope"]


@triton.jit
def _row(X, W, COS, SIN, OUT, SCALE, row, T, eps, sb, sh, st, H: tl.constexpr, HD2: tl.constexpr,
         ROPE: tl.constexpr, FP8: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr):
    h = tl.arange(0, BLOCK_H)[:, None]
    j = tl.arange(0, BLOCK_J)[None, :]
    m = (h < H) & (j < HD2)
    d = h * (2 * HD2) + j  # the first half of head h; the second is HD2 further
    base = row.to(tl.int64) * (H * 2 * HD2)
    x1 = tl.load(X + base + d, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(X + base + d + HD2, mask=m, other=0.0).to(tl.float32)
    inv = tl.rsqrt((tl.sum(tl.sum(x1 * x1, 1), 0) + tl.sum(tl.sum(x2 * x2, 1), 0)) / (H * 2 * HD2) + eps)
    y1 = x1 * inv * tl.load(W + d, mask=m, other=0.0).to(tl.float32)
    y2 = x2 * inv * tl.load(W + d + HD2, mask=m, other=0.0).to(tl.float32)
    if ROPE:
        b = row // T
        t = row % T
        table = b.to(tl.int64) * sb + t.to(tl.int64) * st + h * sh + j
        c = tl.load(COS + table, mask=m, other=0.0).to(tl.float32)
        s = tl.load(SIN + table, mask=m, other=0.0).to(tl.float32)
        y1, y2 = y1 * c - y2 * s, y2 * c + y1 * s
    if FP8:
        inv_scale = 1.0 / tl.load(SCALE)
        y1 = tl.clamp(y1 * inv_scale, -448.0, 448.0)
        y2 = tl.clamp(y2 * inv_scale, -448.0, 448.0)
    tl.store(OUT + base + d, y1.to(OUT.dtype.element_ty), mask=m)
    tl.store(OUT + base + d + HD2, y2.to(OUT.dtype.element_ty), mask=m)


@triton.jit
def _qk(Q, K, WQ, WK, QCOS, QSIN, KCOS, KSIN, QOUT, KOUT, SCALES, ROWS_Q, TQ, TK, eps,
        qsb, qsh, qst, ksb, ksh, kst, H: tl.constexpr, HD2: tl.constexpr, ROPE: tl.constexpr,
        FP8: tl.constexpr, SHARED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_J: tl.constexpr):
    pid = tl.program_id(0)
    if SHARED:  # q and k of one token side by side: the second reads the token's table rows from L2
        if pid % 2 == 0:
            _row(Q, WQ, QCOS, QSIN, QOUT, SCALES, pid // 2, TQ, eps, qsb, qsh, qst, H, HD2, ROPE, FP8, BLOCK_H,
                 BLOCK_J)
        else:
            _row(K, WK, KCOS, KSIN, KOUT, SCALES + 1, pid // 2, TK, eps, ksb, ksh, kst, H, HD2, ROPE, FP8,
                 BLOCK_H, BLOCK_J)
    elif pid < ROWS_Q:
        _row(Q, WQ, QCOS, QSIN, QOUT, SCALES, pid, TQ, eps, qsb, qsh, qst, H, HD2, ROPE, FP8, BLOCK_H, BLOCK_J)
    else:
        _row(K, WK, KCOS, KSIN, KOUT, SCALES + 1, pid - ROWS_Q, TK, eps, ksb, ksh, kst, H, HD2, ROPE, FP8,
             BLOCK_H, BLOCK_J)


def _table_strides(t: torch.Tensor, pe: tuple | None, heads: int, half: int, name: str) -> tuple[int, int, int]:
    """(batch, head, token) strides of a (B or 1, heads, T, half) cos/sin table pair, checked."""
    if pe is None:
        return 0, 0, 0
    cos, sin = pe
    b, tokens = t.shape[0], t.shape[1]
    if cos.dim() != 4 or cos.shape != sin.shape or cos.stride() != sin.stride():
        raise Refused(f"{name}: the RoPE tables must be a (cos, sin) pair of one 4-dim shape and layout")
    if cos.shape[0] not in (1, b) or tuple(cos.shape[1:]) != (heads, tokens, half) or cos.stride(-1) != 1:
        raise Refused(f"{name}: RoPE tables of shape {tuple(cos.shape)} do not fit {tuple(t.shape)} as "
                      f"({b} or 1, {heads}, {tokens}, {half}) with a contiguous last dimension")
    if cos.device != t.device or not cos.is_floating_point():
        raise Refused(f"{name}: the RoPE tables must be float tensors on {t.device}")
    return (cos.stride(0) if cos.shape[0] > 1 else 0), cos.stride(1), cos.stride(2)


def check(q: torch.Tensor, k: torch.Tensor, wq: torch.Tensor | None, wk: torch.Tensor | None, heads: int,
          pe: tuple | None, k_pe: tuple | None) -> tuple:
    """Check the arguments up front; returns (half head_dim, q's table strides, k's table strides)."""
    for name, t in (("q", q), ("k", k)):
        if t.dim() != 3 or not t.is_contiguous() or t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise Refused(f"{name} must be a contiguous (batch, tokens, heads * head_dim) float tensor, got "
                          f"{tuple(t.shape)} {t.dtype}{'' if t.is_contiguous() else ', not contiguous'}")
    dim = q.shape[-1]
    if k.shape[-1] != dim or q.shape[0] != k.shape[0] or k.device != q.device or k.dtype != q.dtype:
        raise Refused(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share batch, dim, dtype and device")
    if heads < 1 or dim % (2 * heads):
        raise Refused(f"dim {dim} is not heads ({heads}) x an even head_dim")
    for name, w in (("q_norm", wq), ("k_norm", wk)):
        if w is not None and (w.shape != (dim,) or w.device != q.device):
            raise Refused(f"{name}'s weight must be ({dim},) on {q.device}, got {tuple(w.shape)}")
    half = dim // heads // 2
    k_table = None if pe is None else pe if k_pe is None else k_pe  # LTX-2 rotates k only when q is rotated
    return half, _table_strides(q, pe, heads, half, "pe"), _table_strides(k, k_table, heads, half, "k_pe")


def norm_rope_torch(t: torch.Tensor, w: torch.Tensor | None, eps: float, pe: tuple | None, heads: int,
                    out_dtype: torch.dtype) -> torch.Tensor:
    """One tensor's RMSNorm (over its last dim) and SPLIT RoPE in fp32 in torch, rounded once (any device)."""
    x = t.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.float()
    if pe is not None:
        b, n, dim = t.shape
        y = y.view(b, n, heads, 2, dim // heads // 2)
        cos, sin = (p.float().transpose(1, 2)[:, :, :, None, :] for p in pe)  # (B, T, H, 1, half)
        y1, y2 = y[..., 0:1, :], y[..., 1:2, :]
        y = torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin], dim=3).view(b, n, dim)
    return y.to(out_dtype)


def out_dtype(q: torch.Tensor, pe: tuple | None) -> torch.dtype:
    """The dtype LTX-2's own ops give: q's, promoted with the RoPE tables'."""
    return q.dtype if pe is None else torch.promote_types(q.dtype, pe[0].dtype)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, wq: torch.Tensor | None, wk: torch.Tensor | None, eps: float,
                 heads: int, pe: tuple | None = None, k_pe: tuple | None = None,
                 scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q', k'): q and k (B, T, heads * head_dim) RMS-normalised with weights `wq`, `wk` (None: 1) and, with
    `pe` = (cos, sin) tables (B or 1, heads, T, head_dim / 2) (`k_pe` for k, else `pe`; without `pe` neither
    is rotated, as in LTX-2), rotated as LTX-2's SPLIT RoPE; with `scales` (2 fp32 on the device), q' / scales[0] and k' / scales[1] in float8_e4m3fn.
    One launch on CUDA or under the Triton interpreter, else torch ops."""
    half, (qsb, qsh, qst), (ksb, ksh, kst) = check(q, k, wq, wk, heads, pe, k_pe)
    rope = pe is not None
    dtype = torch.float8_e4m3fn if scales is not None else out_dtype(q, pe)
    if scales is not None and (scales.shape != (2,) or scales.dtype != torch.float32 or scales.device != q.device):
        raise Refused(f"scales must be 2 fp32 on {q.device}, got {tuple(scales.shape)} {scales.dtype}")
    kpe = None if pe is None else pe if k_pe is None else k_pe
    if not (q.is_cuda or interpreting()):
        outs = [norm_rope_torch(t, w, eps, p, heads, torch.float32 if scales is not None else dtype)
                for t, w, p in ((q, wq, pe), (k, wk, kpe))]
        if scales is not None:
            outs = [to_e4m3(o, s) for o, s in zip(outs, scales)]
        return outs[0], outs[1]
    qo, ko = torch.empty(q.shape, dtype=dtype, device=q.device), torch.empty(k.shape, dtype=dtype, device=q.device)
    rows_q, rows_k = q.shape[0] * q.shape[1], k.shape[0] * k.shape[1]
    ones = q.new_ones(q.shape[-1]) if wq is None or wk is None else None
    wq, wk = (ones if w is None else w for w in (wq, wk))
    qcos, qsin = pe if rope else (q, q)
    kcos, ksin = kpe if rope else (k, k)
    if rows_q + rows_k:
        _qk[(rows_q + rows_k,)](q, k, wq, wk, qcos, qsin, kcos, ksin, qo, ko, q if scales is None else scales,
                                rows_q, q.shape[1], k.shape[1], float(eps), qsb, qsh, qst, ksb, ksh, kst,
                                H=heads, HD2=half, ROPE=rope, FP8=scales is not None,
                                SHARED=rope and rows_q == rows_k and kpe is pe,
                                BLOCK_H=triton.next_power_of_2(heads), BLOCK_J=triton.next_power_of_2(half),
                                num_warps=row_warps(q.shape[-1]))
    return qo, ko
