"""`small_rows_mm`: y = x @ W.T for few fp8 rows (LTX-2's 126 audio tokens) and an fp8 weight (N, K).

At 126 rows cuBLAS's fp8 GEMM runs one 128x128 tile per CTA: 16 CTAs for a 2048-wide output, each
reading all of K, so the call takes ~8.2 us in a CUDA graph for 4 MiB of weight (~22 us at
K = 8192) while the H200 could stream it in ~2. Here K is split across CTAs as well (`split`
partial sums in fp32, added in fixed order by a second small kernel: deterministic), so about a
hundred CTAs each read a slice of the weight: 6.1 and 9.5 us (bench/RESULTS.md, eleventh round).
x comes as float8_e4m3fn rows with one fp32 scale a row (`quantize_rows`), w with one a row:

    y[m, n] = (sum_k x[m, k] * w[n, k]) * sa[m] * sb[n] + bias[n]

(Float rows against the weight upcast in registers, with no quantization of x, ran slower than
cuBLAS's fp8 GEMM and its quantization together: 10.3 against 10.0 us, 29 against 10 at 8192 wide.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_ROWS = 256  # above this cuBLAS's own tiling has enough CTAs (bench/RESULTS.md, eleventh round)


@triton.jit
def _few_rows_partial(X, W, SA, SB, BIAS, P, Y, M, N, K, K_SPLIT, stride_x, stride_w,
             HAS_BIAS: tl.constexpr, FINAL: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_n, pid_m, pid_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    m_ok, n_ok = offs_m < M, offs_n < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k0 = pid_s * K_SPLIT
    for kk in range(0, K_SPLIT, BK):
        offs_k = k0 + kk + tl.arange(0, BK)
        k_ok = offs_k < K
        a = tl.load(X + offs_m[:, None].to(tl.int64) * stride_x + offs_k[None, :],
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(W + offs_n[None, :].to(tl.int64) * stride_w + offs_k[:, None],
                    mask=n_ok[None, :] & k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
    if FINAL:
        y = acc * tl.load(SB + offs_n, mask=n_ok, other=0.0)[None, :]
        y = y * tl.load(SA + offs_m, mask=m_ok, other=0.0)[:, None]
        if HAS_BIAS:
            y = y + tl.load(BIAS + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + offs_m[:, None] * N + offs_n[None, :], y.to(Y.dtype.element_ty),
                 mask=m_ok[:, None] & n_ok[None, :])
    else:
        tl.store(P + (pid_s * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :], acc,
                 mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _few_rows_reduce(P, SA, SB, BIAS, Y, M, N, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(P + s * M * N + offs, mask=ok, other=0.0)
    n = offs % N
    y = acc * tl.load(SB + n, mask=ok, other=0.0) * tl.load(SA + offs // N, mask=ok, other=0.0)
    if HAS_BIAS:
        y = y + tl.load(BIAS + n, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=ok)


def tiling(m: int, n: int, k: int) -> tuple[int, int, int, int, int, int]:
    """(BM, BN, BK, split, warps, stages) for an m x n x k problem: about 128 CTAs (the H200 has 132
    SMs), each reading at most a few hundred KiB, K slices a multiple of BK."""
    bm = 64 if m <= 64 else 128
    bn, bk = 64, 128
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    split = 1
    while tiles * split * 2 <= 160 and k // (split * 2) >= 4 * bk and k % (split * 2 * bk) == 0:
        split *= 2
    return bm, bn, bk, split, 4, 3


def small_rows_mm(x: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sb: torch.Tensor,
                  bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                  config: tuple[int, int, int, int, int, int] | None = None) -> torch.Tensor:
    """x (M, K) float8_e4m3fn rows with `sa` (M,) fp32; w (N, K) float8_e4m3fn with `sb` (N,) fp32 a row;
    bias (N,) or None. Returns (M, N) in `out_dtype`; `config` overrides `tiling`."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"x must be (M, K) and w (N, K), got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.dtype != torch.float8_e4m3fn or w.dtype != torch.float8_e4m3fn:
        raise ValueError(f"x and w must be float8_e4m3fn, got {x.dtype} and {w.dtype}")
    (m, k), n = x.shape, w.shape[0]
    if sa.numel() != m or sb.numel() != n:
        raise ValueError(f"sa must hold one scale per row of x ({m}) and sb one per row of w ({n}), "
                         f"got {sa.numel()} and {sb.numel()}")
    x = x if x.stride(1) == 1 else x.contiguous()
    w = w if w.stride(1) == 1 else w.contiguous()
    sa, sb = sa.reshape(-1).float().contiguous(), sb.reshape(-1).float().contiguous()
    bias_ = sb if bias is None else bias.contiguous()
    bm, bn, bk, split, warps, stages = config or tiling(m, n, k)
    y = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    k_split = triton.cdiv(triton.cdiv(k, split), bk) * bk
    split = triton.cdiv(k, k_split)
    part = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, bn), triton.cdiv(m, bm), split)
    _few_rows_partial[grid](x, w, sa, sb, bias_, part, y, m, n, k, k_split, x.stride(0), w.stride(0),
                            HAS_BIAS=bias is not None, FINAL=split == 1, BM=bm, BN=bn, BK=bk,
                            num_warps=warps, num_stages=stages)
    if split > 1:
        block = 1024
        _few_rows_reduce[(triton.cdiv(m * n, block),)](part, sa, sb, bias_, y, m, n, SPLIT=split,
                                                       HAS_BIAS=bias is not None, BLOCK=block, num_warps=4)
    return y
