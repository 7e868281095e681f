"""The DiffVAE's modulated SwiGLU MLP with its residual, fused into one kernel, in place.

`swiglu_residual_(x, norm_weight, scale, shift, w_gate, w_up, w_down, eps)` computes, for every
token row of x (..., C):
    y = rms_norm(x) * norm_weight * (1 + scale) + shift
    x += (silu(y @ w_gate.T) * (y @ w_up.T)) @ w_down.T
with w_gate, w_up (hidden, C), w_down (C, hidden), scale and shift one value per channel. It is
what LTX-2's chunked layout runs as `ltx_core::swiglu_tiled_residual_modulated`, which loops over
token tiles with eager norm, modulation, GEMMs and element-wise passes through a (tile, hidden)
workspace. Here one program takes BLOCK_M tokens: it normalises and modulates them in
registers, then walks the hidden dimension BLOCK_H at a time (gate and up products, silu * up,
and the down product accumulated in fp32), and adds the result into its own rows of x: no
workspace, x read twice (the second time from cache) and written once. `y` is rounded where LTX-2
rounds it (after the norm, after the scale, after the shift) in x's dtype, `1 + scale` in scale's;
the hidden activations stay fp32 until the down product's operand (fp32 inputs: full-precision
products, not tf32). Channels: a power of two from 16 to 128 (at 256 the staged weight tiles would
not fit an H200's shared memory: ~96 KB a stage, counted, not run); `supports(channels)` says so.

`swiglu_residual_triton` always launches the kernel (a CUDA device or Triton's interpreter);
`swiglu_residual_torch` is the same computation in plain torch, 16384 tokens at a time (LTX-2's
own tile: bounded memory off CUDA); `swiglu_residual_` picks the first on CUDA or in the
interpreter, else the second.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.na3d_triton import interpreting

EPS = 1e-6  # LTX-2's chunked MLP passes its own 1e-6, not the norm module's eps
CHANNELS = (16, 32, 64, 128)
TORCH_TILE = 16384
CONFIGS = {  # (BLOCK_M, BLOCK_H, num_warps, num_stages); the first is the default (fastest on the H200)
    "m128h64w8s3": (128, 64, 8, 3),
    "m128h64w8s2": (128, 64, 8, 2),
    "m64h64w4s3": (64, 64, 4, 3),
    "m128h128w8s2": (128, 128, 8, 2),
    "m64h128w4s2": (64, 128, 4, 2),
}
DEFAULT_CONFIG = "m128h64w8s3"


@triton.jit
def _swiglu_residual(X, NW, SC, SH, WG, WU, WD, N, HID, eps, C: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_H: tl.constexpr, PRECISION: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, C)
    inside = (rows < N)[:, None]
    ptrs = X + rows[:, None] * C + c[None, :]
    dt = X.dtype.element_ty
    x = tl.load(ptrs, mask=inside, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, 1) / C + eps)
    nw = tl.load(NW + c).to(tl.float32)
    one_plus = (1.0 + tl.load(SC + c).to(tl.float32)).to(SC.dtype.element_ty).to(tl.float32)
    shift = tl.load(SH + c).to(tl.float32)
    y = (x * inv[:, None] * nw[None, :]).to(dt).to(tl.float32)
    y = (y * one_plus[None, :]).to(dt).to(tl.float32)
    y = (y + shift[None, :]).to(dt)
    acc = tl.zeros([BLOCK_M, C], tl.float32)
    hh = tl.arange(0, BLOCK_H)
    for j in range(0, HID, BLOCK_H):
        h = j + hh
        live = (h < HID)[None, :]
        wg = tl.load(WG + h[None, :] * C + c[:, None], mask=live, other=0.0)  # (C, BLOCK_H)
        wu = tl.load(WU + h[None, :] * C + c[:, None], mask=live, other=0.0)
        g = tl.dot(y, wg, input_precision=PRECISION)
        u = tl.dot(y, wu, input_precision=PRECISION)
        a = (g * tl.sigmoid(g) * u).to(dt)
        wd = tl.load(WD + c[None, :] * HID + h[:, None], mask=(h < HID)[:, None], other=0.0)  # (BLOCK_H, C)
        acc = tl.dot(a, wd, acc, input_precision=PRECISION)
    x = tl.load(ptrs, mask=inside, other=0.0).to(tl.float32)
    tl.store(ptrs, (x + acc).to(dt), mask=inside)


def supports(channels: int) -> bool:
    """Whether the fused kernel takes rows of `channels`."""
    return channels in CHANNELS


def _channel(t: torch.Tensor, c: int, what: str) -> torch.Tensor:
    if t.numel() != c:
        raise ValueError(f"{what} must hold one value per channel ({c}); got shape {tuple(t.shape)}")
    return t.reshape(c).contiguous()


def _check(x, norm_weight, scale, shift, w_gate, w_up, w_down):
    if x.dim() < 2 or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous (..., C) tensor; got shape {tuple(x.shape)}, strides {x.stride()}")
    c = x.shape[-1]
    hidden = w_gate.shape[0]
    if w_gate.shape != (hidden, c) or w_up.shape != (hidden, c) or w_down.shape != (c, hidden):
        raise ValueError(f"weights must be w_gate, w_up (hidden, {c}) and w_down ({c}, hidden); got "
                         f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    return c, hidden, *(_channel(t, c, n) for t, n in ((norm_weight, "norm_weight"), (scale, "scale"),
                                                        (shift, "shift")))


def swiglu_residual_(x: torch.Tensor, norm_weight: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                     w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, eps: float = EPS,
                     config: str = DEFAULT_CONFIG) -> torch.Tensor:
    """x += swiglu(modulate(rms_norm(x))), in place (module docstring); returns x."""
    run = swiglu_residual_triton if x.device.type == "cuda" or interpreting() else swiglu_residual_torch
    return run(x, norm_weight, scale, shift, w_gate, w_up, w_down, eps, config=config)


def swiglu_residual_triton(x: torch.Tensor, norm_weight: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                           w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, eps: float = EPS,
                           config: str = DEFAULT_CONFIG) -> torch.Tensor:
    """The fused kernel, in place on x (a CUDA tensor, or any under Triton's interpreter)."""
    c, hidden, nw, sc, sh = _check(x, norm_weight, scale, shift, w_gate, w_up, w_down)
    if not supports(c):
        raise ValueError(f"the fused kernel takes {', '.join(map(str, CHANNELS))} channels; got {c}")
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; expected one of {', '.join(CONFIGS)}")
    block_m, block_h, warps, stages = CONFIGS[config]
    n = x.numel() // c
    if n:
        wg, wu, wd = (w.to(x.dtype).contiguous() for w in (w_gate, w_up, w_down))
        precision = "ieee" if x.dtype == torch.float32 else "tf32"  # tf32: unused for half operands
        _swiglu_residual[(triton.cdiv(n, block_m),)](x, nw, sc, sh, wg, wu, wd, n, hidden, eps, C=c, BLOCK_M=block_m,
                                                     BLOCK_H=block_h, PRECISION=precision, num_warps=warps,
                                                     num_stages=stages)
    return x


def swiglu_residual_torch(x: torch.Tensor, norm_weight: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                          w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, eps: float = EPS,
                          config: str | None = None) -> torch.Tensor:
    """The kernel's computation in plain torch, in place on x (its roundings included), TORCH_TILE
    tokens at a time; `config` is the kernel's and unused here."""
    del config
    c, _, nw, sc, sh = _check(x, norm_weight, scale, shift, w_gate, w_up, w_down)
    dt = x.dtype
    one_plus = (1.0 + sc.float()).to(sc.dtype).float()
    wg, wu, wd = (w.float() for w in (w_gate, w_up, w_down))
    rows = x.view(-1, c)
    for start in range(0, rows.shape[0], TORCH_TILE):
        tile = rows[start:start + TORCH_TILE]
        xf = tile.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * nw.float()).to(dt).float()
        y = (y * one_plus).to(dt).float()
        y = (y + sh.float()).to(dt).float()
        a = (torch.nn.functional.silu(y @ wg.t()) * (y @ wu.t())).to(dt).float()
        tile.copy_((xf + a @ wd.t()).to(dt))
    return x
