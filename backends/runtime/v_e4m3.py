"""v of the DiT's video self-attention in e4m3 straight from its GEMM, for cuDNN's fp8 attention.

With `sdpa_cudnn_fp8`, each video self-attention quantized v itself: a pass for its amax and a cast
(70 + 94 us a block at 24576 tokens on the H100, bench/RESULTS.md "thirteenth round"). Here that
attention's `to_v` is `VProjection`, an fp8 linear by one scale a tensor (W by one, x's rows by one),
so that in a compiled block `runtime.shared_rows` can:
- have the AdaLN norm before the attention write x's rows by one scale bounded from its modulation
  (`ltx_tui::ada_bound`, as for the cuBLASLt FeedForward; to_q and to_k read those rows too), and
- where v goes only into `ltx_tui::sdpa_fp8_rows`, make the GEMM write v in e4m3 itself
  (`ltx_tui::fp8_tensor_mm_e4m3`) by a scale known before it runs: |v_ij| <= ||x_i|| ||w_j|| + |b_j|
  (Cauchy-Schwarz), the rows' norms bounded by the AdaLN and the weights' by `weight_bound`.
  `torch._scaled_mm` takes that scale through scale_a / s_v and the bias / s_v.
So v's amax pass and its cast go, and its GEMM writes half the bytes. Elsewhere (eagerly, or v used
by more than the attention: LTX-2's perturbation blend) the projection writes v in the activations'
dtype, its x scale from x's amax.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from backends.runtime import shared_rows
from backends.runtime.quant import FP8ScaledMMLinear, tensor_rows
from kernels.int8_gemm import FP8_MAX

E4M3 = torch.float8_e4m3fn
X_ROUNDING = 1 + 2**-4  # e4m3 rounds each element of x by at most this factor: the rows' norms too
MARGIN = 1.02  # over the bound: fp8 fast accumulation, the bf16 rounding of bias / s_v
# Off until measured on a GPU (written in a session without one); bench/ltx2_dit.py's `:v-e4m3` turns it on.
ENABLED = False


def _mm(q, xs, xnorm, w, ws, wb, bias, out_dtype) -> torch.Tensor:
    b = None if bias is None else bias.to(out_dtype)
    return torch._scaled_mm(q, w.t(), scale_a=xs[:1], scale_b=ws, bias=b, out_dtype=out_dtype,
                            use_fast_accum=FP8ScaledMMLinear.fast_accum)


@torch.library.custom_op("ltx_tui::fp8_tensor_mm", mutates_args=())
def _mm_op(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w: torch.Tensor, ws: torch.Tensor,
           wb: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """x @ W.T + b for x = q * xs[0] and W = w * ws, one scale each (`wb`, `xnorm`: see `mm_e4m3`)."""
    return _mm(q, xs, xnorm, w, ws, wb, bias, out_dtype)


@_mm_op.register_fake
def _mm_fake(q, xs, xnorm, w, ws, wb, bias, out_dtype):
    return q.new_empty((q.shape[0], w.shape[0]), dtype=out_dtype)


def mm_e4m3(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w: torch.Tensor, ws: torch.Tensor,
            wb: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(v8, s_v): x @ W.T + b in float8_e4m3fn by the one scale s_v ((1,) fp32), from `xnorm` ((1,), a
    bound on x's rows' L2 norms) and `wb` (`VProjection.weight_bound`): no element of v / s_v can pass
    e4m3's 448 (up to fast accumulation's rounding, which MARGIN is meant to cover: a GPU test to come)."""
    s_v = torch.addcmul(wb[1:], xnorm, wb[:1])  # s_v = xnorm * c1 + c2: one launch
    b = None if bias is None else (bias.float() / s_v).to(bias.dtype)
    v8 = torch._scaled_mm(q, w.t(), scale_a=xs[:1] / s_v, scale_b=ws, bias=b, out_dtype=E4M3,
                          use_fast_accum=FP8ScaledMMLinear.fast_accum)
    return v8, s_v


@torch.library.custom_op("ltx_tui::fp8_tensor_mm_e4m3", mutates_args=())
def _mm_e4m3_op(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w: torch.Tensor, ws: torch.Tensor,
                wb: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return mm_e4m3(q, xs, xnorm, w, ws, wb, bias)


@_mm_e4m3_op.register_fake
def _mm_e4m3_fake(q, xs, xnorm, w, ws, wb, bias):
    return q.new_empty((q.shape[0], w.shape[0]), dtype=E4M3), q.new_empty((1,), dtype=torch.float32)


class VProjection(FP8ScaledMMLinear):
    """fp8-scaled-mm by one scale a tensor, with the bound `mm_e4m3` needs: `weight_bound` (c1, c2), s_v =
    xnorm * c1 + c2 for c1 = max_j ||w_j|| X_ROUNDING MARGIN / 448, c2 = max|b| MARGIN / 448."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear, scales="tensor")
        rows = (self.weight.float() * self.weight_scale).norm(dim=1).amax()
        bias = torch.zeros((), device=rows.device) if self.bias is None else self.bias.detach().float().abs().amax()
        bound = torch.stack([rows * X_ROUNDING, bias.to(rows.device).clamp(min=1e-30)]) * (MARGIN / FP8_MAX)
        self.register_buffer("weight_bound", bound.float())

    def extra_repr(self) -> str:
        return super().extra_repr() + ", v in e4m3 from the GEMM where only cuDNN's fp8 attention reads it"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2, lead = self._flat(x)
        q, xs, xnorm = tensor_rows(x2)
        mm = _mm_op if torch.compiler.is_compiling() else _mm
        y = mm(q, xs, xnorm, self.weight, self.weight_scale, self.weight_bound, self.bias, x.dtype)
        return y.reshape(*lead, self.out_features)


def targets(model: nn.Module, names: tuple[str, ...]) -> list[str]:
    """The linears among `names` that `VProjection` takes: `to_v` of LTX-2's video self-attention
    (a block's `attn1`; `audio_attn1`'s 126 tokens never take the fp8 attention) whose attention runs
    cuDNN's fp8 path with static q/k scales (`DenseFunction.for_module`), in bf16/fp16, where the pass
    can fold its rows into the norm (no gate linear beside it, `shared_rows.FOLD`): else it would
    only add a pass over x."""
    chosen = []
    for name in names if ENABLED else ():
        parent, _, leaf = name.rpartition(".")
        if leaf != "to_v" or parent.rpartition(".")[2] != "attn1":
            continue
        module = model.get_submodule(parent)
        linear = getattr(module, "to_v", None)
        if (type(linear) is nn.Linear and linear.weight.dtype in (torch.bfloat16, torch.float16)
                and getattr(module, "to_gate_logits", None) is None  # a gate's linear reads x too: no fold
                and shared_rows.FOLD and getattr(module.attention_function, "static_qk", False)):
            chosen.append(name)
    return chosen


def install(model: nn.Module, names: list[str]) -> list[str]:
    """Put `VProjection` in the place of each linear of `names` (`targets`'); returns them."""
    for name in names:
        parent, _, leaf = name.rpartition(".")
        module = model.get_submodule(parent)
        setattr(module, leaf, VProjection(getattr(module, leaf)))
    return names
