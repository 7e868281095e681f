"""Dense attention for the DiT transformer: one callable per `transformer.attention` value.

`DenseFunction(name)` follows LTX-2's DiT protocol (`AttentionCallable` and
`MaskedAttentionCallable`): `fn(q, k, v, heads)` and `fn(q, k, v, heads, mask)` on
(B, T, heads * head_dim) tensors, softmax scale head_dim ** -0.5, q/k cast to v's dtype (unless they
come in e4m3 from a pre-attention that `static_fp8` gave the scales). A mask
of 2 dims gets a batch dim, of 3 dims a heads dim (additive float or boolean, as SDPA takes it).
FlashAttention 3/4 have no mask kernel and SDPA's flash backend rejects masks: for those the
runtime leaves the masked slot as it was (`masks` is False) and says so in its report.
`sdpa_cudnn_fp8` runs cuDNN's fp8 attention (`backends.runtime.cudnn_fp8_attention`) on bf16/fp16
calls without a mask (`takes_fp8`: q and kv of at least `FP8_MIN_TOKENS` tokens each, head_dim
a multiple of 16 up to 128: the DiT's video self-attention from 768x512 up), and SDPA's bf16 cuDNN
backend on the rest, where quantizing q, k and v costs more than the fp8 kernel saves: the 126 audio
tokens' attentions, distilled's stage 1 at 768x512 (1536 tokens: 0.216 against 0.068 ms on the
H200), and masked calls. An unmasked call of few queries against many keys (`few_queries`: the audio
tokens reading the video's, 126 x 6144) goes to SDPA's flash kernel first, which splits the keys over
the SMs, where cuDNN's runs a program per 64 queries and head and leaves most SMs idle (H200, 32
heads x 64: 32.8 against 57.8 us at 126 x 6144 keys, 99.8 against 212.4 at 126 x 24576). Its fp8 calls hand O back through `runtime.quant.dequant_rows` (in a
compiled block `to_out`'s fp8 GEMM reads O's e4m3 rows as they are). On a module of LTX-2's own
pre-attention (`for_module`) q and k go to e4m3 with static scales (`QKBound`): no reduction over
them (transformer.fast_norm's pre-attention writes them in e4m3 itself). With q and k free to
quantize, the video-text cross-attention (kv of `FP8_MIN_STATIC_KV` tokens up) takes fp8 too; with
amax scales it stays bf16 (1024 text tokens: at 6144 x 1024 fp8 with its quantization took 0.204 ms
against bf16's 0.182). So one profile gives each stage of a run the attention that pays at its size.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from backends.machine.capability import import_optional
from backends.runtime.ltx2 import is_ltx2_op
from backends.runtime.quant import dequant_rows
from kernels.int8_gemm import FP8_MAX
from kernels.scale_cast import to_e4m3

SDPA_BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}
FLASH_MODULES = {"flash_attention_3": ("flash_attn_interface", "FlashAttention 3"),
                 "flash_attention_4": ("flash_attn.cute", "FlashAttention 4")}
ANY_SDPA = ("pytorch", "automatic", "mps_sdpa")
FP8 = "sdpa_cudnn_fp8"
NAMES = (*SDPA_BACKENDS, FP8, *FLASH_MODULES, *ANY_SDPA)
FP8_MIN_TOKENS = 2048
FP8_MIN_STATIC_KV = 1024  # LTX-2's 1024 text tokens: only v left to quantize
FEW_QUERIES = 8  # kv tokens per q token from which SDPA's flash kernel goes first


def few_queries(q_tokens: int, kv_tokens: int, masked: bool) -> bool:
    """Whether a call of these sizes goes to SDPA's flash kernel before cuDNN's (it falls back to
    cuDNN's where flash cannot run it)."""
    return not masked and q_tokens * FEW_QUERIES <= kv_tokens


def takes_fp8(q_tokens: int, kv_tokens: int, static_qk: bool = False) -> bool:
    """Whether `sdpa_cudnn_fp8` runs an unmasked call of these sizes in fp8 (else bf16 cuDNN);
    `static_qk`: q's and k's scales are known (`QKBound`), so only v is reduced."""
    return q_tokens >= FP8_MIN_TOKENS and kv_tokens >= (FP8_MIN_STATIC_KV if static_qk else FP8_MIN_TOKENS)


class AttentionUnavailable(RuntimeError):
    """The attention backend's package cannot be imported here."""


STATIC_QK = True  # bench/ltx2_dit.py's `:amax-qk` ablation turns it off
QK_HEADROOM = 2.0  # over the bound: bf16 cos/sin tables rotate by a little more than 1


def ltx2_pre_attention(function, own_only: bool = False) -> bool:
    """Whether `function` is LTX-2's own pre-attention (`PytorchPreAttention`), or (unless `own_only`)
    computes what it does (`computes_own`, its `own`: transformer.fast_norm's one-pass kernel)."""
    if not own_only and getattr(function, "computes_own", False):
        function = function.own
    return is_ltx2_op(function, "PytorchPreAttention")


class QKBound:
    """Static e4m3 scales for q and k of an LTX-2 `Attention` whose pre-attention is LTX-2's own
    (`q_norm` / `k_norm`, `torch.nn.RMSNorm` over n features, then RoPE): an element of
    rms_norm(x) * w is at most sqrt(n) * max|w| in magnitude (its square is at most the sum of the
    n squares, n * rms(x)^2), and RoPE rotates pairs of elements, which keeps their norm. The scale
    maps that bound x QK_HEADROOM to e4m3's 448. The bulk of the values sits some binades lower than
    an amax scale would put it (for n = 4096 a unit-rms element of the largest weight at ~3.5, not
    tens); e4m3 rounds relatively down to its smallest normal, 2^-6, so only elements ~200x below
    that bulk lose precision (fewer than 1% for typical weights; a weight channel far above the
    others lowers them all)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    @staticmethod
    def applies(module: nn.Module) -> bool:
        """Whether `module` normalises q and k as the bound needs."""
        norms = (getattr(module, "q_norm", None), getattr(module, "k_norm", None))
        return (ltx2_pre_attention(getattr(module, "preattention_function", None))
                and all(type(n) is nn.RMSNorm and len(n.normalized_shape) == 1 for n in norms))

    def descale(self, device: torch.device) -> torch.Tensor | None:
        """(q's scale, k's scale), fp32 on `device`, from the norm weights as they are now (a few small
        launches; inside a compiled or captured graph they are its kernels, so a weight changed in
        place, under torch.inference_mode too, is always seen); None when the module's pre-attention
        is no longer LTX-2's own."""
        if not STATIC_QK or not self.applies(self.module):
            return None

        def one(norm: nn.RMSNorm) -> torch.Tensor:
            w = norm.weight
            peak = torch.ones((), device=device) if w is None else w.detach().abs().amax().float().to(device)
            return peak * (math.sqrt(norm.normalized_shape[0]) * QK_HEADROOM / FP8_MAX)
        return torch.stack([one(self.module.q_norm), one(self.module.k_norm)])


class DenseFunction:
    """LTX-2's DiT attention protocol for effective `transformer.attention` value `name`."""

    def __init__(self, name: str) -> None:
        if name not in NAMES:
            raise ValueError(f"unknown attention {name!r}; expected one of {', '.join(NAMES)}")
        self.name = name
        self.masks = name not in FLASH_MODULES and name != "sdpa_flash"
        self._flash = self._fp8 = self._qk = None
        # the SDPA backend pinned for the calls this attention runs through SDPA (None: SDPA's own choice)
        self._sdpa = SDPA_BACKENDS.get(name, SDPA_BACKENDS["sdpa_cudnn"] if name == FP8 else None)
        if name == FP8:
            from backends.runtime import cudnn_fp8_attention

            why = cudnn_fp8_attention.unavailable_reason()
            if why:
                raise AttentionUnavailable(f"{name}: {why}")
            self._fp8 = cudnn_fp8_attention
        if name in FLASH_MODULES:
            module, label = FLASH_MODULES[name]
            mod, why = import_optional(module)
            if mod is None:
                raise AttentionUnavailable(f"{label} needs {module}, which is not importable ({why})")
            self._flash = mod.flash_attn_func

    def for_module(self, module: nn.Module) -> "DenseFunction":
        """This function as `module` gets it: with `sdpa_cudnn_fp8` on a module of LTX-2's own
        pre-attention, a copy whose fp8 calls take q and k with `QKBound`'s static scales."""
        if self._fp8 is None or not QKBound.applies(module):
            return self
        bound = object.__new__(DenseFunction)
        bound.__dict__.update(self.__dict__, _qk=QKBound(module))
        return bound

    def static_fp8(self, q: torch.Tensor, k: torch.Tensor, heads: int, mask: torch.Tensor | None) -> torch.Tensor | None:
        """`QKBound`'s (q, k) scales where this call (q, k: (B, T, heads * head_dim)) takes the fp8 path
        with them; a pre-attention that gets them hands q and k over in e4m3, so scaled."""
        if self._qk is None or mask is not None or q.shape[-1] % heads or k.shape[-1] != q.shape[-1]:
            return None
        qv, kv = (t.unflatten(-1, (heads, -1)) for t in (q, k))
        if self._fp8.tensors_reason(qv, kv, kv) or not takes_fp8(q.shape[1], k.shape[1], static_qk=True):
            return None  # v is k's shape and q's dtype in LTX-2's attention
        return self._qk.descale(q.device)

    @property
    def static_qk(self) -> bool:
        """Whether this function's fp8 calls take q and k by `QKBound`'s static scales (`for_module`'s copy)."""
        return self._qk is not None and STATIC_QK and QKBound.applies(self._qk.module)

    @property
    def label(self) -> str:
        return f"ltx-tui {self.name}"

    def __repr__(self) -> str:
        return f"DenseFunction({self.name!r})"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        b, _, inner = q.shape
        if inner % heads:
            raise ValueError(f"q's last dim {inner} is not a multiple of heads {heads}")
        d = inner // heads
        e4m3 = q.dtype == torch.float8_e4m3fn  # from a pre-attention given `static_fp8`'s scales
        if not e4m3:
            q, k = q.to(v.dtype), k.to(v.dtype)
        q, k, v = (t.reshape(b, -1, heads, d) for t in (q, k, v))
        if self._flash is not None:
            if mask is not None:
                raise ValueError(f"{self.name} has no mask kernel; the runtime keeps masked calls on their own slot")
            out = self._flash(q, k, v)
            out = out[0] if isinstance(out, tuple) else out
            return out.reshape(b, -1, inner)
        fp8 = self._fp8 is not None and mask is None
        qk = (self._qk.descale(q.device) if fp8 and self._qk is not None
              and takes_fp8(q.shape[1], k.shape[1], static_qk=True) else None)
        if fp8 and takes_fp8(q.shape[1], k.shape[1], qk is not None) and self._fp8.tensors_reason(q, k, v, e4m3) is None:
            if qk is not None and not e4m3 and torch.compiler.is_compiling():  # Inductor fuses it into the norm
                q, k = to_e4m3(q, qk[0]), to_e4m3(k, qk[1])
            out, rows = self._fp8.sdpa_fp8_rows_op(q, k, v, qk)
            return dequant_rows(out.view(-1, inner), rows, v.dtype).view(b, -1, inner)
        if e4m3:
            raise ValueError(f"{self.name}: q and k came in e4m3, but this call ({tuple(q.shape)}, {tuple(k.shape)}, "
                             f"mask {mask is not None}) does not take the fp8 path")
        if mask is not None:
            mask = mask[None] if mask.dim() == 2 else mask
            mask = mask[:, None] if mask.dim() == 3 else mask
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self._sdpa is not None:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            names = [self._sdpa]
            if self._sdpa == SDPA_BACKENDS["sdpa_cudnn"] and few_queries(q.shape[2], k.shape[2], mask is not None):
                names.insert(0, SDPA_BACKENDS["sdpa_flash"])
            with sdpa_kernel([getattr(SDPBackend, n) for n in names], set_priority=len(names) > 1):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, -1, inner)
