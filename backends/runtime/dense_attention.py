"""Dense attention for the transformer: one function per `transformer.attention` value.

ltx-tui's protocol: `fn(q, k, v, *, scale=None, is_causal=False)` on (B, S, heads, head_dim)
tensors (the FlashAttention layout), returning the same layout. `apply_profile` installs the
effective choice on every module with an `attention_function` and no `kernel_size`.
FlashAttention 3/4 are called through their packages; a missing package raises with the
rule's reason instead of falling back silently.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from backends.probe.capability import import_optional

SDPA_BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}


class AttentionUnavailable(RuntimeError):
    """The attention backend's package cannot be imported here."""


def _sdpa(backend: str | None) -> Callable:
    def attend(q, k, v, *, scale=None, is_causal=False):
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        if backend is None:
            out = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=is_causal)
        else:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel([getattr(SDPBackend, backend)]):
                out = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=is_causal)
        return out.transpose(1, 2)
    return attend


def _flash(module: str, rule: str) -> Callable:
    mod, why = import_optional(module)
    if mod is None:
        raise AttentionUnavailable(f"{rule} needs {module}, which is not importable ({why})")
    func = mod.flash_attn_func

    def attend(q, k, v, *, scale=None, is_causal=False):
        out = func(q, k, v, softmax_scale=scale, causal=is_causal)
        return out[0] if isinstance(out, tuple) else out
    return attend


def attention_function(name: str) -> Callable:
    """The function for effective `transformer.attention` value `name`."""
    if name in SDPA_BACKENDS:
        return _sdpa(SDPA_BACKENDS[name])
    if name in ("pytorch", "mps_sdpa", "automatic"):
        return _sdpa(None)
    if name == "flash_attention_3":
        return _flash("flash_attn_interface", "FlashAttention 3")
    if name == "flash_attention_4":
        return _flash("flash_attn.cute", "FlashAttention 4")
    raise ValueError(f"unknown attention {name!r}")


class DenseAttention(torch.nn.Module):
    """Multi-head self-attention on (B, S, dim) that follows the protocol (for tests and demos)."""

    def __init__(self, dim: int, head_dim: int = 64) -> None:
        super().__init__()
        self.heads, self.head_dim = dim // head_dim, head_dim
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.attention_function = attention_function("pytorch")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).unbind(2)
        return self.proj(self.attention_function(q, k, v).reshape(b, s, d))
