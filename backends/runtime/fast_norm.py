"""transformer.fast_norm: `kernels.adaln` and `kernels.dit_qk` in the norm slots of LTX-2's DiT blocks.

LTX-2 v1.2.0's `BasicAVTransformerBlock` calls its AdaLN norm and its gated residual + norm
through two attributes, `ada_zero_function` and `post_sa_function`, and each of its `Attention`s
its q/k RMSNorm + RoPE through `preattention_function` (from `TransformerOpsConfig`,
ltx_core/model/transformer/ops.py). Where a slot holds LTX-2's own function, `install` puts
`FastAdaZero` / `FastPostSA` / `FastPreAttention` there, which run the one-pass kernels where the
call's tensors fit them (`counts` says how often they did). Before an `sdpa_cudnn_fp8` attention
that takes the call in fp8 with static q/k scales (`dense_attention.QKBound`), the pre-attention
writes q and k in e4m3 itself.
In a compiled block whose graph CUDA graphs replay (`traced`) each slot is one custom op
(`ltx_tui::ada_zero`, `ltx_tui::post_sa`, `ltx_tui::dit_qk`), and `runtime.shared_rows` merges the
first two with the fp8 row quantization an fp8-scaled-mm linear makes of their output
(`ltx_tui::ada_zero_rows`, `ltx_tui::post_sa_rows`: the norm writes the linear's e4m3 rows and their
scales, never the bf16 rows), and then the residual add before such norms into them
(`ltx_tui::add_ada_zero_rows`); off CUDA the ops compute the same with torch. A compiled block without
CUDA graphs runs the block's own ops, which Inductor fuses (a custom op costs the host 0.1-0.2 ms a
call to issue). Eagerly the block's own function runs off CUDA; for tensors the kernels refuse (a
modulation in another dtype than x, a non-contiguous x) it runs in every case. The profile
step also installs `runtime.timestep_rows` (as compile does): the modulation read from one row
where a modality's timesteps are equal across its tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from backends.runtime.dense_attention import DenseFunction, ltx2_pre_attention
from backends.runtime.ltx2 import is_ltx2_op
from kernels import adaln, dit_qk
from kernels.int8_gemm import quantize_rows
from kernels.na3d_triton import interpreting

SLOTS = ("ada_zero_function", "post_sa_function")
ATTENTION_SLOT = "preattention_function"


def _on_kernels(x: torch.Tensor) -> bool:
    return x.is_cuda or interpreting()


def _rows(out: torch.Tensor, fixed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 rows of `out` (B, T, D) and their scales: each row's own, or the one `fixed` scale in every row's."""
    flat = out.reshape(-1, out.shape[-1])
    if fixed is None:
        return quantize_rows(flat, torch.float8_e4m3fn)
    return (flat.float() / fixed).to(torch.float8_e4m3fn), fixed.expand(flat.shape[0]).clone()


@torch.library.custom_op("ltx_tui::ada_zero", mutates_args=())
def _ada_zero_op(x: torch.Tensor, eps: float, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return adaln.ada_zero(x, eps, scale, shift)


@_ada_zero_op.register_fake
def _ada_zero_fake(x, eps, scale, shift):
    return torch.empty_like(x)


@torch.library.custom_op("ltx_tui::ada_zero_rows", mutates_args=())
def _ada_zero_rows_op(x: torch.Tensor, eps: float, scale: torch.Tensor, shift: torch.Tensor,
                      fixed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if _on_kernels(x):
        return adaln.ada_zero_fp8(x, eps, scale, shift, fixed=fixed)[:2]
    return _rows(adaln.ada_zero_torch(x, eps, scale, shift), fixed)


@_ada_zero_rows_op.register_fake
def _ada_zero_rows_fake(x, eps, scale, shift, fixed=None):
    rows = x.shape[:-1].numel()
    return x.new_empty((rows, x.shape[-1]), dtype=torch.float8_e4m3fn), x.new_empty((rows,), dtype=torch.float32)


@torch.library.custom_op("ltx_tui::post_sa", mutates_args=())
def _post_sa_op(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, eps: float,
                gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(adaln.post_sa(x, y, weight, eps, gate))


@_post_sa_op.register_fake
def _post_sa_fake(x, y, weight, eps, gate):
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("ltx_tui::post_sa_rows", mutates_args=())
def _post_sa_rows_op(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None, eps: float,
                     gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if _on_kernels(x):
        return adaln.post_sa_fp8(x, y, weight, eps, gate)
    res, normed = adaln.post_sa_torch(x, y, weight, eps, gate)
    return (res, *_rows(normed))


@_post_sa_rows_op.register_fake
def _post_sa_rows_fake(x, y, weight, eps, gate):
    return (torch.empty_like(x), *_ada_zero_rows_fake(x, eps, None, None))


@torch.library.custom_op("ltx_tui::add_ada_zero_rows", mutates_args=())
def _add_ada_zero_rows_op(x: torch.Tensor, y: torch.Tensor, gates: list[torch.Tensor], eps: float,
                          scales: list[torch.Tensor], shifts: list[torch.Tensor],
                          fixed: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """`fixed`: per norm, None (each row its own scale) or the one scale of its rows (`ada_bound`)."""
    if _on_kernels(x):
        return adaln.add_ada_zero_fp8(x, y, gates, eps, scales, shifts, fixed)
    res, *normed = adaln.add_ada_zero_torch(x, y, gates, eps, scales, shifts)
    return [res, *(t for n, f in zip(normed, fixed) for t in _rows(n, f))]


@_add_ada_zero_rows_op.register_fake
def _add_ada_zero_rows_fake(x, y, gates, eps, scales, shifts, fixed):
    return [torch.empty_like(x), *(t for _ in scales for t in _ada_zero_rows_fake(x, eps, None, None))]


@torch.library.custom_op("ltx_tui::ada_bound", mutates_args=())
def _ada_bound_op(scale: torch.Tensor, shift: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`adaln.bound_scale`: one fp8 scale for every row of an ada_zero, and a bound on the rows' norms."""
    return adaln.bound_scale(scale, shift, dim)


@_ada_bound_op.register_fake
def _ada_bound_fake(scale, shift, dim):
    return scale.new_empty((1,), dtype=torch.float32), scale.new_empty((1,), dtype=torch.float32)


@torch.library.custom_op("ltx_tui::dit_qk", mutates_args=())
def _dit_qk_op(q: torch.Tensor, k: torch.Tensor, wq: torch.Tensor | None, wk: torch.Tensor | None, eps: float,
               heads: int, cos: torch.Tensor | None, sin: torch.Tensor | None, k_cos: torch.Tensor | None,
               k_sin: torch.Tensor | None, scales: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    pe = None if cos is None else (cos, sin)
    k_pe = None if k_cos is None else (k_cos, k_sin)
    return dit_qk.qk_norm_rope(q, k, wq, wk, eps, heads, pe, k_pe, scales)


@_dit_qk_op.register_fake
def _dit_qk_fake(q, k, wq, wk, eps, heads, cos, sin, k_cos, k_sin, scales):
    dtype = torch.float8_e4m3fn if scales is not None else dit_qk.out_dtype(q, None if cos is None else (cos, sin))
    return q.new_empty(q.shape, dtype=dtype), k.new_empty(k.shape, dtype=dtype)


class _Fast:
    """A kernel for one slot, with the block's own function as the fallback; `runs` / `own_runs`
    count the eager calls each took. Traced (torch.compile), the slot is the kernel's custom op if
    `traced`, else the block's own function."""

    kernel: Callable = None
    op: Callable = None
    check: Callable = None  # the kernel's argument checks (raise adaln.Refused)

    def __init__(self, own: Callable, traced: bool = False) -> None:
        self.own = own
        self.traced = traced
        self.runs = self.own_runs = 0

    def __call__(self, *args):
        if torch.compiler.is_compiling():
            if not self.traced:
                return self.own(*args)
            try:
                type(self).check(*args)
            except adaln.Refused:
                return self.own(*args)
            return type(self).op(*args)
        if _on_kernels(args[0]):
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
    op = staticmethod(_ada_zero_op)
    check = staticmethod(lambda x, eps, scale, shift: adaln.check_ada_zero(x, scale, shift))


class FastPostSA(_Fast):
    """post_sa(x, y, weight, eps, gate) = (x + y * gate, rms_norm of that) in one pass."""

    kernel = staticmethod(adaln.post_sa)
    op = staticmethod(_post_sa_op)
    check = staticmethod(lambda x, y, weight, eps, gate: adaln.check_post_sa(x, y, weight, gate))


# LTX-2 v1.2.0's own functions of the slots (ltx_core/model/transformer/ops.py): what the kernels compute.
# Another function there (LTX-2's fp8-blockwise ops return quantized tensors) is left alone.
OWN = {"ada_zero_function": "PytorchAdaZeroFunction", "post_sa_function": "PytorchPostSAFunction"}


class FastPreAttention(_Fast):
    """preattention(q, k, attn, mask, pe, k_pe) = (q_norm(q), k_norm(k)), both rotated by LTX-2's SPLIT
    RoPE with pe (k with k_pe if given), in one pass; in e4m3 where `attn`'s attention takes this call in
    fp8 with static scales. It computes what its `own` (LTX-2's own) computes: `QKBound` holds for it."""

    computes_own = True

    @staticmethod
    def _args(q, k, attn, mask, pe, k_pe) -> tuple:
        """The kernel's arguments for this call (raises adaln.Refused where it does not fit)."""
        norms = (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None))
        if not all(type(n) is nn.RMSNorm and n.normalized_shape == (q.shape[-1],) for n in norms):
            raise adaln.Refused("q_norm and k_norm must be RMSNorms over q's last dimension")
        if norms[0].eps is None or norms[0].eps != norms[1].eps:
            raise adaln.Refused("q_norm and k_norm must share one eps")
        if pe is not None and getattr(attn.rope_type, "value", None) != "split":
            raise adaln.Refused(f"RoPE {attn.rope_type} is not LTX-2's SPLIT RoPE")
        fn = attn.attention_function
        scales = fn.static_fp8(q, k, attn.heads, mask) if isinstance(fn, DenseFunction) else None
        dit_qk.check(q, k, norms[0].weight, norms[1].weight, attn.heads, pe, k_pe)
        return norms[0].weight, norms[1].weight, norms[0].eps, attn.heads, pe, k_pe, scales

    def __call__(self, q, k, attn, mask, pe, k_pe):
        if torch.compiler.is_compiling() and not self.traced:
            return self.own(q, k, attn, mask, pe, k_pe)
        try:
            wq, wk, eps, heads, pe_, k_pe_, scales = self._args(q, k, attn, mask, pe, k_pe)
        except adaln.Refused:
            if not torch.compiler.is_compiling():
                self.own_runs += 1
            return self.own(q, k, attn, mask, pe, k_pe)
        if torch.compiler.is_compiling():
            cos, sin = pe_ if pe_ is not None else (None, None)
            k_cos, k_sin = k_pe_ if k_pe_ is not None else (None, None)
            return _dit_qk_op(q, k, wq, wk, eps, heads, cos, sin, k_cos, k_sin, scales)
        if _on_kernels(q):
            self.runs += 1
            return dit_qk.qk_norm_rope(q, k, wq, wk, eps, heads, pe_, k_pe_, scales)
        self.own_runs += 1
        return self.own(q, k, attn, mask, pe, k_pe)


def blocks_with_slots(model: nn.Module) -> list[str]:
    """Names of the modules with both norm slots (LTX-2's DiT blocks)."""
    return [name for name, m in model.named_modules() if all(callable(getattr(m, s, None)) for s in SLOTS)]


def install(model: nn.Module, traced: bool = False) -> list[str]:
    """Put `FastAdaZero` / `FastPostSA` in every block slot, and `FastPreAttention` in every attention
    slot of those blocks, that holds LTX-2's own function (once; `traced` set on all of them); returns
    the names of the blocks that have their norm slots."""
    names = []
    for name in blocks_with_slots(model):
        block = model.get_submodule(name)
        for slot, fast in zip(SLOTS, (FastAdaZero, FastPostSA)):
            own = getattr(block, slot)
            if is_ltx2_op(own, OWN[slot]):
                setattr(block, slot, fast(own))
        for attn in block.modules():
            if ltx2_pre_attention(getattr(attn, ATTENTION_SLOT, None), own_only=True):
                setattr(attn, ATTENTION_SLOT, FastPreAttention(getattr(attn, ATTENTION_SLOT)))
        for m in block.modules():
            for slot in (*SLOTS, ATTENTION_SLOT):
                if isinstance(f := getattr(m, slot, None), _Fast):
                    f.traced = traced
        if all(isinstance(getattr(block, s), _Fast) for s in SLOTS):
            names.append(name)
    return names


def counts(model: nn.Module) -> tuple[int, int]:
    """(calls the kernels ran, calls the blocks' own functions ran instead) over `model`'s slots."""
    fast = [f for m in model.modules() for s in (*SLOTS, ATTENTION_SLOT) if isinstance(f := getattr(m, s, None), _Fast)]
    return sum(f.runs for f in fast), sum(f.own_runs for f in fast)
