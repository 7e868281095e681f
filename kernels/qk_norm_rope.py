"""Per-head RMSNorm + absolute 3-axis RoPE of q and k, read from one fused QKV projection.

Input `qkv` is (..., 3 * C) with C = heads * head_dim: q, k, v side by side per token, tokens
ordered (B, T, H, W). For q and k of each head: x / rms(x) * weight (eps inside the root), q
also times `q_scale`; then the head_dim is split into (d_t, d_h, d_w) chunks and each adjacent
pair (2i, 2i+1) of a chunk is rotated by the angle pos * inv[i] of its axis: the token's t index,
h index, or `w_pos[w]` (a W slab's global column). v is untouched (a view of `qkv`).

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
def _qk_norm_rope(QKV, Q, K, NW, COS, SIN, N, T, H, W, q_scale, eps,
                  C: tl.constexpr, HD: tl.constexpr, BLOCK_HD: tl.constexpr, DT2: tl.constexpr,
                  DH2: tl.constexpr, BLOCK_N: tl.constexpr):
    head = tl.program_id(1)
    which = tl.program_id(2)  # 0: q, 1: k
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_HD)
    mask = (rows < N)[:, None] & (d < HD)[None, :]
    # whole head rows, contiguous; pairs (2i, 2i+1) are split apart in registers
    x = tl.load(QKV + rows[:, None] * (3 * C) + which * C + head * HD + d[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
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
    head_dim = qkv.shape[-1] // (3 * heads)
    if sum(split) != head_dim or any(d % 2 for d in split):
        raise ValueError(f"rope split {split} must be even and sum to head_dim {head_dim}")
    if norm_weight.shape != (2, head_dim):
        raise ValueError(f"norm_weight must be (2, {head_dim}) (q's and k's), got {tuple(norm_weight.shape)}")
    t, h, w = thw
    tokens = qkv.numel() // qkv.shape[-1]
    if min(t, h, w) < 1 or tokens % (t * h * w):
        raise ValueError(f"{tokens} tokens are not a whole number of (T, H, W) = {thw} volumes")
    if cos.shape != (t + h + w, head_dim // 2) or sin.shape != cos.shape:
        raise ValueError(f"cos/sin tables must be ({t + h + w}, {head_dim // 2}), got {tuple(cos.shape)}, "
                         f"{tuple(sin.shape)}")
    if not qkv.is_contiguous():
        raise ValueError("qkv must be contiguous (the output of one projection)")
    return head_dim


def qk_norm_rope_torch(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                       sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                       q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The same in torch ops (any device): (q, k), each (..., heads, head_dim), contiguous."""
    head_dim = check_qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split)
    t, h, w = thw
    lead = qkv.shape[:-1]
    x = qkv.reshape(-1, t, h, w, 3, heads, head_dim)[..., :2, :, :].float()
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
    out = torch.stack([xe * c - xo * s, xe * s + xo * c], dim=-1).flatten(-2).to(qkv.dtype)
    return (out[..., 0, :, :].reshape(*lead, heads, head_dim).contiguous(),
            out[..., 1, :, :].reshape(*lead, heads, head_dim).contiguous())


def qk_norm_rope(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 thw: tuple[int, int, int], split: tuple[int, int, int], q_scale: float = 1.0,
                 eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel on CUDA (or under the Triton interpreter), else the torch ops."""
    run = qk_norm_rope_triton if qkv.is_cuda or interpreting() else qk_norm_rope_torch
    return run(qkv, heads, norm_weight, cos, sin, thw, split, q_scale, eps)


def qk_norm_rope_triton(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, thw: tuple[int, int, int], split: tuple[int, int, int],
                        q_scale: float = 1.0, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel (CUDA, or the Triton interpreter): (q, k), each (..., heads, head_dim)."""
    head_dim = check_qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split)
    c = heads * head_dim
    n = qkv.numel() // qkv.shape[-1]
    q, k = (torch.empty((*qkv.shape[:-1], heads, head_dim), device=qkv.device, dtype=qkv.dtype) for _ in "qk")
    grid = (triton.cdiv(n, BLOCK_N), heads, 2)
    _qk_norm_rope[grid](qkv, q, k, norm_weight.float().contiguous(), cos.float().contiguous(),
                        sin.float().contiguous(), n, *thw, float(q_scale), float(eps), C=c, HD=head_dim,
                        BLOCK_HD=max(2, triton.next_power_of_2(head_dim)), DT2=split[0] // 2,
                        DH2=split[1] // 2, BLOCK_N=BLOCK_N, num_warps=4)
    return q, k
