"""ltx-tui's body for one W slab of LTX-2's chunked DiffVAE attention residual.

LTX-2's chunked layouts run each stage-5 block's attention as a loop over W slabs (with halos);
per slab, its `_attn_on_chunk_impl` computes RMSNorm + AdaLN modulation, three projections,
per-head RMSNorm of q and k, absolute RoPE on T, H and the slab's global W columns, the NA call,
and the output projection. `slab_attention` computes the same with one QKV projection and the
q/k norm + RoPE in one fused kernel (`ltx_tui::qk_norm_rope`, a custom op that torch.compile
keeps whole); v goes to the NA as a view. Its parameters are LTX-2's, in LTX-2's order, so the
runtime can put it in place of LTX-2's body for the modules it lays out (`runtime.ltx2`).

RoPE runs in fp32 (LTX-2's default; its bf16 option is not followed: fp32 is the more exact).

Around the bodies, LTX-2's loop (`_run_w_chunked_residual`) builds each slab's input in a new
buffer (zeros, then the core, its halos and replicated edges copied in) and adds the slab's core
output into x in place, eagerly: at 768x512x121 those passes took about a fifth of the decode's
GPU time. `slab_residual` runs the same loop with each slab's input gathered from x inside the
compiled body (clamped column indices are LTX-2's replicated edges; Inductor reads them in the
norm's kernel) and each core added by a compiled in-place add. Every slab reads x as it was
before the loop (LTX-2 keeps a copy of the left halo for that): a slab's add waits until the
next slab's body has read it. Layouts where the clamped gather would not be LTX-2's buffer (a
slab narrower than the halo) run LTX-2's loop.
"""

from __future__ import annotations

import functools

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


def w_slabs(w: int, w_chunks: int, halo: int) -> list[tuple[int, int]] | None:
    """(first core column, core width) of each of LTX-2's W slabs, when every slab's buffer is x's
    columns with the volume's edges replicated (None: a slab narrower than the halo, or an empty
    one)."""
    chunk = -(-w // w_chunks)
    slabs = [(i * chunk, min(w, (i + 1) * chunk) - i * chunk) for i in range(w_chunks)]
    if min(core for _, core in slabs) < max(halo if w_chunks > 1 else 1, 1):
        return None
    return slabs


def _slab_step(attention_function, attn, x, columns, w_pos, scale, shift, *packed):
    return slab_attention(attention_function, attn, x.index_select(3, columns), w_pos, scale, shift, *packed)


def _add(x_core: torch.Tensor, out_core: torch.Tensor) -> None:
    x_core.add_(out_core)  # views of x and of a slab's output: one graph whatever their offsets


@functools.cache
def _compiled():
    from backends.runtime.ltx2 import under_settings

    return under_settings(torch.compile(_slab_step)), under_settings(torch.compile(_add))


def slab_residual(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, packed: tuple, w_chunks: int,
                  halo: int, attn_fn) -> torch.Tensor:
    """LTX-2's `_run_w_chunked_residual` (x += attn(modulate(norm(x))), W slab by W slab, in place)
    with ltx-tui's gathers and adds; LTX-2's parameters."""
    from ltx_core.model.video_vae.transformer.chunked import attn as chunked

    w = x.shape[3]
    slabs = w_slabs(w, w_chunks, halo)
    if slabs is None:
        loop = chunked._run_w_chunked_residual
        return getattr(loop, "__wrapped__", loop)(x, scale, shift, packed, w_chunks, halo, attn_fn)
    attention_function, attn = chunked._resolve_chunked_attention()
    step, add = _compiled()
    chunk = slabs[0][1]
    # each slab's columns (row i: slab i's, from its left halo on), made at once for all slabs
    columns = (torch.arange(chunk + 2 * halo, device=x.device) - halo
               + chunk * torch.arange(len(slabs), device=x.device)[:, None])
    w_pos, columns = columns.to(torch.float32), columns.clamp(0, w - 1)
    pending = None
    for i, (start, core) in enumerate(slabs):
        out = step(attention_function, attn, x, columns[i], w_pos[i], scale, shift, *packed)
        if pending is not None:  # after the body above has read its left halo
            add(*pending)
        pending = (x[:, :, :, start:start + core], out[:, :, :, halo:halo + core])
    add(*pending)
    return x
