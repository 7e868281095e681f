"""fp8 GEMMs whose epilogue does the pass that would follow them in LTX-2's FeedForward, so the
activations between are not written and read again:

- `gelu_mm`: the first linear, its tanh GELU and the fp8 rows of the result, so the widest
  activation of a block (tokens x 16384) is never written in bf16;
- `residual_mm`: the second linear and the gated residual after it, out = x + gate * (linear).

Both take x's rows quantized as xq[m] * sa[m] (`quantize_rows`) and the weight's as w[n] * sb[n]
(stored (N, K), K-major), and accumulate in fp32.

The GELU's fp8 rows need a scale a row before the GEMM has run (each CTA holds a slice of a row's
columns only), so it comes from a bound rather than the row's amax. With a bias b, Cauchy-Schwarz gives

    |GELU(y[m, n])| <= |y[m, n]| <= sa[m] * ||xq[m]|| * max_n (sb[n] * ||w[n]||) + max |b|

(the tanh GELU never grows a value's magnitude). `row_scales` turns that bound into each row's scale
(one pass over the fp8 rows: a quarter of the bf16 output's bytes), and `gelu_mm` computes

    q[m, n] = clamp(GELU(sum_k xq[m, k] w[n, k] * sa[m] * sb[n] + b[n]) / s[m], -448, 448)

in float8_e4m3fn. The bound sits above the row's amax, which costs e4m3 nothing that matters: it is
a float format, so the row keeps its 3 mantissa bits down to 2^-6 of 448 and only values that small
round more coarsely (`tests/test_fp8_fused_mm.py` holds the second linear's error to the amax-scaled
rows'). Plain torch on the CPU; the Triton kernels run in the interpreter with float16 operands.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.int8_gemm import FP8_MAX, _tanh_approx
from kernels.na3d_triton import interpreting

# Rounding margin on the bound: fp32 sums of the norm and the GEMM's fast accumulation
BOUND_MARGIN = 1.0 + 2.0 ** -8


def weight_bound(w: torch.Tensor, w_scale: torch.Tensor) -> float:
    """max over output channels n of w_scale[n] * ||w[n]|| (w stored (N, K))."""
    return float((w.float().norm(dim=1) * w_scale.float()).max())


def weight_bounds(w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(max over output channels n of w_scale[n] * ||w[n]||, max |bias|) with `BOUND_MARGIN`, fp32 on
    the weight's device: what `row_scales` takes (a tensor, so one compiled graph serves every block)."""
    b_max = 0.0 if bias is None else float(bias.detach().abs().max())
    return torch.tensor([weight_bound(w, w_scale), b_max], device=w.device) * BOUND_MARGIN


@triton.jit
def _row_scales(XQ, XS, BOUNDS, S, K, stride_x, QMAX: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    x = tl.load(XQ + row * stride_x + offs, mask=offs < K, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, 0))
    bound = tl.load(XS + row) * norm * tl.load(BOUNDS) + tl.load(BOUNDS + 1)
    tl.store(S + row, tl.maximum(bound, 1e-12) / QMAX)


def row_scales(xq: torch.Tensor, xs: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """Each row's output scale for `gelu_mm`: its bound over FP8_MAX (module docstring), from the
    weight's `weight_bounds`."""
    if xq.device.type != "cuda":
        return (xs.float() * xq.float().norm(dim=1) * bounds[0] + bounds[1]).clamp(min=1e-12) / FP8_MAX
    return row_scales_triton(xq, xs, bounds)


def row_scales_triton(xq: torch.Tensor, xs: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """`row_scales`' Triton kernel (the interpreter too)."""
    xq = xq if xq.stride(-1) == 1 else xq.contiguous()
    m, k = xq.shape
    s = torch.empty((m,), dtype=torch.float32, device=xq.device)
    block = triton.next_power_of_2(k)
    _row_scales[(m,)](xq, xs, bounds, s, k, xq.stride(0), QMAX=FP8_MAX, BLOCK_K=block,
                      num_warps=4 if block <= 8192 else 8)
    return s


def _configs():
    if interpreting():
        return [triton.Config({"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 2}, num_warps=4, num_stages=1)]
    return [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_warps=warps, num_stages=stages)
            for bm, bn, bk, warps, stages in ((128, 256, 128, 8, 3), (256, 128, 128, 8, 3),
                                              (128, 128, 128, 8, 4), (128, 256, 64, 8, 4))]


@triton.jit
def _scaled_tile(A, B, SA, SB, BIAS, M, N, K, stride_am, stride_bn, HAS_BIAS: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    """This program's tile of (A @ B.T) * sa[:, None] * sb[None, :] + bias in fp32, its rows and columns."""
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    group = GROUP_M * grid_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    a_ptr = A + ram.to(tl.int64)[:, None] * stride_am + rk[None, :]
    b_ptr = B + rbn.to(tl.int64)[:, None] * stride_bn + rk[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptr)
            b = tl.load(b_ptr)
        else:
            a = tl.load(a_ptr, mask=rk[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptr, mask=rk[None, :] < K - k * BK, other=0.0)
        acc = tl.dot(a, tl.trans(b), acc)
        a_ptr += BK
        b_ptr += BK
    m_ok, n_ok = rm < M, rn < N
    y = acc * tl.load(SA + rm, mask=m_ok, other=0.0)[:, None] * tl.load(SB + rn, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(BIAS + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    return y, rm, rn


@triton.autotune(configs=_configs(), key=["M_BUCKET", "N", "K"])
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BK"] == 0})
@triton.jit
def _gelu_mm(A, B, Q, SA, SB, BIAS, S, M, N, K, M_BUCKET, stride_am, stride_bn, stride_qm,
             HAS_BIAS: tl.constexpr, FAST_TANH: tl.constexpr, QMAX: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    y, rm, rn = _scaled_tile(A, B, SA, SB, BIAS, M, N, K, stride_am, stride_bn, HAS_BIAS, BM, BN, BK, GROUP_M, EVEN_K)
    # tanh GELU, as `quantize_rows(gelu=True)` computes it
    if FAST_TANH:
        half = 0.5 * y
        y = half + half * _tanh_approx(0.7978845608028654 * (y + 0.044715 * y * y * y))
    else:
        y = y / (1.0 + tl.exp(-1.5957691216057308 * (y + 0.044715 * y * y * y)))
    m_ok = rm < M
    inv = 1.0 / tl.load(S + rm, mask=m_ok, other=1.0)
    q = tl.minimum(tl.maximum(y * inv[:, None], -QMAX), QMAX)
    tl.store(Q + rm.to(tl.int64)[:, None] * stride_qm + rn[None, :], q.to(Q.dtype.element_ty),
             mask=m_ok[:, None] & (rn < N)[None, :])


@triton.autotune(configs=_configs(), key=["M_BUCKET", "N", "K"])
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BK"] == 0})
@triton.jit
def _residual_mm(A, B, X, G, OUT, SA, SB, BIAS, M, N, K, M_BUCKET, ROWS_PER_GATE, stride_am, stride_bn,
                 HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    y, rm, rn = _scaled_tile(A, B, SA, SB, BIAS, M, N, K, stride_am, stride_bn, HAS_BIAS, BM, BN, BK, GROUP_M, EVEN_K)
    ok = (rm < M)[:, None] & (rn < N)[None, :]
    at = rm.to(tl.int64)[:, None] * N + rn[None, :]
    g = tl.load(G + (rm // ROWS_PER_GATE).to(tl.int64)[:, None] * N + rn[None, :], mask=ok, other=0.0)
    x = tl.load(X + at, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + at, (x + g * y).to(OUT.dtype.element_ty), mask=ok)


def _scaled(xq, xs, w, ws, bias) -> torch.Tensor:
    y = (xq.float() @ w.float().t()) * xs.float()[:, None] * ws.float()[None, :]
    return y if bias is None else y + bias.float()


def gelu_mm_torch(xq, xs, w, ws, bias, scale, out_dtype=torch.float8_e4m3fn) -> torch.Tensor:
    """`gelu_mm` in plain torch (fp32 products)."""
    g = torch.nn.functional.gelu(_scaled(xq, xs, w, ws, bias), approximate="tanh")
    return (g / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(out_dtype)


def residual_mm_torch(xq, xs, w, ws, bias, x, gate) -> torch.Tensor:
    """`residual_mm` in plain torch (fp32 products and sum)."""
    y = _scaled(xq, xs, w, ws, bias).view(gate.shape[0], -1, w.shape[0])
    return (x.float().view_as(y) + gate.float()[:, None, :] * y).to(x.dtype).view_as(x)


def _check(xq, xs, w, ws, bias, **rows) -> None:
    """The GEMM's arguments checked up front (and `rows`: more (M,) tensors); says what was wrong and
    what is allowed."""
    if xq.dim() != 2 or w.dim() != 2 or xq.shape[1] != w.shape[1]:
        raise ValueError(f"xq must be (M, K) and w (N, K) with one K; got {tuple(xq.shape)} and {tuple(w.shape)}")
    if xq.dtype != w.dtype:
        raise TypeError(f"xq and w must share a dtype, got {xq.dtype} and {w.dtype}")
    (m, _), n = xq.shape, w.shape[0]
    for name, t, size in (("xs", xs, m), ("ws", ws, n), ("bias", bias, n), *((k, t, m) for k, t in rows.items())):
        if t is not None and tuple(t.shape) != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {tuple(t.shape)}")


def _same_device(*tensors) -> None:
    devices = {str(t.device) for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {', '.join(sorted(devices))}")


def gelu_mm(xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None,
            scale: torch.Tensor, out_dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """fp8 rows of tanh-GELU(xq @ w.T * xs[:, None] * ws[None, :] + bias), row m scaled by scale[m]
    (`row_scales`); xq (M, K), w (N, K)."""
    _check(xq, xs, w, ws, bias, scale=scale)
    _same_device(xq, xs, w, ws, bias, scale)
    if xq.device.type != "cuda":
        return gelu_mm_torch(xq, xs, w, ws, bias, scale, out_dtype)
    return gelu_mm_triton(xq, xs, w, ws, bias, scale, out_dtype)


def _contiguous(*tensors):
    return [t if t.stride(-1) == 1 else t.contiguous() for t in tensors]


def gelu_mm_triton(xq, xs, w, ws, bias, scale, out_dtype=torch.float8_e4m3fn) -> torch.Tensor:
    """`gelu_mm`'s Triton kernel (any device Triton runs on: the interpreter with float16 operands)."""
    xq, w = _contiguous(xq, w)
    (m, k), n = xq.shape, w.shape[0]
    q = torch.empty((m, n), dtype=out_dtype, device=xq.device)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
    _gelu_mm[grid](xq, w, q, xs, ws, bias if bias is not None else xs, scale, m, n, k, triton.next_power_of_2(m),
                   xq.stride(0), w.stride(0), q.stride(0), HAS_BIAS=bias is not None,
                   FAST_TANH=not interpreting(), QMAX=FP8_MAX)
    return q


def residual_mm(xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None,
                x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """x + gate * (xq @ w.T * xs[:, None] * ws[None, :] + bias), in x's dtype and shape. x holds the M rows
    (any leading shape, N last); gate is (G, N) fp32, one row for each M / G consecutive rows (LTX-2's
    gate of one timestep a sample: G = batch)."""
    _check(xq, xs, w, ws, bias)
    (m, _), n = xq.shape, w.shape[0]
    if x.numel() != m * n or x.shape[-1] != n:
        raise ValueError(f"x must hold the {m} x {n} output, got shape {tuple(x.shape)}")
    if gate.dim() != 2 or gate.shape[1] != n or m % gate.shape[0]:
        raise ValueError(f"gate must be (G, {n}) with G dividing {m} rows, got shape {tuple(gate.shape)}")
    _same_device(xq, xs, w, ws, bias, x, gate)
    if xq.device.type != "cuda":
        return residual_mm_torch(xq, xs, w, ws, bias, x, gate)
    return residual_mm_triton(xq, xs, w, ws, bias, x, gate)


def residual_mm_triton(xq, xs, w, ws, bias, x, gate) -> torch.Tensor:
    """`residual_mm`'s Triton kernel (any device Triton runs on: the interpreter with float16 operands)."""
    xq, w = _contiguous(xq, w)
    x, gate = x.contiguous(), gate.float().contiguous()
    (m, k), n = xq.shape, w.shape[0]
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
    _residual_mm[grid](xq, w, x, gate, out, xs, ws, bias if bias is not None else xs, m, n, k,
                       triton.next_power_of_2(m), m // gate.shape[0], xq.stride(0), w.stride(0),
                       HAS_BIAS=bias is not None)
    return out
