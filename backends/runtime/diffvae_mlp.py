"""ltx-tui's stage-5 MLP for LTX-2's chunked DiffVAE blocks: one fused kernel in place of LTX-2's tiles.

LTX-2's chunked block ends with `residual_modulating_mlp(x, mlp, norm, scale, shift, tile)`:
`x += swiglu(modulate(rms_norm(x)))` as the opaque op `ltx_core::swiglu_tiled_residual_modulated`,
whose token tiles run eager norm, modulation, GEMMs and element-wise passes. `residual_mlp` takes
the same arguments and runs `kernels.swiglu_residual` (as the custom op `ltx_tui::swiglu_residual`,
which torch.compile keeps whole inside LTX-2's compiled block): one pass over x, no
workspace (the tile is not needed). The runtime puts it in place of LTX-2's function for the
blocks it lays out whose widths the kernel takes (`runtime.ltx2`). Inference only, as the NA.
"""

from __future__ import annotations

import torch

from backends.runtime.attention import INFERENCE_ONLY
from kernels.swiglu_residual import EPS, swiglu_residual_


@torch.library.custom_op("ltx_tui::swiglu_residual", mutates_args=("x",))
def _swiglu_residual_op(x: torch.Tensor, norm_weight: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor,
                        w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, eps: float) -> None:
    swiglu_residual_(x, norm_weight, scale, shift, w_gate, w_up, w_down, eps)


@_swiglu_residual_op.register_fake
def _swiglu_residual_fake(x, norm_weight, scale, shift, w_gate, w_up, w_down, eps) -> None:
    return None


def residual_mlp(x: torch.Tensor, mlp, norm, scale: torch.Tensor, shift: torch.Tensor, tile=None) -> torch.Tensor:
    """x += swiglu(modulate(rms_norm(x))), in place (LTX-2's `residual_modulating_mlp` arguments)."""
    del tile  # no workspace to bound
    if x.numel() == 0:
        return x
    if torch.is_grad_enabled() and (x.requires_grad or mlp.w_gate.weight.requires_grad):
        raise RuntimeError(f"ltx-tui's fused DiffVAE MLP: {INFERENCE_ONLY}")
    x = x if x.is_contiguous() else x.contiguous()
    run = _swiglu_residual_op if torch.compiler.is_compiling() else swiglu_residual_  # eager: no op dispatch
    run(x, norm.weight, scale, shift, mlp.w_gate.weight, mlp.w_up.weight, mlp.w_down.weight, EPS)
    return x
