"""Per-head RMSNorm + absolute 3-axis RoPE of q and k, read from one fused QKV projection or
from q and k apart.

Input `qkv` is (..., 3 * C) with C = heads * head_dim: q, k, v side by side per token, tokens
ordered (B, T, H, W); or (`qk_norm_rope_split`) q and k as two tensors (..., heads, head_dim).
For q and k of each head: x / rms(x) * weight (eps inside the root), q also times `q_scale`;
then the head_dim is split into (d_t, d_h, d_w) chunks and each adjacent pair (2i, 2i+1) of a
chunk is rotated by the angle pos * inv[i] of its axis: the token's t index, h index, or
`w_pos[w]` (a W slab's global column). v is untouched (a view of `qkv`).

The angles' cos/sin come in as one table per call (`rope_tables`): row t for the T axis, T + h
for H, T + H + w for W, a column per pair. One program loads BLOCK_N whole head rows of q or k
(contiguous), normalises and rotates them in fp32, and writes bf16/fp16/fp32 once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.na3d_triton import interpreting

EPS = 1e-6
BLOCK_N = 32


@triton.jit
def _qk_norm_rope(Q_IN, K_IN, Q, K, NW, COS, SIN, N, T, H, W, q_scale, eps,
                  C: tl.constexpr, IN_STRIDE: tl.constexpr, HD: tl.constexpr, BLOCK_HD: tl.constexpr,
                  DT2: tl.constexpr, DH2: tl.constexpr, BLOCK_N: tl.constexpr):
    head = tl.program_id(1)
    which = tl.program_id(2)  # 0: q, 1: k
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_HD)
    mask = (rows < N)[:, None] & (d < HD)[None, :]
    # whole head rows, contiguous; pairs (2i, 2i+1) are split apart in registers
    src = rows[:, None] * IN_STRIDE + head * HD + d[None, :]
    if which == 0:
        x = tl.load(Q_IN + src, mask=mask, other=0.0).to(tl.float32)
    else:
        x = tl.load(K_IN + src, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, 1) / HD + eps) * tl.where(which == 0, q_scale, 1.0)
    weight = tl.load(NW + which * HD + d, mask=d < HD, other=0.0).to(tl.float32)
    x = x * inv_rms[:, None] * weight[None, :]
    xe, xo = tl.split(tl.reshape(x, (BLOCK_N, BLOCK_HD // 2, 2)))
    p = tl.arange(0, BLOCK_HD // 2)
    half_mask = (rows < N)[:, None] & (p < HD // 2)[None, :]
    w = rows % W
    h = (rows // W) % H
    t = (rows // (W * H)) % T
    table_row = tl.where(p[None, :] < DT2, t[:, None],
                         tl.where(p[None, :] < DT2 + DH2, T + h[:, None], T + H + w[:, None]))
    c = tl.load(COS + table_row * (HD // 2) + p[None, :], mask=half_mask, other=0.0)
    s = tl.load(SIN + table_row * (HD // 2) + p[None, :], mask=half_mask, other=0.0)
    out = tl.interleave(xe * c - xo * s, xe * s + xo * c).to(Q.dtype.element_ty)
    offset = rows[:, None] * C + head * HD + d[None, :]
    if which == 0:
        tl.store(Q + offset, out, mask=mask)
    else:
        tl.store(K + offset, out, mask=mask)


def rope_tables(t: int, h: int, w_pos: torch.Tensor, inv_t: torch.Tensor, inv_h: torch.Tensor,
                inv_w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), fp32, shape (t + h + len(w_pos), pairs): the angle of each axis position and pair."""
    device = w_pos.device
    inv_t, inv_h, inv_w = (x.to(device=device, dtype=torch.float32) for x in (inv_t, inv_h, inv_w))
    pos = (torch.arange(t, device=device, dtype=torch.float32), torch.arange(h, device=device, dtype=torch.float32),
           w_pos.to(torch.float32))
    blocks = []
    before = 0
    half = inv_t.numel() + inv_h.numel() + inv_w.numel()
    for axis_pos, inv in zip(pos, (inv_t, inv_h, inv_w)):
        ang = axis_pos[:, None] * inv[None, :]
        blocks.append(torch.nn.functional.pad(ang, (before, half - before - inv.numel())))
        before += inv.numel()
    ang = torch.cat(blocks)
    return ang.cos(), ang.sin()


def check_qk_norm_rope(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int]) -> int:
    """Validate the arguments up front; returns head_dim."""
    if qkv.dim() < 2 or qkv.shape[-1] % (3 * heads):
        raise ValueError(f"qkv must be (..., 3 * heads * head_dim) with heads={heads}, got {tuple(qkv.shape)}")
    if not qkv.is_contiguous():
        raise ValueError("qkv must be contiguous (the output of one projection)")
    head_dim = qkv.shape[-1] // (3 * heads)
    _check_rest(qkv.numel() // qkv.shape[-1], head_dim, norm_weight, cos, sin, thw, split)
    return head_dim


def check_qk_norm_rope_split(q: torch.Tensor, k: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor,
                             sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int]) -> int:
    """Validate the arguments of the two-tensor form up front; returns head_dim."""
    if q.dim() < 3 or q.shape != k.shape or q.dtype != k.dtype:
        raise ValueError(f"q and k must be (..., heads, head_dim) of one shape and dtype, got {tuple(q.shape)} "
                         f"{q.dtype} and {tuple(k.shape)} {k.dtype}")
    if not (q.is_contiguous() and k.is_contiguous()):
        raise ValueError("q and k must be contiguous")
    head_dim = q.shape[-1]
    _check_rest(q.numel() // (q.shape[-2] * head_dim), head_dim, norm_weight, cos, sin, thw, split)
    return head_dim


def _check_rest(tokens: int, head_dim: int, norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                thw: tuple[int, int, int], split: tuple[int, int, int]) -> None:
    if sum(split) != head_dim or any(d % 2 for d in split):
        raise ValueError(f"rope split {split} must be even and sum to head_dim {head_dim}")
    if norm_weight.shape != (2, head_dim):
        raise ValueError(f"norm_weight must be (2, {head_dim}) (q's and k's), got {tuple(norm_weight.shape)}")
    t, h, w = thw
    if min(t, h, w) < 1 or tokens % (t * h * w):
        raise ValueError(f"{tokens} tokens are not a whole number of (T, H, W) = {thw} volumes")
    if cos.shape != (t + h + w, head_dim // 2) or sin.shape != cos.shape:
        raise ValueError(f"cos/sin tables must be ({t + h + w}, {head_dim // 2}), got {tuple(cos.shape)}, "
                         f"{tuple(sin.shape)}")


def _norm_rope_torch(x: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     thw: tuple[int, int, int], split: tuple[int, int, int], q_scale: float, eps: float,
                     dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k stacked as x (volumes, T, H, W, 2, heads, head_dim): both normed and rotated, in `dtype`."""
    t, h, w = thw
    head_dim = x.shape[-1]
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x = x * norm_weight.float()[:, None, :] * torch.tensor([q_scale, 1.0], device=x.device)[:, None, None]
    pairs = x.unflatten(-1, (-1, 2))
    dt2, dh2 = split[0] // 2, split[1] // 2
    col = torch.arange(head_dim // 2, device=x.device)
    ti, hi, wi = (torch.arange(n, device=x.device) for n in thw)
    row = torch.where(col < dt2, ti[:, None, None, None],
                      torch.where(col < dt2 + dh2, t + hi[None, :, None, None], t + h + wi[None, None, :, None]))
    c, s = cos.float()[row, col], sin.float()[row, col]  # (t, h, w, pairs)
    c, s = c[:, :, :, None, None, :], s[:, :, :, None, None, :]
    xe, xo = pairs[..., 0], pairs[..., 1]
    out = torch.stack([xe * c - xo * s, xe * s + xo * c], dim=-1).flatten(-2).to(dtype)
    return out[..., 0, :, :], out[..., 1, :, :]


def qk_norm_rope_torch(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                       q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The same in torch ops (any device): (q, k), each (..., heads, head_dim), contiguous."""
    head_dim = check_qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split)
    x = qkv.reshape(-1, *thw, 3, heads, head_dim)[..., :2, :, :]
    q, k = _norm_rope_torch(x, norm_weight, cos, sin, thw, split, q_scale, eps, qkv.dtype)
    lead = qkv.shape[:-1]
    return q.reshape(*lead, heads, head_dim).contiguous(), k.reshape(*lead, heads, head_dim).contiguous()


def qk_norm_rope_split_torch(q: torch.Tensor, k: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor,
                             sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                             q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """`qk_norm_rope_torch` for q and k given apart, each (..., heads, head_dim)."""
    check_qk_norm_rope_split(q, k, norm_weight, cos, sin, thw, split)
    heads, head_dim = q.shape[-2:]
    x = torch.stack([q.reshape(-1, *thw, heads, head_dim), k.reshape(-1, *thw, heads, head_dim)], dim=-3)
    q2, k2 = _norm_rope_torch(x, norm_weight, cos, sin, thw, split, q_scale, eps, q.dtype)
    return q2.reshape(q.shape).contiguous(), k2.reshape(k.shape).contiguous()


def qk_norm_rope(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 thw: tuple[int, int, int], split: tuple[int, int, int], q_scale: float = 1.0,
                 eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel on CUDA (or under the Triton interpreter), else the torch ops."""
    run = qk_norm_rope_triton if qkv.is_cuda or interpreting() else qk_norm_rope_torch
    return run(qkv, heads, norm_weight, cos, sin, thw, split, q_scale, eps)


def qk_norm_rope_split(q: torch.Tensor, k: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                       q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """`qk_norm_rope` for q and k given apart: the fused kernel on CUDA (or under the Triton
    interpreter), else the torch ops."""
    run = qk_norm_rope_split_triton if q.is_cuda or interpreting() else qk_norm_rope_split_torch
    return run(q, k, norm_weight, cos, sin, thw, split, q_scale, eps)


def qk_norm_rope_triton(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                        q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel (CUDA, or the Triton interpreter): (q, k), each (..., heads, head_dim)."""
    head_dim = check_qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split)
    c = heads * head_dim
    return _launch(qkv, qkv[..., c:], 3 * c, qkv.shape[:-1], heads, head_dim, norm_weight, cos, sin, thw, split,
                   q_scale, eps)


def qk_norm_rope_split_triton(q: torch.Tensor, k: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor,
                              sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                              q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel for q and k given apart (CUDA, or the Triton interpreter)."""
    head_dim = check_qk_norm_rope_split(q, k, norm_weight, cos, sin, thw, split)
    heads = q.shape[-2]
    return _launch(q, k, heads * head_dim, q.shape[:-2], heads, head_dim, norm_weight, cos, sin, thw, split,
                   q_scale, eps)


def _launch(q_in, k_in, in_stride, lead, heads, head_dim, norm_weight, cos, sin, thw, split, q_scale, eps):
    n = lead.numel()
    q, k = (torch.empty((*lead, heads, head_dim), device=q_in.device, dtype=q_in.dtype) for _ in "qk")
    grid = (triton.cdiv(n, BLOCK_N), heads, 2)
    _qk_norm_rope[grid](q_in, k_in, q, k, norm_weight.float().contiguous(), cos.float().contiguous(),
                        sin.float().contiguous(), n, *thw, float(q_scale), float(eps), C=heads * head_dim,
                        IN_STRIDE=in_stride, HD=head_dim, BLOCK_HD=max(2, triton.next_power_of_2(head_dim)),
                        DT2=split[0] // 2, DH2=split[1] // 2, BLOCK_N=BLOCK_N, num_warps=4)
    return q, k
