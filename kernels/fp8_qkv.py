"""`quantize_qkv(q, k, v, p_scale, o_headroom)`: q, k and v to float8_e4m3fn with one scale per tensor
(s = amax(|t|) / 448), and the scalars cuDNN's fp8 attention reads, in two launches.

`_amax3` reduces all three tensors at once (a block's max, then an atomic max into its tensor's
slot); `_cast3` divides each by its scale and casts, and its first program writes the scalars:
the descales of q, k, v (their scales), of the softmax probabilities (1 / p_scale) and their scale
(p_scale), O's scale 1 / (o_headroom * s_v) and O's descale o_headroom * s_v. Before this, each
call made ~25 small launches (a reduction, scalar arithmetic and a cast per tensor, constants,
the output scale): at 6144 tokens ~2,900 of a DiT forward's ~6,900 kernels, each a few
microseconds of GPU time even inside a CUDA graph. The scalars sit `STRIDE` floats apart (16-byte
aligned one-element views). No host sync anywhere: CUDA graphs capture it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

STRIDE = 4  # floats between two scalars
Q, K, V, DESCALE_S, SCALE_S, SCALE_O, DESCALE_O = range(7)  # the scalars' slots
SIZE = 7 * STRIDE  # floats in `quantize_qkv`'s scalars
BLOCK = 4096


@triton.jit
def _amax_block(X, AMAX, N, b, BLOCK: tl.constexpr):
    offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < N, other=0.0).to(tl.float32)
    tl.atomic_max(AMAX, tl.max(tl.abs(x), 0))


@triton.jit
def _amax3(Qp, Kp, Vp, AMAX, NQ, NK, NV, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bq = tl.cdiv(NQ, BLOCK)
    bk = tl.cdiv(NK, BLOCK)
    if pid < bq:
        _amax_block(Qp, AMAX, NQ, pid, BLOCK)
    elif pid < bq + bk:
        _amax_block(Kp, AMAX + 1, NK, pid - bq, BLOCK)
    else:
        _amax_block(Vp, AMAX + 2, NV, pid - bq - bk, BLOCK)


@triton.jit
def _scale_of(AMAX):
    return tl.maximum(tl.load(AMAX), 1e-12) / 448.0  # float8_e4m3fn's largest value (int8_gemm.FP8_MAX)


@triton.jit
def _cast_block(X, Y, AMAX, N, b, BLOCK: tl.constexpr):
    offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x / _scale_of(AMAX)).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _cast3(Qp, Kp, Vp, Q8, K8, V8, AMAX, S, NQ, NK, NV, P_SCALE, O_HEADROOM, STRIDE: tl.constexpr,
           BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bq = tl.cdiv(NQ, BLOCK)
    bk = tl.cdiv(NK, BLOCK)
    if pid < bq:
        _cast_block(Qp, Q8, AMAX, NQ, pid, BLOCK)
    elif pid < bq + bk:
        _cast_block(Kp, K8, AMAX + 1, NK, pid - bq, BLOCK)
    else:
        _cast_block(Vp, V8, AMAX + 2, NV, pid - bq - bk, BLOCK)
    if pid == 0:
        sv = _scale_of(AMAX + 2)
        tl.store(S, _scale_of(AMAX))
        tl.store(S + STRIDE, _scale_of(AMAX + 1))
        tl.store(S + 2 * STRIDE, sv)
        tl.store(S + 3 * STRIDE, 1.0 / P_SCALE)
        tl.store(S + 4 * STRIDE, P_SCALE)
        tl.store(S + 5 * STRIDE, 1.0 / (O_HEADROOM * sv))
        tl.store(S + 6 * STRIDE, O_HEADROOM * sv)


def scalar(scalars: torch.Tensor, slot: int) -> torch.Tensor:
    """One scalar of `quantize_qkv`'s output as the (1, 1, 1, 1) fp32 tensor cuDNN takes."""
    return scalars[slot * STRIDE:slot * STRIDE + 1].view(1, 1, 1, 1)


def quantize_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p_scale: float,
                 o_headroom: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q8, k8, v8, scalars): each tensor / its scale as float8_e4m3fn, contiguous, same shape; the
    scalars' slots (`scalar(scalars, Q)` ...) as the module docstring lists them."""
    if not all(t.dtype in (torch.bfloat16, torch.float16, torch.float32) for t in (q, k, v)):
        raise TypeError(f"q, k, v must be float tensors (got {q.dtype}, {k.dtype}, {v.dtype})")
    if len({t.device for t in (q, k, v)}) != 1:
        raise ValueError(f"q, k, v must be on one device (got {q.device}, {k.device}, {v.device})")
    q, k, v = (t.contiguous() for t in (q, k, v))
    amax = torch.zeros(3, dtype=torch.float32, device=q.device)
    scalars = torch.empty(SIZE, dtype=torch.float32, device=q.device)
    out = [torch.empty(t.shape, dtype=torch.float8_e4m3fn, device=t.device) for t in (q, k, v)]
    sizes = [t.numel() for t in (q, k, v)]
    grid = (sum(triton.cdiv(n, BLOCK) for n in sizes),)
    _amax3[grid](q, k, v, amax, *sizes, BLOCK=BLOCK, num_warps=8)
    _cast3[grid](q, k, v, *out, amax, scalars, *sizes, float(p_scale), float(o_headroom), STRIDE=STRIDE,
                 BLOCK=BLOCK, num_warps=8)
    return (*out, scalars)
