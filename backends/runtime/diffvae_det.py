"""ltx-tui's q/k step for the NA of LTX-2's deterministic DiffVAE stages (stages 1-4).

LTX-2's `NeighborhoodAttention3D.forward` (the det stages' NA) calls `det_qkv_rope(attn, x)`: its
three projections, per-head RMSNorm of q and k, q times `attn.scale`, then absolute RoPE on T, H
and W through an opaque op that runs eagerly, W tile by W tile and axis by axis: about 130 small
kernels a call, each launched from Python (at 768x512x121 the GPU waited on those launches for
most of ~100 ms a decode). `det_qkv_rope` keeps LTX-2's projections and does the two norms, the
scale and the RoPE in one kernel (`ltx_tui::qk_norm_rope_split`, a custom op that torch.compile
keeps whole). Positions are the local 0-based t, h and w indices, as LTX-2's (its W tiles'
positions run on from tile to tile). RoPE runs in fp32; a module set to bf16 RoPE, or whose norms
lack a weight or differ in eps, keeps LTX-2's own step.
"""

from __future__ import annotations

import torch

from kernels.qk_norm_rope import qk_norm_rope_split, rope_tables


@torch.library.custom_op("ltx_tui::qk_norm_rope_split", mutates_args=())
def _qk_norm_rope_split_op(q: torch.Tensor, k: torch.Tensor, norm_weight: torch.Tensor, cos: torch.Tensor,
                           sin: torch.Tensor, thw: list[int], split: list[int], q_scale: float,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _qk_norm_rope_split(q, k, norm_weight, cos, sin, thw, split, q_scale, eps)


def _qk_norm_rope_split(q, k, norm_weight, cos, sin, thw, split, q_scale, eps):
    # contiguous already (LTX-2's projections); made so should a compiled graph hand over other strides
    return qk_norm_rope_split(q.contiguous(), k.contiguous(), norm_weight, cos, sin, tuple(thw), tuple(split),
                              q_scale, eps)


@_qk_norm_rope_split_op.register_fake
def _qk_norm_rope_split_fake(q, k, norm_weight, cos, sin, thw, split, q_scale, eps):
    return torch.empty_like(q, memory_format=torch.contiguous_format), \
        torch.empty_like(k, memory_format=torch.contiguous_format)


def fusable(attn) -> bool:
    """Whether ltx-tui's step computes what LTX-2's does for NA module `attn`."""
    norms = (getattr(attn, "q_norm", None), getattr(attn, "k_norm", None))
    return (getattr(attn, "rope_compute_dtype", torch.float32) == torch.float32
            and all(getattr(n, "weight", None) is not None and getattr(n, "eps", None) is not None for n in norms)
            and norms[0].eps == norms[1].eps)


def det_qkv_rope(attn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LTX-2's `det_qkv_rope(attn, x)`: (q, k, v), each (B, T, H, W, heads, head_dim)."""
    if not fusable(attn):
        from ltx_core.model.video_vae.transformer.det_attn_rope import det_qkv_rope as ltx2_step

        return ltx2_step(attn, x)
    q, k, v = attn.project_qkv(x)
    _, t, h, w, _ = x.shape
    cos, sin = rope_tables(t, h, torch.arange(w, device=x.device, dtype=torch.float32),
                           attn.rope_inv_t, attn.rope_inv_h, attn.rope_inv_w)
    fused = _qk_norm_rope_split_op if torch.compiler.is_compiling() else _qk_norm_rope_split  # eager: no dispatch
    q, k = fused(q, k, torch.stack([attn.q_norm.weight, attn.k_norm.weight]), cos, sin, [t, h, w],
                 list(attn.rope_dim_split), float(attn.scale), float(attn.q_norm.eps))
    return q, k, v
