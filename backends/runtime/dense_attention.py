"""Dense attention for the DiT transformer: one callable per `transformer.attention` value.

`DenseFunction(name)` follows LTX-2's DiT protocol (`AttentionCallable` and
`MaskedAttentionCallable`): `fn(q, k, v, heads)` and `fn(q, k, v, heads, mask)` on
(B, T, heads * head_dim) tensors, softmax scale head_dim ** -0.5, q/k cast to v's dtype. A mask
of 2 dims gets a batch dim, of 3 dims a heads dim (additive float or boolean, as SDPA takes it).
FlashAttention 3/4 have no mask kernel and SDPA's flash backend rejects masks: for those the
runtime leaves the masked slot as it was (`masks` is False) and says so in its report.
`sdpa_cudnn_fp8` runs cuDNN's fp8 attention (`backends.runtime.cudnn_fp8_attention`) on bf16/fp16
calls without a mask (`takes_fp8`: q and kv of at least `FP8_MIN_TOKENS` tokens each, head_dim
a multiple of 16 up to 128: the DiT's video self-attention from 768x512 up), and SDPA's bf16 cuDNN
backend on the rest, where quantizing q, k and v costs more than the fp8 kernel saves: the 126 audio
tokens' attentions, the video-text cross-attention (1024 text tokens: at 6144 x 1024 fp8 with its
quantization took 0.204 ms against bf16's 0.182 on the H200), distilled's stage 1 at 768x512
(1536 tokens: 0.216 against 0.068 ms), and masked calls. So one profile gives each stage of a run
the attention that pays at its size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from backends.machine.capability import import_optional

SDPA_BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}
FLASH_MODULES = {"flash_attention_3": ("flash_attn_interface", "FlashAttention 3"),
                 "flash_attention_4": ("flash_attn.cute", "FlashAttention 4")}
ANY_SDPA = ("pytorch", "automatic", "mps_sdpa")
FP8 = "sdpa_cudnn_fp8"
NAMES = (*SDPA_BACKENDS, FP8, *FLASH_MODULES, *ANY_SDPA)
FP8_MIN_TOKENS = 2048


def takes_fp8(q_tokens: int, kv_tokens: int) -> bool:
    """Whether `sdpa_cudnn_fp8` runs an unmasked call of these sizes in fp8 (else bf16 cuDNN)."""
    return min(q_tokens, kv_tokens) >= FP8_MIN_TOKENS


class AttentionUnavailable(RuntimeError):
    """The attention backend's package cannot be imported here."""


class DenseFunction:
    """LTX-2's DiT attention protocol for effective `transformer.attention` value `name`."""

    def __init__(self, name: str) -> None:
        if name not in NAMES:
            raise ValueError(f"unknown attention {name!r}; expected one of {', '.join(NAMES)}")
        self.name = name
        self.masks = name not in FLASH_MODULES and name != "sdpa_flash"
        self._flash = self._fp8 = None
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
        q, k = q.to(v.dtype), k.to(v.dtype)
        q, k, v = (t.reshape(b, -1, heads, d) for t in (q, k, v))
        if self._flash is not None:
            if mask is not None:
                raise ValueError(f"{self.name} has no mask kernel; the runtime keeps masked calls on their own slot")
            out = self._flash(q, k, v)
            out = out[0] if isinstance(out, tuple) else out
            return out.reshape(b, -1, inner)
        if (self._fp8 is not None and mask is None and takes_fp8(q.shape[1], k.shape[1])
                and self._fp8.tensors_reason(q, k, v) is None):
            return self._fp8.sdpa_fp8_op(q, k, v).reshape(b, -1, inner)
        if mask is not None:
            mask = mask[None] if mask.dim() == 2 else mask
            mask = mask[:, None] if mask.dim() == 3 else mask
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self._sdpa is not None:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel([getattr(SDPBackend, self._sdpa)]):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, -1, inner)
