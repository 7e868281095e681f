"""ltx-tui's body for one W slab of LTX-2's chunked DiffVAE attention residual.

LTX-2's chunked layouts run each stage-5 block's attention as a loop over W slabs (with halos);
per slab, its `_attn_on_chunk_impl` computes RMSNorm + AdaLN modulation, three projections,
per-head RMSNorm of q and k, absolute RoPE on T, H and the slab's global W columns, the NA call,
and the output projection. `slab_attention` computes the same with one QKV projection and the
q/k norm + RoPE in one fused kernel (`ltx_tui::qk_norm_rope`, a custom op that torch.compile
keeps whole); v goes to the NA as a view. Its parameters are LTX-2's, in LTX-2's order, so the
runtime can put it in place of LTX-2's body for the modules it lays out (`runtime.ltx2`).

RoPE runs in fp32 (LTX-2's default; its bf16 option is not followed: fp32 is the more exact).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.qk_norm_rope import EPS, qk_norm_rope, rope_tables


@torch.library.custom_op("ltx_tui::qk_norm_rope", mutates_args=())
def _qk_norm_rope_op(qkv: torch.Tensor, heads: int, norm_weight: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor, thw: list[int], split: list[int], q_scale: float,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split, q_scale, eps)


def _qk_norm_rope(qkv, heads, norm_weight, cos, sin, thw, split, q_scale, eps):
    return qk_norm_rope(qkv, heads, norm_weight, cos, sin, tuple(thw), tuple(split), q_scale, eps)


@_qk_norm_rope_op.register_fake
def _qk_norm_rope_fake(qkv, heads, norm_weight, cos, sin, thw, split, q_scale, eps):
    shape = (*qkv.shape[:-1], heads, qkv.shape[-1] // (3 * heads))
    return qkv.new_empty(shape), qkv.new_empty(shape)


def slab_attention(attention_function, attn, x_chunk: torch.Tensor, w_pos: torch.Tensor, scale: torch.Tensor,
                   shift: torch.Tensor, norm_weight: torch.Tensor, q_w: torch.Tensor, q_b: torch.Tensor,
                   k_w: torch.Tensor, k_b: torch.Tensor, v_w: torch.Tensor, v_b: torch.Tensor,
                   q_norm_w: torch.Tensor, k_norm_w: torch.Tensor, proj_w: torch.Tensor, proj_b: torch.Tensor,
                   inv_t: torch.Tensor, inv_h: torch.Tensor, inv_w: torch.Tensor, d_t: int, d_h: int, d_w: int,
                   kt: int, kh: int, kw: int, num_heads: int, head_dim: int, dim: int, attn_scale: float,
                   rope_num_tiles: int, rope_compute_bf16: bool) -> torch.Tensor:
    """attn(modulate(rms_norm(x_chunk))) for one W slab (B, T, H, W_slab, dim); LTX-2's parameters."""
    del kt, kh, kw, rope_num_tiles, rope_compute_bf16  # the window is attn.kernel_size; RoPE in fp32

    batch, t, h, w, _ = x_chunk.shape
    y = F.rms_norm(x_chunk, (dim,), norm_weight, EPS) * (1.0 + scale) + shift
    qkv = F.linear(y, torch.cat([q_w, k_w, v_w]), torch.cat([q_b, k_b, v_b]))
    cos, sin = rope_tables(t, h, w_pos, inv_t, inv_h, inv_w)
    fused = _qk_norm_rope_op if torch.compiler.is_compiling() else _qk_norm_rope  # eager: no op dispatch
    q, k = fused(qkv, num_heads, torch.stack([q_norm_w, k_norm_w]), cos, sin, [t, h, w],
                            [d_t, d_h, d_w], float(attn_scale), EPS)
    v = qkv[..., 2 * dim:].unflatten(-1, (num_heads, head_dim))
    out = attention_function(attn, q, k, v)
    return F.linear(out.reshape(batch, t, h, w, dim), proj_w, proj_b)
