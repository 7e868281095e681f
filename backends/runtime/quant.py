"""Quantized replacements of `nn.Linear`, and `quantize_linears(model, method)` to install them.

- `fp8-cast`: float8_e4m3fn weights with a per-output-channel scale, upcast in forward (any device).
- `fp8-scaled-mm`: float8 weights and row-wise dynamic activation scales through
  `torch._scaled_mm` (SM >= 8.9); `scales="tensor"` uses one scale per tensor instead.
- `int8-w8a8`: int8 weights (per-channel scales) and dynamic per-row int8 activations, on
  ltx-tui's Triton int8 GEMM (plain torch on the CPU).
- `nvfp4-*`, `fp8-blockwise`: ltx-kernels' implementations when importable, else an error
  with the rule's message.
"""

from __future__ import annotations

import fnmatch
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from backends.probe.capability import import_optional
from kernels.int8_gemm import FP8_MAX, INT8_MAX, int8_linear, quantize_rows


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


class FP8ScaledMMLinear(_QuantLinear):
    method = "fp8-scaled-mm"

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2, lead = self._flat(x)
        if self.scales == "row":
            xq, xs = quantize_rows(x2, torch.float8_e4m3fn)
            sa, sb = xs[:, None], self.weight_scale[None, :]
        else:
            sa = (x2.abs().amax().float().clamp(min=1e-12) / FP8_MAX).reshape(())
            xq = (x2.float() / sa).to(torch.float8_e4m3fn)
            sb = self.weight_scale.reshape(())
        bias = None if self.bias is None else self.bias.to(x.dtype)
        y = torch._scaled_mm(xq, self.weight.t(), scale_a=sa, scale_b=sb, bias=bias, out_dtype=x.dtype)
        return y.reshape(*lead, self.out_features)


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


def _ltx_kernels_linear(method: str) -> Callable[[nn.Linear], nn.Module]:
    def build(linear: nn.Linear) -> nn.Module:
        mod, why = import_optional("ltx_kernels")
        if mod is None:
            raise QuantizationUnavailable(f"{method} needs ltx-kernels, which is not importable ({why})")
        factory = getattr(mod, "quantized_linear", None)
        if factory is None:
            raise QuantizationUnavailable(f"{method}: this ltx_kernels has no quantized_linear()")
        return factory(linear, method)
    return build


BUILDERS: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "fp8-cast": FP8CastLinear,
    "fp8-scaled-mm": FP8ScaledMMLinear,
    "int8-w8a8": Int8Linear,
    "nvfp4-cast": _ltx_kernels_linear("nvfp4-cast"),
    "nvfp4-prequant": _ltx_kernels_linear("nvfp4-prequant"),
    "fp8-blockwise": _ltx_kernels_linear("fp8-blockwise"),
}


def quantize_linears(model: nn.Module, method: str, include: str | None = None) -> list[str]:
    """Replace every `nn.Linear` of `model` (names matching the glob `include`, if given).

    Returns the qualified names replaced. `method` "none" replaces nothing.
    """
    if method == "none":
        return []
    if method not in BUILDERS:
        raise ValueError(f"unknown quantization {method!r}; expected none or one of {', '.join(BUILDERS)}")
    targets = [(name, m) for name, m in model.named_modules()
               if name and type(m) is nn.Linear and (include is None or fnmatch.fnmatch(name, include))]
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, BUILDERS[method](linear))
    return [name for name, _ in targets]
