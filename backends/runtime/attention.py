"""The 3D neighborhood-attention backend registry.

`na3d(q, k, v, kernel_size, backend=...)` runs one of: `natten` (or one NATTEN kernel,
spelt `natten:hopper-fna` etc.), `triton` (ltx-tui's fused kernel), `eager_sdpa` (tiled
SDPA, any device) and `reference` (brute force, small inputs). Whether a backend can run
is decided by the rules in `backends.config.rules`; `available_backends(q)` says why not.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from backends.probe.capability import Availability, Capability, probe
from backends.config.options import NattenKernel, Profile
from backends.config.rules import NATTEN_AUTO_ORDER, RULES, Facts, natten_kernel_check
from kernels.na3d_args import BoolOr3, IntOr3, check_na3d

NATTEN_KERNELS = tuple(f"natten:{k.value}" for k in NATTEN_AUTO_ORDER)
BACKENDS = ("auto", "natten", *NATTEN_KERNELS, "triton", "eager_sdpa", "reference")
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run these tensors here; the message says why."""


@functools.lru_cache(maxsize=1)
def _live_capability() -> Capability:
    return probe()


def _facts(q: torch.Tensor, capability: Capability | None) -> Facts:
    cap = (capability or _live_capability()).for_device(q.device)
    return Facts(cap, Profile(), dtype=_DTYPE_NAMES.get(q.dtype, str(q.dtype)), head_dim=q.shape[-1])


def available_backends(q: torch.Tensor, capability: Capability | None = None) -> dict[str, Availability]:
    """Each backend's availability for tensors like `q` (device, dtype, head_dim), with the reason."""
    f = _facts(q, capability)
    result: dict[str, Availability] = {}
    kernels = {k: natten_kernel_check(k, f) for k in NATTEN_AUTO_ORDER}
    usable = [k for k, a in kernels.items() if a.available]
    result["natten"] = Availability(True) if usable else Availability(False, RULES["natten.usable"].message(f))
    result.update({f"natten:{k.value}": a for k, a in kernels.items()})
    triton_ok = RULES["triton.na"].holds(f)
    result["triton"] = Availability(triton_ok, None if triton_ok else RULES["triton.na"].message(f))
    if triton_ok and q.dtype not in _DTYPE_NAMES:
        result["triton"] = Availability(False, f"dtype {q.dtype} not supported (fp32/fp16/bf16)")
    result["eager_sdpa"] = (Availability(True) if q.dtype in _DTYPE_NAMES
                            else Availability(False, f"dtype {q.dtype} not supported (fp32/fp16/bf16)"))
    result["reference"] = Availability(True)
    return result


def choose_backend(q: torch.Tensor, backend: str = "auto", capability: Capability | None = None) -> str:
    """The concrete backend `backend` means for `q`; raises BackendUnavailable with the reason.

    `auto` takes triton on CUDA (fastest measured, bench/na3d.py), then a NATTEN CUDA kernel,
    then eager_sdpa. NATTEN's flex-fna is taken only when asked for: unfused, it
    materialises every score.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown NA backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    avail = available_backends(q, capability)
    if backend == "auto":
        for name in ("triton", *(n for n in NATTEN_KERNELS if n != "natten:flex-fna"), "eager_sdpa"):
            if avail[name].available:
                return name
        raise BackendUnavailable("no NA backend can run these tensors: "
                                 + "; ".join(f"{n}: {a.reason}" for n, a in avail.items() if not a.available))
    if backend == "natten":
        if not avail["natten"].available:
            raise BackendUnavailable(f"natten cannot run here: {avail['natten'].reason}")
        return next(n for n in NATTEN_KERNELS if avail[n].available)
    if not avail[backend].available:
        raise BackendUnavailable(f"{backend} cannot run here: {avail[backend].reason}")
    return backend


def _run_natten(kernel: str) -> Callable:
    def run(q, k, v, kernel_size, *, scale=None, is_causal=False):
        import natten

        return natten.na3d(q, k, v, kernel_size, is_causal=is_causal, scale=scale, backend=kernel)
    return run


def implementation(name: str) -> Callable:
    """The function behind concrete backend `name`: f(q, k, v, kernel, *, scale, is_causal).

    Kept out of torch.compile graphs (torch.compiler.disable): the kernels launch their own code.
    """
    return torch.compiler.disable(_implementation(name))


def _implementation(name: str) -> Callable:
    if name.startswith("natten:"):
        return _run_natten(NattenKernel(name.split(":", 1)[1]).value)
    if name == "triton":
        from kernels.na3d_triton import na3d_triton
        return na3d_triton
    if name == "eager_sdpa":
        from kernels.na3d_eager import na3d_eager
        return na3d_eager
    from kernels.na3d_reference import na3d_reference
    return na3d_reference


def na3d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3, *, backend: str = "auto",
         scale: float | None = None, is_causal: BoolOr3 = False,
         capability: Capability | None = None) -> torch.Tensor:
    """3D neighborhood attention on (B, T, H, W, heads, head_dim) tensors with the chosen backend."""
    kernel, causal = check_na3d(q, k, v, kernel_size, is_causal)
    name = choose_backend(q, backend, capability)
    return _implementation(name)(q, k, v, kernel, scale=scale, is_causal=causal)
