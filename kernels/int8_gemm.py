"""Int8 x int8 GEMM with a fused scale epilogue, and row-wise activation quantization.

`int8_linear(xq, x_scale, wq, w_scale, bias)` computes
    y[m, n] = (sum_k xq[m, k] * wq[n, k]) * x_scale[m] * w_scale[n] + bias[n]
with int32 accumulation and a bf16/fp16 output. The weight is stored (N, K), K-major
(the x @ W.T layout): the only layout where Hopper's int8 tensor cores run at full rate
(bench/RESULTS.md, "bench/runtime.py": ~1.02 ms K-major vs 3.7-11.6 ms with W stored (K, N)
at 8192x4096x16384). `quantize_rows(x, dtype)` makes the per-row symmetric quantization in one pass.
Both have plain-torch versions for the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.na3d_triton import interpreting

INT8_MAX = 127.0
FP8_MAX = 448.0  # float8_e4m3fn
# The largest K whose worst-case dot product, K * 127 * 127, fits the int32 accumulator.
INT8_K_MAX = (2**31 - 1) // (127 * 127)


@triton.jit
def _tanh_approx(x):
    """The GPU's one-instruction tanh (PTX tanh.approx.f32: relative error under 2^-10.9)."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _quantize_rows(X, Q, S, K, stride_x, stride_q, QMAX: tl.constexpr, BLOCK_K: tl.constexpr,
                   IS_INT: tl.constexpr, GELU: tl.constexpr, FAST_TANH: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    mask = offs < K
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    # tanh GELU: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    if GELU and FAST_TANH:
        half = 0.5 * x
        x = half + half * _tanh_approx(0.7978845608028654 * (x + 0.044715 * x * x * x))
    elif GELU:
        x = x / (1.0 + tl.exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)))
    amax = tl.maximum(tl.max(tl.abs(x), 0), 1e-12)
    scale = amax / QMAX
    y = x / scale
    if IS_INT:
        y = tl.where(y >= 0, tl.floor(y + 0.5), tl.ceil(y - 0.5))  # round half away from zero
    tl.store(Q + row * stride_q + offs, y.to(Q.dtype.element_ty), mask=mask)
    tl.store(S + row, scale)


def quantize_rows_torch(x: torch.Tensor, dtype: torch.dtype, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric quantization in plain torch: (q, scale) with x ~= q * scale[:, None]
    (with `gelu`, of tanh-GELU(x))."""
    qmax = INT8_MAX if dtype == torch.int8 else FP8_MAX
    xf = torch.nn.functional.gelu(x.float(), approximate="tanh") if gelu else x.float()
    scale = xf.abs().amax(dim=-1).clamp(min=1e-12) / qmax
    y = xf / scale[:, None]
    if dtype == torch.int8:
        y = y.round().clamp(-qmax, qmax)
    return y.to(dtype), scale


def quantize_rows(x: torch.Tensor, dtype: torch.dtype = torch.int8, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric quantization of a 2-D tensor to int8 or float8_e4m3fn, one pass on CUDA;
    with `gelu`, of tanh-GELU(x) (computed in fp32 in the same pass)."""
    if x.dim() != 2:
        raise ValueError(f"quantize_rows takes a 2-D tensor, got shape {tuple(x.shape)}")
    if dtype not in (torch.int8, torch.float8_e4m3fn):
        raise ValueError(f"dtype must be torch.int8 or torch.float8_e4m3fn, got {dtype}")
    if x.device.type != "cuda":
        return quantize_rows_torch(x, dtype, gelu)
    return quantize_rows_triton(x, dtype, gelu)


def quantize_rows_triton(x: torch.Tensor, dtype: torch.dtype, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize_rows`'s Triton kernel (any device Triton runs on: the interpreter too)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    m, k = x.shape
    q = torch.empty((m, k), dtype=dtype, device=x.device)
    s = torch.empty((m,), dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(k)
    # warps measured on the H200 (bench/RESULTS.md, eighth round): 8 for the FeedForward's 16384-wide
    # rows (89.6 us at 6144 rows against 96.7 with 16), 4 up to 4096 (23.0 against 25.4 with 8).
    # The GELU takes the GPU's tanh instruction on CUDA (bench/RESULTS.md, eleventh round: 78 against
    # 87 us at 6144 x 16384; the exp form in the interpreter, which has no inline PTX).
    _quantize_rows[(m,)](x, q, s, k, x.stride(0), q.stride(0), QMAX=INT8_MAX if dtype == torch.int8 else FP8_MAX,
                         BLOCK_K=block, IS_INT=dtype == torch.int8, GELU=gelu, FAST_TANH=not interpreting(),
                         num_warps=8 if block > 4096 else 4)
    return q, s


def _configs():
    out = []
    for bm, bn, bk, warps, stages in ((128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (128, 128, 128, 8, 4),
                                      (128, 128, 128, 4, 4), (128, 256, 64, 8, 4), (64, 128, 128, 4, 4),
                                      (128, 256, 128, 8, 4), (256, 128, 128, 8, 4), (128, 128, 256, 8, 3)):
        out.append(triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_warps=warps, num_stages=stages))
    return out


# Tuned per power-of-two bucket of M: a new token count does not stall a forward on autotuning.
@triton.autotune(configs=_configs(), key=["M_BUCKET", "N", "K"])
@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BK"] == 0})
@triton.jit
def _int8_mm(A, B, C, SA, SB, BIAS, M, N, K, M_BUCKET, stride_am, stride_bn, stride_cm,
             HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
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
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptr)
            b = tl.load(b_ptr)
        else:
            a = tl.load(a_ptr, mask=rk[None, :] < K - k * BK, other=0)
            b = tl.load(b_ptr, mask=rk[None, :] < K - k * BK, other=0)
        acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.int32)
        a_ptr += BK
        b_ptr += BK
    sa = tl.load(SA + rm, mask=rm < M, other=0.0)
    sb = tl.load(SB + rn, mask=rn < N, other=0.0)
    y = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    if HAS_BIAS:
        y += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    c_ptr = C + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :]
    tl.store(c_ptr, y.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_linear_torch(xq, x_scale, wq, w_scale, bias=None, out_dtype=torch.bfloat16) -> torch.Tensor:
    """Plain-torch int8 linear (exact int32-range products in float64 on the CPU)."""
    acc = xq.double() @ wq.double().t()
    y = acc * x_scale.double()[:, None] * w_scale.double()[None, :]
    if bias is not None:
        y = y + bias.double()
    return y.to(out_dtype)


def check_int8_linear(xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                      bias: torch.Tensor | None, out_dtype: torch.dtype) -> None:
    """Every argument of `int8_linear` checked up front; raises saying what was wrong and what is allowed."""
    for name, t in (("xq", xq), ("wq", wq), ("x_scale", x_scale), ("w_scale", w_scale), ("bias", bias)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if xq.dtype != torch.int8 or wq.dtype != torch.int8:
        raise TypeError(f"int8_linear takes int8 operands, got xq {xq.dtype} and wq {wq.dtype}")
    if xq.dim() != 2 or wq.dim() != 2:
        raise ValueError(f"xq and wq must be 2-D, (M, K) and (N, K); got {tuple(xq.shape)} and {tuple(wq.shape)}")
    (m, k), n = xq.shape, wq.shape[0]
    if wq.shape[1] != k:
        raise ValueError(f"K mismatch: xq {tuple(xq.shape)}, wq {tuple(wq.shape)} (wq is stored (N, K))")
    if not 0 < k <= INT8_K_MAX:
        raise ValueError(f"K = {k} out of range: 1 <= K <= {INT8_K_MAX} (K * 127 * 127 must fit the int32 accumulator)")
    for name, t, size in (("x_scale", x_scale, m), ("w_scale", w_scale, n), ("bias", bias, n)):
        if t is None:
            continue
        if tuple(t.shape) != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a float tensor, got {t.dtype}")
    devices = {str(t.device) for t in (xq, wq, x_scale, w_scale, bias) if t is not None}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {', '.join(sorted(devices))}")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")


def int8_linear(xq: torch.Tensor, x_scale: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor,
                bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """y = (xq @ wq.T) * x_scale[:, None] * w_scale[None, :] + bias; xq (M, K), wq (N, K) int8."""
    check_int8_linear(xq, x_scale, wq, w_scale, bias, out_dtype)
    if xq.device.type != "cuda":
        return int8_linear_torch(xq, x_scale, wq, w_scale, bias, out_dtype)
    xq = xq if xq.stride(-1) == 1 else xq.contiguous()
    wq = wq if wq.stride(-1) == 1 else wq.contiguous()
    m, k = xq.shape
    n = wq.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=xq.device)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
    _int8_mm[grid](xq, wq, c, x_scale, w_scale, bias if bias is not None else c, m, n, k,
                   triton.next_power_of_2(m), xq.stride(0), wq.stride(0), c.stride(0), HAS_BIAS=bias is not None)
    return c
