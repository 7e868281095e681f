"""Quantized replacements of `nn.Linear`, and `plan_quantization` / `quantize_linears` to install them.

Scope (`transformer.quantization_scope`): `ltx2-blocks` takes the linears LTX-2's own fp8-cast
takes (ltx_core/quantization/fp8_cast.py): inside `transformer_blocks.`, named `*.to_q`,
`*.to_k`, `*.to_v`, `*.to_out.0`, `*ff.net.0.proj`, `*ff.net.2` (audio FF too); never
patchify, AdaLN or the output projection. `all-linears` takes every `nn.Linear`. A linear the
method cannot run (e.g. fp8-scaled-mm with a dimension not a multiple of 16) stays as it was
and is listed with the reason.

- `fp8-cast`: float8_e4m3fn weights with a per-output-channel scale, upcast in forward (any device).
- `fp8-scaled-mm`: float8 weights and row-wise dynamic activation scales through
  `torch._scaled_mm` (SM >= 8.9) with fast accumulation (Hopper's fp8 tensor cores skip the
  periodic promotion of partial sums to fp32: 1.23x at 24576x4096x16384 on the H200, the same
  error, bench/RESULTS.md "bench/kernels.py"); `scales="tensor"` uses one scale per tensor instead.
  On CUDA, row-scaled calls of at most `FP8ScaledMMLinear.few_rows` rows (LTX-2's 126 audio tokens)
  run `kernels.fp8_small_mm` instead of cuBLAS: K split across CTAs (1.3x cuBLAS at 2048 -> 2048,
  2.3x at 8192 -> 2048 in a CUDA graph).
  In LTX-2's FeedForward (`net` = GELUApprox(proj), Identity, Linear) whose two linears both go
  fp8-scaled-mm with row scales, the tanh GELU runs inside the second linear's row quantization
  (`GeluQuantized`): the widest activation of a block (tokens x 16384) is written once in bf16 and
  read once, not written, read, written again by the GELU and read by the quantization.
- `int8-w8a8`: int8 weights (per-channel scales) and dynamic per-row int8 activations, on
  ltx-tui's Triton int8 GEMM (plain torch on the CPU).
NVFP4 is LTX-2's loader's (its `--quantization nvfp4-*` policies act while the model is built),
and nothing here runs fp8-blockwise: `backends.config.values` says so for the plan.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels.fp8_small_mm import MAX_ROWS, small_rows_mm
from kernels.int8_gemm import FP8_MAX, INT8_K_MAX, INT8_MAX, int8_linear, quantize_rows
from kernels.scale_cast import scale_cast

LTX2_BLOCK_PREFIX = "transformer_blocks."
LTX2_BLOCK_LINEARS = (".to_q", ".to_k", ".to_v", ".to_out.0", "ff.net.0.proj", "ff.net.2")
SCOPES = ("ltx2-blocks", "all-linears")


class QuantizationUnavailable(RuntimeError):
    """The quantization method cannot run here; the message names what is missing."""


def _per_channel(weight: torch.Tensor, qmax: float) -> tuple[torch.Tensor, torch.Tensor]:
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / qmax
    return w / scale[:, None], scale


class _QuantLinear(nn.Module):
    """Common state: the shape, the float dtype of activations, an optional bias."""

    method = ""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, method={self.method}, bias={self.bias is not None}"

    def _flat(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        return x.reshape(-1, x.shape[-1]), x.shape[:-1]


class FP8CastLinear(_QuantLinear):
    method = "fp8-cast"

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        w, scale = _per_channel(linear.weight, FP8_MAX)
        self.weight = nn.Parameter(w.to(torch.float8_e4m3fn), requires_grad=False)
        self.register_buffer("weight_scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight.to(x.dtype) * self.weight_scale.to(x.dtype)[:, None]
        return F.linear(x, w, None if self.bias is None else self.bias.to(x.dtype))


class QuantizedRows(NamedTuple):
    """Activations already quantized per row for an fp8-scaled-mm linear: (rows, K) fp8, their fp32
    scales, and the leading shape and dtype of the activations they stand for."""

    q: torch.Tensor
    scale: torch.Tensor
    lead: tuple[int, ...]
    dtype: torch.dtype


@torch.library.custom_op("ltx_tui::fp8_rows", mutates_args=())
def _fp8_rows_op(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_rows(x, torch.float8_e4m3fn, gelu)


@_fp8_rows_op.register_fake
def _fp8_rows_fake(x, gelu):
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape[:1], dtype=torch.float32)


def _fp8_rows(x: torch.Tensor, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 row quantization of a 2-D activation (`quantize_rows`). While torch.compile traces, one
    functional custom op, which `runtime.shared_rows` merges where LTX-2's attention quantizes one
    input for to_q, to_k and to_v (to_k and to_v of one context)."""
    if torch.compiler.is_compiling():
        return _fp8_rows_op(x, gelu)
    return quantize_rows(x, torch.float8_e4m3fn, gelu)


def _tensor_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xf = x.float()
    s = (xf.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(1)
    return (xf / s).to(torch.float8_e4m3fn), s.expand(x.shape[0]).contiguous(), xf.norm(dim=1).amax().reshape(1)


@torch.library.custom_op("ltx_tui::fp8_tensor_rows", mutates_args=())
def _tensor_rows_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _tensor_rows(x)


@_tensor_rows_op.register_fake
def _tensor_rows_fake(x):
    return (x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape[:1], dtype=torch.float32),
            x.new_empty((1,), dtype=torch.float32))


def tensor_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (T, D) in e4m3 by one scale: (rows, that scale in each row's place (T,), the rows' largest L2
    norm (1,)). While torch.compile traces, one custom op, which `runtime.shared_rows` folds into the
    AdaLN norm that wrote x (a `fused_ff.FusedFeedForward`'s input, a `v_e4m3.VProjection`'s)."""
    return _tensor_rows_op(x) if torch.compiler.is_compiling() else _tensor_rows(x)


def _dequant(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if q.is_cuda:
        return scale_cast(q, scale, dtype, False)
    return (q.float() * scale[:, None]).to(dtype)


@torch.library.custom_op("ltx_tui::fp8_dequant_rows", mutates_args=())
def _dequant_rows_op(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _dequant(q, scale, dtype)


@_dequant_rows_op.register_fake
def _dequant_rows_fake(q, scale, dtype):
    return q.new_empty(q.shape, dtype=dtype)


def dequant_rows(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp8 rows (2-D, one fp32 scale a row) back to `dtype`. While torch.compile traces, one custom op:
    where an fp8-scaled-mm linear quantizes the result again, `runtime.shared_rows` hands it the rows
    themselves (cuDNN's fp8 attention output into `to_out`)."""
    if torch.compiler.is_compiling():
        return _dequant_rows_op(q, scale, dtype)
    return _dequant(q, scale, dtype)


@torch.library.custom_op("ltx_tui::fp8_few_rows_mm", mutates_args=())
def _few_rows_op(x: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sb: torch.Tensor,
                 bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    return small_rows_mm(x, sa, w, sb, bias, out_dtype)


@_few_rows_op.register_fake
def _few_rows_fake(x, sa, w, sb, bias, out_dtype):
    return x.new_empty((x.shape[0], w.shape[0]), dtype=out_dtype)


class FP8ScaledMMLinear(_QuantLinear):
    method = "fp8-scaled-mm"
    fast_accum = True  # bench/ltx2_dit.py's ablation turns it off
    few_rows = MAX_ROWS  # row-scaled calls of at most this many rows on CUDA: kernels.fp8_small_mm (0: never)

    def __init__(self, linear: nn.Linear, scales: str = "row") -> None:
        super().__init__(linear)
        if scales not in ("row", "tensor"):
            raise ValueError(f"scales must be 'row' or 'tensor', got {scales!r}")
        self.scales = scales
        if scales == "row":
            w, scale = _per_channel(linear.weight, FP8_MAX)
        else:
            wf = linear.weight.detach().float()
            scale = (wf.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(1)
            w = wf / scale
        self.weight = nn.Parameter(w.to(torch.float8_e4m3fn), requires_grad=False)
        self.register_buffer("weight_scale", scale.float())

    def forward(self, x: torch.Tensor | QuantizedRows) -> torch.Tensor:
        if isinstance(x, QuantizedRows):  # from GeluQuantized
            if self.scales != "row":
                raise ValueError("QuantizedRows carry row scales; this linear has one scale per tensor")
            return self._mm(x.q, x.scale[:, None], self.weight_scale[None, :], x.lead, x.dtype)
        x2, lead = self._flat(x)
        if self.scales == "row":
            xq, xs = _fp8_rows(x2)
            sa, sb = xs[:, None], self.weight_scale[None, :]
        else:
            sa = (x2.abs().amax().float().clamp(min=1e-12) / FP8_MAX).reshape(())
            xq = (x2.float() / sa).to(torch.float8_e4m3fn)
            sb = self.weight_scale.reshape(())
        return self._mm(xq, sa, sb, lead, x.dtype)

    def _mm(self, xq, sa, sb, lead, dtype) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(dtype)
        if xq.is_cuda and self.scales == "row" and xq.shape[0] <= self.few_rows:
            mm = _few_rows_op if torch.compiler.is_compiling() else small_rows_mm
            y = mm(xq, sa.reshape(-1), self.weight, self.weight_scale, bias, dtype)
            return y.reshape(*lead, self.out_features)
        y = torch._scaled_mm(xq, self.weight.t(), scale_a=sa, scale_b=sb, bias=bias, out_dtype=dtype,
                             use_fast_accum=self.fast_accum)
        return y.reshape(*lead, self.out_features)


class GeluQuantized(nn.Module):
    """LTX-2's GELUApprox (tanh GELU of its `proj`) feeding an fp8-scaled-mm linear with row scales:
    `proj`'s output goes through the GELU and the row quantization in one pass, and the next linear
    takes the `QuantizedRows`."""

    enabled = True  # bench/ltx2_dit.py's ablation turns it off

    def __init__(self, proj: FP8ScaledMMLinear) -> None:
        super().__init__()
        self.proj = proj

    def forward(self, x: torch.Tensor) -> QuantizedRows:
        h = self.proj(x)
        q, s = _fp8_rows(h.reshape(-1, h.shape[-1]), gelu=True)
        return QuantizedRows(q, s, tuple(h.shape[:-1]), h.dtype)


def _ltx2_gelu(module: nn.Module) -> bool:
    """LTX-2 v1.2.0's GELUApprox (ltx_core/model/transformer/gelu_approx.py): tanh GELU of `proj`."""
    cls = type(module)
    return cls.__name__ == "GELUApprox" and cls.__module__ == "ltx_core.model.transformer.gelu_approx"


def ltx2_feed_forward_net(net: nn.Module) -> bool:
    """LTX-2 v1.2.0's FeedForward `net`: GELUApprox (tanh GELU of `proj`), Identity, a linear."""
    return isinstance(net, nn.Sequential) and len(net) == 3 and _ltx2_gelu(net[0]) and type(net[1]) is nn.Identity


def fuse_gelu(model: nn.Module) -> list[str]:
    """Put `GeluQuantized` in every LTX-2 FeedForward `net` (GELUApprox, Identity, Linear) whose two
    linears are fp8-scaled-mm with row scales; returns the names of the `net`s."""
    fused = []
    for name, net in model.named_modules() if GeluQuantized.enabled else ():
        if (ltx2_feed_forward_net(net)
                and all(isinstance(m, FP8ScaledMMLinear) and m.scales == "row" for m in (net[0].proj, net[2]))):
            net[0] = GeluQuantized(net[0].proj)
            fused.append(name)
    return fused


class Int8Linear(_QuantLinear):
    method = "int8-w8a8"

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear)
        w, scale = _per_channel(linear.weight, INT8_MAX)
        self.weight = nn.Parameter(w.round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8), requires_grad=False)
        self.register_buffer("weight_scale", scale.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2, lead = self._flat(x)
        xq, xs = quantize_rows(x2, torch.int8)
        out_dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.float32
        y = int8_linear(xq, xs, self.weight, self.weight_scale, self.bias, out_dtype=out_dtype)
        return y.to(x.dtype).reshape(*lead, self.out_features)


BUILDERS: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "fp8-cast": FP8CastLinear,
    "fp8-scaled-mm": FP8ScaledMMLinear,
    "int8-w8a8": Int8Linear,
}


def cannot_run(method: str, linear: nn.Linear) -> str | None:
    """Why `method` cannot run this linear (None: it can)."""
    k, n = linear.in_features, linear.out_features
    if method == "fp8-scaled-mm" and (k % 16 or n % 16):
        return f"torch._scaled_mm needs in/out features that are multiples of 16 (here {k} -> {n})"
    if method == "int8-w8a8" and k > INT8_K_MAX:
        return f"in_features {k} > {INT8_K_MAX}: the int32 accumulator of the int8 GEMM could overflow"
    if not linear.weight.is_floating_point():
        return f"weight is {linear.weight.dtype}, not a float"
    return None


def in_scope(name: str, scope: str) -> bool:
    if scope == "all-linears":
        return True
    return LTX2_BLOCK_PREFIX in name and name.endswith(LTX2_BLOCK_LINEARS)


@dataclass(frozen=True)
class QuantizationPlan:
    """Which linears `method` replaces (`targets`) and which it leaves, with the reason (`skipped`)."""

    method: str
    targets: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]

    def apply(self, model: nn.Module) -> list[str]:
        for name in self.targets:
            parent_name, _, attr = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, BUILDERS[self.method](getattr(parent, attr)))
        return list(self.targets)


def plan_quantization(model: nn.Module, method: str, scope: str = "ltx2-blocks",
                      include: str | None = None) -> QuantizationPlan:
    """The linears of `model` that `method` will replace: in `scope`, matching the glob `include`."""
    if method != "none" and method not in BUILDERS:
        raise ValueError(f"unknown quantization {method!r}; expected none or one of {', '.join(BUILDERS)}")
    if scope not in SCOPES:
        raise ValueError(f"unknown quantization scope {scope!r}; expected one of {', '.join(SCOPES)}")
    if method == "none":
        return QuantizationPlan(method, (), ())
    targets, skipped = [], []
    for name, m in model.named_modules():
        if not name or type(m) is not nn.Linear or not in_scope(name, scope):
            continue
        if include is not None and not fnmatch.fnmatch(name, include):
            continue
        why = cannot_run(method, m)
        if why:
            skipped.append((name, why))
        else:
            targets.append(name)
    return QuantizationPlan(method, tuple(targets), tuple(skipped))


def quantize_linears(model: nn.Module, method: str, include: str | None = None,
                     scope: str = "all-linears") -> list[str]:
    """Replace the `nn.Linear`s of `model` that `method` can run (names matching the glob
    `include`, if given); returns the names replaced."""
    return plan_quantization(model, method, scope, include).apply(model)
