"""transformer.fast_norm: `kernels.adaln` in the norm slots of LTX-2's DiT blocks.

LTX-2 v1.2.0's `BasicAVTransformerBlock` calls its AdaLN norm and its gated residual + norm
through two attributes, `ada_zero_function` and `post_sa_function` (from `TransformerOpsConfig`,
ltx_core/model/transformer/ops.py). `install` sets them on every block to `FastAdaZero` /
`FastPostSA`, which run `kernels.adaln`'s one-pass kernels where the call's tensors fit them.
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
    """A kernel for one slot, with the block's own function as the fallback."""

    kernel: Callable = None

    def __init__(self, own: Callable) -> None:
        self.own = own

    def __call__(self, *args):
        if not torch.compiler.is_compiling() and (args[0].is_cuda or interpreting()):
            try:
                return type(self).kernel(*args)
            except ValueError:  # arguments the kernel does not take: the block's own function
                pass
        return self.own(*args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(own={self.own!r})"


class FastAdaZero(_Fast):
    """ada_zero(x, eps, scale, shift) = rms_norm(x) * (1 + scale) + shift in one pass."""

    kernel = staticmethod(adaln.ada_zero)


class FastPostSA(_Fast):
    """post_sa(x, y, weight, eps, gate) = (x + y * gate, rms_norm of that) in one pass."""

    kernel = staticmethod(adaln.post_sa)


def blocks_with_slots(model: nn.Module) -> list[str]:
    """Names of the modules with both norm slots (LTX-2's DiT blocks)."""
    return [name for name, m in model.named_modules() if all(callable(getattr(m, s, None)) for s in SLOTS)]


def install(model: nn.Module) -> list[str]:
    """Put `FastAdaZero` / `FastPostSA` in every block's slots (once); returns the blocks' names."""
    names = blocks_with_slots(model)
    for name in names:
        block = model.get_submodule(name)
        for slot, fast in zip(SLOTS, (FastAdaZero, FastPostSA)):
            own = getattr(block, slot)
            if not isinstance(own, fast):
                setattr(block, slot, fast(own))
    return names
