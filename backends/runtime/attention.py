"""3D neighborhood attention: the backend registry and the callable the runtime installs.

Backends: `natten` (or one NATTEN kernel, spelt `natten:hopper-fna` etc.), `triton` (ltx-tui's
fused kernel), `eager_sdpa` (tiled SDPA, any device) and `reference` (brute force, for tests;
never installed by a profile). `triton` and `eager_sdpa` run as torch custom ops
(`ltx_tui::na3d_triton`, `ltx_tui::na3d_eager`), so torch.compile keeps a block that calls them
in one graph instead of breaking it (or turning compile off, as LTX-2 does without natten).

`NAFunction(backend)` follows LTX-2's NA protocol (`NAAttentionCallable`): called as
`fn(attn, q, k, v)` with q, k, v of shape (B, T, H, W, heads, head_dim), q already multiplied by
`attn.scale` (so the kernel runs with scale 1.0), the window in `attn.kernel_size`, q/k cast to
v's dtype. Which backend `auto` means is decided by `backends.config.rules.na_auto_choice`.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from backends.config.options import NABackend, NattenKernel, Profile
from backends.config.rules import (
    NATTEN_AUTO_ORDER,
    Facts,
    na_auto_choice,
    na_usable,
    natten_kernel_check,
)
from backends.machine.capability import Availability, Capability, probe
from kernels.na3d_args import BoolOr3, IntOr3, check_na3d

NATTEN_KERNELS = tuple(f"natten:{k.value}" for k in NATTEN_AUTO_ORDER)
RUNTIME_BACKENDS = ("natten", *NATTEN_KERNELS, "triton", "eager_sdpa")
BACKENDS = ("auto", *RUNTIME_BACKENDS, "reference")
DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


INFERENCE_ONLY = ("ltx-tui's kernels run inference only: run the forward under torch.inference_mode() "
                  "or torch.no_grad()")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run these tensors here; the message says why."""


@functools.lru_cache(maxsize=1)
def _live_capability() -> Capability:
    return probe()


def _facts(device: torch.device, dtype: torch.dtype, head_dim: int, capability: Capability | None) -> Facts:
    cap = (capability or _live_capability()).for_device(device)
    return Facts(cap, Profile(), dtype=DTYPE_NAMES.get(dtype, str(dtype)), head_dim=head_dim)


def available_backends(q: torch.Tensor, capability: Capability | None = None) -> dict[str, Availability]:
    """Each backend's availability for tensors like `q` (device, dtype, head_dim), with the reason."""
    f = _facts(q.device, q.dtype, q.shape[-1], capability)
    dtype_ok = q.dtype in DTYPE_NAMES
    bad_dtype = Availability(False, f"dtype {q.dtype} not supported (fp32/fp16/bf16)")
    result: dict[str, Availability] = {"natten": na_usable(NABackend.NATTEN, f)}
    result.update({f"natten:{k.value}": natten_kernel_check(k, f) for k in NATTEN_AUTO_ORDER})
    triton = na_usable(NABackend.TRITON, f)
    result["triton"] = bad_dtype if triton.available and not dtype_ok else triton
    result["eager_sdpa"] = Availability(True) if dtype_ok else bad_dtype
    result["reference"] = Availability(True)
    return result


# (backend, device, dtype, head_dim) -> the concrete backend, for this machine's live capability:
# the decoder makes hundreds of NA calls per decode, and deciding costs more than a small kernel.
_CHOSEN: dict[tuple, str] = {}


def choose_backend(q: torch.Tensor, backend: str = "auto", capability: Capability | None = None) -> str:
    """The concrete backend `backend` means for `q`; raises BackendUnavailable with the reason.

    `auto` is the profile resolution's own choice (`na_auto_choice`) for these tensors; `natten` takes
    NATTEN's own kernel order. With the live capability (`capability` None) a choice is decided
    once per (backend, device, dtype, head_dim).
    """
    if capability is not None:
        return _choose(q, backend, capability)
    key = (backend, q.device, q.dtype, q.shape[-1])
    chosen = _CHOSEN.get(key)
    if chosen is None:
        chosen = _CHOSEN[key] = _choose(q, backend, None)
    return chosen


def _choose(q: torch.Tensor, backend: str, capability: Capability | None) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown NA backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    avail = available_backends(q, capability)
    if backend == "auto":
        choice, _, _ = na_auto_choice(_facts(q.device, q.dtype, q.shape[-1], capability), lambda b: avail[b.value])
        if choice is None:
            raise BackendUnavailable("no NA backend can run these tensors: "
                                     + "; ".join(f"{n}: {a.reason}" for n, a in avail.items() if not a.available))
        return _choose(q, choice.value, capability) if choice is NABackend.NATTEN else choice.value
    if backend == "natten":
        if not avail["natten"].available:
            raise BackendUnavailable(f"natten cannot run here: {avail['natten'].reason}")
        return next(n for n in NATTEN_KERNELS if avail[n].available)
    if not avail[backend].available:
        raise BackendUnavailable(f"{backend} cannot run here: {avail[backend].reason}")
    return backend


# --- the kernels as custom ops (visible to torch.compile) ----------------------------------

@torch.library.custom_op("ltx_tui::na3d_triton", mutates_args=())
def _na3d_triton_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: list[int],
                    is_causal: list[bool], scale: float) -> torch.Tensor:
    from kernels.na3d_triton import na3d_triton

    return na3d_triton(q, k, v, tuple(kernel_size), scale=scale, is_causal=tuple(is_causal))


@torch.library.custom_op("ltx_tui::na3d_eager", mutates_args=())
def _na3d_eager_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: list[int],
                   is_causal: list[bool], scale: float) -> torch.Tensor:
    from kernels.na3d_eager import na3d_eager

    return na3d_eager(q, k, v, tuple(kernel_size), scale=scale, is_causal=tuple(is_causal))


@_na3d_triton_op.register_fake
@_na3d_eager_op.register_fake
def _na3d_fake(q, k, v, kernel_size, is_causal, scale):
    return q.new_empty(q.shape)


def _natten(kernel: str) -> Callable:
    def run(q, k, v, kernel_size, *, scale, is_causal):
        import natten

        return natten.na3d(q, k, v, kernel_size, is_causal=is_causal, scale=scale, backend=kernel)
    return run


def _ops(name: str) -> Callable:
    """The kernel itself when called eagerly; its custom op while torch.compile traces (the op's
    dispatch costs 10-30 us a call, more than a small NA kernel takes)."""
    op = _na3d_triton_op if name == "triton" else _na3d_eager_op
    if name == "triton":
        from kernels.na3d_triton import na3d_triton as direct
    else:
        from kernels.na3d_eager import na3d_eager as direct

    def run(q, k, v, kernel_size, *, scale, is_causal):
        if torch.compiler.is_compiling():
            return op(q, k, v, list(kernel_size), list(is_causal), float(scale))
        return direct(q, k, v, kernel_size, scale=scale, is_causal=is_causal)
    return run


@functools.cache
def implementation(name: str) -> Callable:
    """The function behind concrete backend `name`: f(q, k, v, kernel, *, scale, is_causal)."""
    if name.startswith("natten:"):
        return _natten(NattenKernel(name.split(":", 1)[1]).value)
    if name in ("triton", "eager_sdpa"):
        return _ops(name)
    if name == "reference":
        from kernels.na3d_reference import na3d_reference
        return na3d_reference
    raise ValueError(f"{name!r} is not a concrete NA backend; expected one of "
                     f"{', '.join(n for n in BACKENDS if n not in ('auto', 'natten'))}")


def na3d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel_size: IntOr3, *, backend: str = "auto",
         scale: float | None = None, is_causal: BoolOr3 = False,
         capability: Capability | None = None) -> torch.Tensor:
    """3D neighborhood attention on (B, T, H, W, heads, head_dim) tensors with the chosen backend."""
    kernel, causal = check_na3d(q, k, v, kernel_size, is_causal)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)) and backend != "reference":
        raise RuntimeError(f"{backend}: {INFERENCE_ONLY} (or backend='reference', which autograd can follow)")
    name = choose_backend(q, backend, capability)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return implementation(name)(q, k, v, kernel, scale=scale, is_causal=causal)


class NAFunction:
    """LTX-2's NA protocol: `fn(attn, q, k, v)`, q pre-scaled, window `attn.kernel_size`.

    `backend` is a concrete one (what the runtime installs), or `auto` / `natten`, chosen per
    call for the tensors' device. Forward only (inference): a call that would need gradients is
    refused with a message, instead of failing inside a kernel that has no backward.
    """

    def __init__(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown NA backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        self.backend = backend
        self._run = None if backend in ("auto", "natten") else implementation(backend)

    @property
    def label(self) -> str:
        return f"ltx-tui NA ({self.backend})"

    def __repr__(self) -> str:
        return f"NAFunction({self.backend!r})"

    def __call__(self, attn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            raise RuntimeError(f"{self.backend}: {INFERENCE_ONLY}")
        if q.dtype != v.dtype or k.dtype != v.dtype:  # RMSNorm under autocast can leave q/k in fp32
            q, k = q.to(v.dtype), k.to(v.dtype)
        run = self._run or implementation(choose_backend(q, self.backend))
        return run(q, k, v, tuple(attn.kernel_size), scale=1.0,
                   is_causal=tuple(getattr(attn, "is_causal", (False, False, False))))
