"""transformer.fast_norm: `kernels.adaln` in the norm slots of LTX-2's DiT blocks.

LTX-2 v1.2.0's `BasicAVTransformerBlock` calls its AdaLN norm and its gated residual + norm
through two attributes, `ada_zero_function` and `post_sa_function` (from `TransformerOpsConfig`,
ltx_core/model/transformer/ops.py). Where a slot holds LTX-2's own function, `install` puts
`FastAdaZero` / `FastPostSA` there, which run `kernels.adaln`'s one-pass kernels where the call's
tensors fit them (`counts` says how often they did).
The block's own function runs instead while torch.compile traces (Inductor fuses these norms with
the ops around them: the residual add before, the fp8 row quantization after), off CUDA, and for
tensors the kernels refuse (a modulation in another dtype than x, a non-contiguous x). The profile
step also installs `runtime.timestep_rows` (as compile does): the modulation read from one row
where a modality's timesteps are equal across its tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from kernels import adaln
from kernels.na3d_triton import interpreting

SLOTS = ("ada_zero_function", "post_sa_function")


class _Fast:
    """A kernel for one slot, with the block's own function as the fallback; `runs` / `own_runs`
    count the calls each took."""

    kernel: Callable = None

    def __init__(self, own: Callable) -> None:
        self.own = own
        self.runs = self.own_runs = 0

    def __call__(self, *args):
        if not torch.compiler.is_compiling() and (args[0].is_cuda or interpreting()):
            try:
                out = type(self).kernel(*args)
            except adaln.Refused:  # arguments the kernel does not take: the block's own function
                pass
            else:
                self.runs += 1
                return out
            self.own_runs += 1
        return self.own(*args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(own={self.own!r})"


class FastAdaZero(_Fast):
    """ada_zero(x, eps, scale, shift) = rms_norm(x) * (1 + scale) + shift in one pass."""

    kernel = staticmethod(adaln.ada_zero)


class FastPostSA(_Fast):
    """post_sa(x, y, weight, eps, gate) = (x + y * gate, rms_norm of that) in one pass."""

    kernel = staticmethod(adaln.post_sa)


# LTX-2 v1.2.0's own functions of the slots (ltx_core/model/transformer/ops.py): what the kernels compute.
# Another function there (LTX-2's fp8-blockwise ops return quantized tensors) is left alone.
OWN = {"ada_zero_function": "PytorchAdaZeroFunction", "post_sa_function": "PytorchPostSAFunction"}
OPS_MODULE = "ltx_core.model.transformer.ops"


def _ltx2_own(function: Callable, slot: str) -> bool:
    cls = type(function)
    return cls.__name__ == OWN[slot] and cls.__module__ == OPS_MODULE


def blocks_with_slots(model: nn.Module) -> list[str]:
    """Names of the modules with both norm slots (LTX-2's DiT blocks)."""
    return [name for name, m in model.named_modules() if all(callable(getattr(m, s, None)) for s in SLOTS)]


def install(model: nn.Module) -> list[str]:
    """Put `FastAdaZero` / `FastPostSA` in every block slot that holds LTX-2's own function (once);
    returns the names of the blocks that have them."""
    names = []
    for name in blocks_with_slots(model):
        block = model.get_submodule(name)
        for slot, fast in zip(SLOTS, (FastAdaZero, FastPostSA)):
            own = getattr(block, slot)
            if _ltx2_own(own, slot):
                setattr(block, slot, fast(own))
        if all(isinstance(getattr(block, s), _Fast) for s in SLOTS):
            names.append(name)
    return names


def counts(model: nn.Module) -> tuple[int, int]:
    """(calls the kernels ran, calls the blocks' own functions ran instead) over `model`'s slots."""
    fast = [f for m in model.modules() for s in SLOTS if isinstance(f := getattr(m, s, None), _Fast)]
    return sum(f.runs for f in fast), sum(f.own_runs for f in fast)
