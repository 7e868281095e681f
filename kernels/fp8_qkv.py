"""`quantize_qkv(q, k, v, p_scale, o_headroom)`: q, k and v to float8_e4m3fn with one scale per tensor
(s = amax(|t|) / 448), and the scalars cuDNN's fp8 attention reads, in two launches.

`_amax3` reduces all three tensors at once (a block's max, then an atomic max into its tensor's
slot); `_cast3` divides each by its scale and casts, and its first program writes the scalars:
the descales of q, k, v (their scales), of the softmax probabilities (1 / p_scale) and their scale
(p_scale), O's scale 1 / (o_headroom * s_v) and O's descale o_headroom * s_v. With `rows`, O's
descale is also written once per row of O (the row scales an fp8 GEMM takes O with, unquantized).
With `qk_descale`, q's and k's scales are given (a static bound the caller knows: no reduction over
them), and q and k may come in e4m3 already, cast with them; with `v_descale`, v comes in e4m3 with
that scale (`runtime.v_e4m3`: its GEMM wrote it so), and nothing is reduced or cast. Before this, each
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
# Blocks a reducing program takes (one atomic max each): at 6144 x 4096 elements of v, 11.5 us against
# 16.2 with one block a program, the atomics on one address serialized (H200, RESULTS eleventh round).
AMAX_ITER = 8


@triton.jit
def _amax_block(X, AMAX, N, b, BLOCK: tl.constexpr, ITER: tl.constexpr):
    """The max |x| of ITER blocks from block b * ITER on, one atomic max."""
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(ITER):
        offs = (b.to(tl.int64) * ITER + i) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.maximum(acc, tl.abs(tl.load(X + offs, mask=offs < N, other=0.0).to(tl.float32)))
    tl.atomic_max(AMAX, tl.max(acc, 0))


@triton.jit
def _amax3(Qp, Kp, Vp, AMAX, NQ, NK, NV, BLOCK: tl.constexpr, ITER: tl.constexpr):
    pid = tl.program_id(0)
    bq = tl.cdiv(NQ, BLOCK * ITER)
    bk = tl.cdiv(NK, BLOCK * ITER)
    if pid < bq:
        _amax_block(Qp, AMAX, NQ, pid, BLOCK, ITER)
    elif pid < bq + bk:
        _amax_block(Kp, AMAX + 1, NK, pid - bq, BLOCK, ITER)
    else:
        _amax_block(Vp, AMAX + 2, NV, pid - bq - bk, BLOCK, ITER)


@triton.jit
def _scale_of(AMAX):
    return tl.maximum(tl.load(AMAX), 1e-12) / 448.0  # float8_e4m3fn's largest value (int8_gemm.FP8_MAX)


@triton.jit
def _cast_block(X, Y, s, N, b, BLOCK: tl.constexpr):
    offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + offs, tl.clamp(x / s, -448.0, 448.0).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _cast3(Qp, Kp, Vp, Q8, K8, V8, AMAX, QK, VS, S, R, NQ, NK, NV, NR, P_SCALE, O_HEADROOM, STATIC: tl.constexpr,
           V_GIVEN: tl.constexpr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bq = tl.cdiv(NQ, BLOCK)
    bk = tl.cdiv(NK, BLOCK)
    if STATIC:  # q's and k's scales given, not reduced
        sq, sk = tl.load(QK), tl.load(QK + 1)
    else:
        sq, sk = _scale_of(AMAX), _scale_of(AMAX + 1)
    if V_GIVEN:  # v's scale given, v already e4m3
        sv = tl.load(VS)
    else:
        sv = _scale_of(AMAX + 2)
    if pid < bq:
        _cast_block(Qp, Q8, sq, NQ, pid, BLOCK)
    elif pid < bq + bk:
        _cast_block(Kp, K8, sk, NK, pid - bq, BLOCK)
    elif pid < bq + bk + tl.cdiv(NV, BLOCK):
        _cast_block(Vp, V8, sv, NV, pid - bq - bk, BLOCK)
    if pid < tl.cdiv(NR, BLOCK):  # O's descale for each of its rows
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(R + offs, tl.zeros([BLOCK], tl.float32) + O_HEADROOM * sv, mask=offs < NR)
    if pid == 0:
        tl.store(S, sq)
        tl.store(S + STRIDE, sk)
        tl.store(S + 2 * STRIDE, sv)
        tl.store(S + 3 * STRIDE, 1.0 / P_SCALE)
        tl.store(S + 4 * STRIDE, P_SCALE)
        tl.store(S + 5 * STRIDE, 1.0 / (O_HEADROOM * sv))
        tl.store(S + 6 * STRIDE, O_HEADROOM * sv)


def scalar(scalars: torch.Tensor, slot: int) -> torch.Tensor:
    """One scalar of `quantize_qkv`'s output as the (1, 1, 1, 1) fp32 tensor cuDNN takes."""
    return scalars[slot * STRIDE:slot * STRIDE + 1].view(1, 1, 1, 1)


FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def quantize_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p_scale: float, o_headroom: float,
                 rows: int = 0, qk_descale: torch.Tensor | None = None, v_descale: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q8, k8, v8, scalars, row_descale): each tensor / its scale as float8_e4m3fn, contiguous, same
    shape; the scalars' slots (`scalar(scalars, Q)` ...) as the module docstring lists them; O's
    descale repeated `rows` times (fp32). With `qk_descale` (2 fp32 on the device) q and k have
    those scales: given in float8_e4m3fn they come back as they are. With `v_descale` ((1,) fp32)
    v is float8_e4m3fn by that scale and comes back as it is."""
    static = qk_descale is not None
    qk8 = static and q.dtype == torch.float8_e4m3fn
    v8 = v_descale is not None
    qk_types = (torch.float8_e4m3fn,) if qk8 else FLOATS
    if (q.dtype not in qk_types or k.dtype not in qk_types
            or v.dtype not in ((torch.float8_e4m3fn,) if v8 else FLOATS)):
        raise TypeError(f"q, k and v must be float tensors, q and k in float8_e4m3fn only with qk_descale, "
                        f"v only with v_descale (got {q.dtype}, {k.dtype}, {v.dtype})")
    if len({t.device for t in (q, k, v)}) != 1:
        raise ValueError(f"q, k, v must be on one device (got {q.device}, {k.device}, {v.device})")
    q, k, v = (t.contiguous() for t in (q, k, v))
    device = q.device
    if static and (qk_descale.shape != (2,) or qk_descale.dtype != torch.float32 or qk_descale.device != device):
        raise ValueError(f"qk_descale must be 2 fp32 on {device} (got {tuple(qk_descale.shape)} "
                         f"{qk_descale.dtype} on {qk_descale.device})")
    if v8 and (v_descale.shape != (1,) or v_descale.dtype != torch.float32 or v_descale.device != device):
        raise ValueError(f"v_descale must be 1 fp32 on {device} (got {tuple(v_descale.shape)} "
                         f"{v_descale.dtype} on {v_descale.device})")
    e4m3 = [t if qk8 else torch.empty(t.shape, dtype=torch.float8_e4m3fn, device=device) for t in (q, k)]
    out = [*e4m3, v if v8 else torch.empty(v.shape, dtype=torch.float8_e4m3fn, device=device)]
    cast = [0 if qk8 else q.numel(), 0 if qk8 else k.numel(), 0 if v8 else v.numel()]
    reduce = [0, 0, cast[2]] if static else cast
    scalars = torch.empty(SIZE, dtype=torch.float32, device=device)
    row_descale = torch.empty(rows, dtype=torch.float32, device=device)
    blocks = [sum(triton.cdiv(n, BLOCK * it) for n in sizes) for sizes, it in ((reduce, AMAX_ITER), (cast, 1))]
    if static and v8:  # every scale given: no memset, no reduction
        amax = scalars
    else:
        amax = torch.zeros(3, dtype=torch.float32, device=device)
        _amax3[(max(blocks[0], 1),)](q, k, v, amax, *reduce, BLOCK=BLOCK, ITER=AMAX_ITER, num_warps=8)
    _cast3[(max(blocks[1], triton.cdiv(rows, BLOCK), 1),)](
        q, k, v, *out, amax, qk_descale if static else amax, v_descale if v8 else amax, scalars,
        row_descale if rows else amax, *cast, rows, float(p_scale), float(o_headroom), STATIC=static, V_GIVEN=v8,
        STRIDE=STRIDE, BLOCK=BLOCK, num_warps=8)
    return (*out, scalars, row_descale)
