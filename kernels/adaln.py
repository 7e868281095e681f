"""LTX-2's DiT block norms as one pass each: its `ada_zero_function` and `post_sa_function` slots.

LTX-2 v1.2.0's `BasicAVTransformerBlock` takes two norm ops as pluggable functions
(`TransformerOpsConfig`, ltx_core/model/transformer/ops.py):
- ada_zero(x, eps, scale, shift) = rms_norm(x) * (1 + scale) + shift: the AdaLN before each
  attention and the feed-forward (4 calls a block for the video tokens);
- post_sa(x, y, weight, eps, gate) = (x + y * gate, rms_norm(x + y * gate, weight)): the gated
  residual after self-attention and the norm of the text cross-attention's input.
Run eagerly, each is 3-5 passes over the (tokens, dim) activations; here each is one program a
row that reads x (and y) once and writes once (twice for post_sa), in fp32 inside. `scale`,
`shift` and `gate` are anything that broadcasts to x's (B, T, D): one row per batch (LTX-2's
one-token timesteps) or per token. The rms is over the last dimension, eps inside the root, as
`torch.nn.functional.rms_norm`; post_sa's norm reads the residual as stored (in x's dtype).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.int8_gemm import FP8_MAX
from kernels.na3d_triton import interpreting

MAX_DIM = 16384  # one row in registers


def row_warps(d: int) -> int:
    """Warps of a program that holds one row of d features: 4 up to 8192 (measured on the H200 at
    LTX-2's 4096: 4 warps take 0.83-1.02x the time of 8 over these kernels, bench/RESULTS.md
    eleventh round), 8 above."""
    return 4 if d <= 8192 else 8


class Refused(ValueError):
    """The arguments are not what the kernels take; the message says which and what they need."""


@triton.jit
def _modulate(n, SCALE, SHIFT, sc_off, sh_off, d, m, dtype: tl.constexpr):
    """n * (1 + scale) + shift, rounded to `dtype`."""
    scale = tl.load(SCALE + sc_off + d, mask=m, other=0.0).to(tl.float32)
    shift = tl.load(SHIFT + sh_off + d, mask=m, other=0.0).to(tl.float32)
    return (n * (1.0 + scale) + shift).to(dtype)


@triton.jit
def _fp8_row(y, Q, S, row, D, d, m, QMAX: tl.constexpr, FS, FIXED: tl.constexpr):
    """Row `row` of y (fp32) quantized into Q, its scale into S (`quantize_rows`'s arithmetic); with
    FIXED, by the one scale at FS (a bound above every row's amax / QMAX: `bound_scale`)."""
    if FIXED:
        s = tl.load(FS)
    else:
        s = tl.maximum(tl.max(tl.abs(y), 0), 1e-12) / QMAX
    tl.store(Q + row * D + d, (y / s).to(Q.dtype.element_ty), mask=m)
    tl.store(S + row, s)


@triton.jit
def _gated_residual(X, Y, RES, row, D, d, m, G1, o1, sd1, G2, o2, sd2, GATES: tl.constexpr):
    """RES = x + y * the gates (up to two, multiplied in fp32), stored; returns it as stored, in fp32."""
    x = tl.load(X + row * D + d, mask=m, other=0.0).to(tl.float32)
    y = tl.load(Y + row * D + d, mask=m, other=0.0).to(tl.float32)
    if GATES >= 1:
        y = y * tl.load(G1 + o1 + d * sd1, mask=m, other=0.0).to(tl.float32)
    if GATES >= 2:
        y = y * tl.load(G2 + o2 + d * sd2, mask=m, other=0.0).to(tl.float32)
    res = (x + y).to(RES.dtype.element_ty)
    tl.store(RES + row * D + d, res, mask=m)
    return res.to(tl.float32)


@triton.jit
def _ada_zero(X, SCALE, SHIFT, OUT, Q, S, FS, T, D, eps, sb_scale, st_scale, sb_shift, st_shift,
              KEEP: tl.constexpr, FP8: tl.constexpr, QMAX: tl.constexpr, BLOCK: tl.constexpr, FIXED: tl.constexpr):
    """OUT = ada_zero(X) (with KEEP); with FP8, its rows (as rounded to OUT's dtype) quantized
    into Q with their scales in S."""
    row = tl.program_id(0).to(tl.int64)
    b, t = row // T, row % T
    d = tl.arange(0, BLOCK)
    m = d < D
    x = tl.load(X + row * D + d, mask=m, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, 0) / D + eps)
    y = _modulate(x * inv, SCALE, SHIFT, b * sb_scale + t * st_scale, b * sb_shift + t * st_shift, d, m,
                  OUT.dtype.element_ty)
    if KEEP:
        tl.store(OUT + row * D + d, y, mask=m)
    if FP8:
        _fp8_row(y.to(tl.float32), Q, S, row, D, d, m, QMAX, FS, FIXED)


@triton.jit
def _post_sa(X, Y, GATE, W, RES, NORMED, S, T, D, eps, sb_gate, st_gate, HAS_W: tl.constexpr, FP8: tl.constexpr,
             QMAX: tl.constexpr, BLOCK: tl.constexpr):
    """RES = x + y * gate and NORMED = its rms norm; with FP8, NORMED's rows (as rounded to RES's dtype)
    quantized into NORMED (float8) with their scales in S."""
    row = tl.program_id(0).to(tl.int64)
    b, t = row // T, row % T
    d = tl.arange(0, BLOCK)
    m = d < D
    r = _gated_residual(X, Y, RES, row, D, d, m, GATE, b * sb_gate + t * st_gate, 1, GATE, 0, 0, 1)
    out = r * tl.rsqrt(tl.sum(r * r, 0) / D + eps)
    if HAS_W:
        out = out * tl.load(W + d, mask=m, other=0.0).to(tl.float32)
    if FP8:
        _fp8_row(out.to(RES.dtype.element_ty).to(tl.float32), NORMED, S, row, D, d, m, QMAX, S, False)
    else:
        tl.store(NORMED + row * D + d, out.to(NORMED.dtype.element_ty), mask=m)


@triton.jit
def _add_ada_zero(X, Y, G1, G2, SC1, SH1, SC2, SH2, RES, Q1, S1, Q2, S2, FS1, FS2, T, D, eps,
                  g1b, g1t, g1d, g2b, g2t, g2d, s1b, s1t, h1b, h1t, s2b, s2t, h2b, h2t,
                  GATES: tl.constexpr, TWO: tl.constexpr, QMAX: tl.constexpr, BLOCK: tl.constexpr,
                  FIXED1: tl.constexpr, FIXED2: tl.constexpr):
    """RES = x + y * gates (their product, in fp32) and the fp8 rows of ada_zero(RES) for one or two
    (scale, shift) pairs (Q1/S1, Q2/S2), from the residual as stored (FIXEDi: by the scale at FSi)."""
    row = tl.program_id(0).to(tl.int64)
    b, t = row // T, row % T
    d = tl.arange(0, BLOCK)
    m = d < D
    r = _gated_residual(X, Y, RES, row, D, d, m, G1, b * g1b + t * g1t, g1d, G2, b * g2b + t * g2t, g2d, GATES)
    n = r * tl.rsqrt(tl.sum(r * r, 0) / D + eps)
    dtype = RES.dtype.element_ty
    _fp8_row(_modulate(n, SC1, SH1, b * s1b + t * s1t, b * h1b + t * h1t, d, m, dtype).to(tl.float32),
             Q1, S1, row, D, d, m, QMAX, FS1, FIXED1)
    if TWO:
        _fp8_row(_modulate(n, SC2, SH2, b * s2b + t * s2t, b * h2b + t * h2t, d, m, dtype).to(tl.float32),
                 Q2, S2, row, D, d, m, QMAX, FS2, FIXED2)


def _rows(x: torch.Tensor, name: str, *mods: tuple[str, torch.Tensor]) -> list[tuple[int, int]]:
    """Check the arguments; per modulation tensor, its (batch, token) strides over x's (B, T, D)."""
    if x.dim() != 3:
        raise Refused(f"{name}: x must be (batch, tokens, dim), got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise Refused(f"{name}: x must be contiguous")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Refused(f"{name}: x must be float32, float16 or bfloat16, got {x.dtype}")
    if not 0 < x.shape[-1] <= MAX_DIM:
        raise Refused(f"{name}: dim {x.shape[-1]} is outside 1..{MAX_DIM}")
    strides = []
    for what, t in mods:
        try:
            view = t.expand_as(x)
        except RuntimeError:
            raise Refused(f"{name}: {what} of shape {tuple(t.shape)} does not broadcast to x's "
                          f"{tuple(x.shape)}") from None
        if view.stride(-1) != 1 or t.device != x.device or t.dtype != x.dtype:
            raise Refused(f"{name}: {what} must be on x's device, in x's dtype ({x.dtype}), with a contiguous "
                          f"last dimension (got {t.dtype} on {t.device}, strides {tuple(t.stride())})")
        strides.append((view.stride(0), view.stride(1)))
    return strides


def ada_zero_torch(x: torch.Tensor, eps: float, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """rms_norm(x) * (1 + scale) + shift in fp32, rounded once to x's dtype (any device)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1 + scale.float()) + shift.float()).to(x.dtype)


def post_sa_torch(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, eps: float,
                  gate: torch.Tensor) -> list[torch.Tensor]:
    """[x + y * gate, rms_norm(that, weight)] in fp32, each rounded once to x's dtype (any device)."""
    res = (x.float() + y.float() * gate.float()).to(x.dtype)
    r = res.float()
    out = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.float()
    return [res, out.to(x.dtype)]


def check_ada_zero(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                   name: str = "ada_zero") -> list[tuple[int, int]]:
    """Check ada_zero's arguments; scale's and shift's (batch, token) strides over x's (B, T, D)."""
    return _rows(x, name, ("scale", scale), ("shift", shift))


def ada_zero(x: torch.Tensor, eps: float, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """LTX-2's ada_zero in one pass (CUDA, or the Triton interpreter; else the torch ops)."""
    (sc, sh) = check_ada_zero(x, scale, shift)
    if not (x.is_cuda or interpreting()):
        return ada_zero_torch(x, eps, scale, shift)
    out = torch.empty_like(x)
    b, t, d = x.shape
    _ada_zero[(b * t,)](x, scale, shift, out, out, out, out, t, d, float(eps), *sc, *sh, KEEP=True, FP8=False,
                        QMAX=FP8_MAX, BLOCK=triton.next_power_of_2(d), FIXED=False, num_warps=row_warps(d))
    return out


def bound_scale(scale: torch.Tensor, shift: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For ada_zero(x, eps, scale, shift) over `dim` features, whatever x: (a power-of-two fp8 scale s
    with every |output| / s <= FP8_MAX, a bound on each output row's L2 norm), both (1,) fp32. The
    norm's rows have |n_j| <= ||n|| <= sqrt(dim), so |y_j| <= sqrt(dim) |1 + scale_j| + |shift_j|
    and ||y|| <= sqrt(dim) max|1 + scale| + ||shift||; 1% over both covers the bf16 rounding of y."""
    grow = math.sqrt(dim) * (1 + scale.float()).abs().amax()
    sh = shift.float()
    amax = (grow + sh.abs().amax()) * 1.01
    norm = (grow + sh.reshape(-1, sh.shape[-1]).norm(dim=1).amax()) * 1.01
    s = torch.exp2(torch.ceil(torch.log2(amax.clamp(min=1e-30) / FP8_MAX)))
    return s.reshape(1), norm.reshape(1)


def _fixed(fixed: torch.Tensor | None, x: torch.Tensor, name: str) -> None:
    if fixed is not None and (fixed.shape != (1,) or fixed.dtype != torch.float32 or fixed.device != x.device):
        raise Refused(f"{name}: a fixed scale must be one float32 value on x's device (bound_scale), "
                      f"got {tuple(fixed.shape)} {fixed.dtype} on {fixed.device}")


def ada_zero_fp8(x: torch.Tensor, eps: float, scale: torch.Tensor, shift: torch.Tensor,
                 keep: bool = False, fixed: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`ada_zero` and the fp8 row quantization of its output (`quantize_rows`) in one pass (CUDA or
    the interpreter): (q (B*T, D) float8_e4m3fn, scale (B*T,) fp32, the bf16 output if `keep`). With
    `fixed` ((1,) fp32, `bound_scale`'s), every row by that one scale (each row's scale holds it)."""
    (sc, sh) = check_ada_zero(x, scale, shift, "ada_zero_fp8")
    _fixed(fixed, x, "ada_zero_fp8")
    if not (x.is_cuda or interpreting()):
        raise ValueError("ada_zero_fp8 runs on CUDA (or under TRITON_INTERPRET=1)")
    b, t, d = x.shape
    out = torch.empty_like(x) if keep else None
    q = torch.empty((b * t, d), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((b * t,), dtype=torch.float32, device=x.device)
    _ada_zero[(b * t,)](x, scale, shift, x if out is None else out, q, s, s if fixed is None else fixed, t, d,
                        float(eps), *sc, *sh, KEEP=keep, FP8=True, QMAX=FP8_MAX, BLOCK=triton.next_power_of_2(d),
                        FIXED=fixed is not None, num_warps=row_warps(d))
    return q, s, out


def check_post_sa(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, gate: torch.Tensor,
                  name: str = "post_sa") -> tuple[int, int]:
    """Check post_sa's arguments; gate's (batch, token) strides over x's (B, T, D)."""
    (g,) = _rows(x, name, ("gate", gate))
    if y.shape != x.shape or not y.is_contiguous() or y.device != x.device or y.dtype != x.dtype:
        raise Refused(f"{name}: y must be contiguous, on x's device, of x's shape {tuple(x.shape)} and dtype, "
                      f"got {tuple(y.shape)} {y.dtype}")
    if weight is not None and (weight.shape != x.shape[-1:] or weight.device != x.device):
        raise Refused(f"{name}: weight must be ({x.shape[-1]},) on x's device, got {tuple(weight.shape)}")
    return g


def _launch_post_sa(x, y, weight, eps, gate, g, normed, s) -> torch.Tensor:
    res = torch.empty_like(x)
    b, t, d = x.shape
    _post_sa[(b * t,)](x, y, gate, x if weight is None else weight.contiguous(), res, normed, s, t, d, float(eps), *g,
                       HAS_W=weight is not None, FP8=normed.dtype == torch.float8_e4m3fn, QMAX=FP8_MAX,
                       BLOCK=triton.next_power_of_2(d), num_warps=row_warps(d))
    return res


def post_sa(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, eps: float,
            gate: torch.Tensor) -> list[torch.Tensor]:
    """LTX-2's post_sa in one pass (CUDA, or the Triton interpreter; else the torch ops)."""
    g = check_post_sa(x, y, weight, gate)
    if not (x.is_cuda or interpreting()):
        return post_sa_torch(x, y, weight, eps, gate)
    normed = torch.empty_like(x)
    return [_launch_post_sa(x, y, weight, eps, gate, g, normed, x), normed]


def post_sa_fp8(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, eps: float,
                gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`post_sa` with its norm's rows quantized to fp8 in the same pass (CUDA or the interpreter):
    (the residual (B, T, D) in x's dtype, q (B*T, D) float8_e4m3fn, scale (B*T,) fp32)."""
    g = check_post_sa(x, y, weight, gate, "post_sa_fp8")
    if not (x.is_cuda or interpreting()):
        raise ValueError("post_sa_fp8 runs on CUDA (or under TRITON_INTERPRET=1)")
    b, t, d = x.shape
    q = torch.empty((b * t, d), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((b * t,), dtype=torch.float32, device=x.device)
    return _launch_post_sa(x, y, weight, eps, gate, g, q, s), q, s


def add_ada_zero_torch(x: torch.Tensor, y: torch.Tensor, gates: list[torch.Tensor], eps: float,
                       scales: list[torch.Tensor], shifts: list[torch.Tensor]) -> list[torch.Tensor]:
    """[x + y * gates, ada_zero of that for each (scale, shift)] in fp32, each rounded once to x's dtype."""
    yf = y.float()
    for g in gates:
        yf = yf * g.float()
    res = (x.float() + yf).to(x.dtype)
    return [res, *(ada_zero_torch(res, eps, sc, sh) for sc, sh in zip(scales, shifts))]


def check_add_ada_zero(x: torch.Tensor, y: torch.Tensor, gates: list[torch.Tensor], scales: list[torch.Tensor],
                       shifts: list[torch.Tensor], name: str = "add_ada_zero") -> tuple[list, list]:
    """Check add_ada_zero's arguments; each gate's (batch, token, dim) strides over x's (B, T, D), and
    each scale's and shift's (batch, token) strides."""
    mods = _rows(x, name, *((f"scale {i}", t) for i, t in enumerate(scales)),
                 *((f"shift {i}", t) for i, t in enumerate(shifts)))
    if y.shape != x.shape or not y.is_contiguous() or y.device != x.device or y.dtype != x.dtype:
        raise Refused(f"{name}: y must be contiguous, on x's device, of x's shape {tuple(x.shape)} and dtype, "
                      f"got {tuple(y.shape)} {y.dtype}")
    if not 1 <= len(scales) == len(shifts) <= 2 or len(gates) > 2:
        raise Refused(f"{name}: takes one or two (scale, shift) pairs and up to two gates, got {len(scales)} "
                      f"scales, {len(shifts)} shifts, {len(gates)} gates")
    strides = []
    for g in gates:
        try:
            view = g.expand_as(x)
        except RuntimeError:
            raise Refused(f"{name}: a gate of shape {tuple(g.shape)} does not broadcast to x's "
                          f"{tuple(x.shape)}") from None
        if g.device != x.device or not g.is_floating_point():
            raise Refused(f"{name}: a gate must be a floating tensor on x's device (got {g.dtype} on {g.device})")
        strides.append(view.stride())
    return strides, mods


def add_ada_zero_fp8(x: torch.Tensor, y: torch.Tensor, gates: list[torch.Tensor], eps: float,
                     scales: list[torch.Tensor], shifts: list[torch.Tensor],
                     fixed: list[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
    """The residual add before an AdaLN and the norm's fp8 rows, in one pass (CUDA or the interpreter):
    [x + y * gates (B, T, D) in x's dtype, then per (scale, shift): q (B*T, D) float8_e4m3fn, its row
    scales (B*T,) fp32], what `quantize_rows(ada_zero(x + y * gates, ...))` gives for each; a norm
    whose `fixed` entry is a scale ((1,) fp32, `bound_scale`'s) writes its rows by that one scale."""
    g, mods = check_add_ada_zero(x, y, gates, scales, shifts, "add_ada_zero_fp8")
    fixed = list(fixed or [None] * len(scales))
    if len(fixed) != len(scales):
        raise Refused(f"add_ada_zero_fp8: {len(fixed)} fixed scales for {len(scales)} norms")
    for f in fixed:
        _fixed(f, x, "add_ada_zero_fp8")
    if not (x.is_cuda or interpreting()):
        raise ValueError("add_ada_zero_fp8 runs on CUDA (or under TRITON_INTERPRET=1)")
    b, t, d = x.shape
    two = len(scales) == 2
    res = torch.empty_like(x)
    out = [res]
    for _ in scales:
        out += [torch.empty((b * t, d), dtype=torch.float8_e4m3fn, device=x.device),
                torch.empty((b * t,), dtype=torch.float32, device=x.device)]
    q2, s2 = (out[3], out[4]) if two else (out[1], out[2])
    k = len(scales)
    sc, sh = mods[:k], mods[k:]
    gp = [*gates, x, x][:2]
    gs = [*g, (0, 0, 0), (0, 0, 0)][:2]
    pairs = [(sc[0], sh[0]), (sc[-1], sh[-1])]
    fs = [out[2] if fixed[0] is None else fixed[0], s2 if fixed[-1] is None else fixed[-1]]
    _add_ada_zero[(b * t,)](x, y, *gp, scales[0], shifts[0], scales[-1], shifts[-1], res, out[1], out[2], q2, s2,
                            *fs, t, d, float(eps), *gs[0], *gs[1], *pairs[0][0], *pairs[0][1], *pairs[1][0],
                            *pairs[1][1], GATES=len(gates), TWO=two, QMAX=FP8_MAX, BLOCK=triton.next_power_of_2(d),
                            FIXED1=fixed[0] is not None, FIXED2=two and fixed[-1] is not None, num_warps=row_warps(d))
    return out
