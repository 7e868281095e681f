"""ltx-tui's deferred stage-4 inject for LTX-2's chunked DiffVAE blocks.

In the chunked layouts each stage-5 block first adds the deferred stage-4 context into x, W slab
by W slab (LTX-2's `chunked.context.deferred`): upsample projection, pixel shuffle and context
projection of the slab (`_upsample_then_ctx`), then an eager in-place add of the result into x's
columns, a strided add that ran at about half the GPU's bandwidth (~20 ms of a 768x512x121
decode). `inject_context` runs the same slabs with each add inside the compiled region that
computes the slab's context, where Inductor writes the sum into x in one vectorised pass.
"""

from __future__ import annotations

import functools

import torch


def _add_context(x_slab, feat, up_w, up_b, ctx_w, ctx_b, stride, drop_leading_frame: bool) -> None:
    """x_slab (a view of x's columns) += the context of feat (a view of the stage-4 features):
    one graph whatever the views' offsets."""
    from ltx_core.model.video_vae.transformer.chunked import context

    ctx = context._upsample_then_ctx(feat, up_w, up_b, ctx_w, ctx_b, stride, drop_leading_frame=drop_leading_frame)
    x_slab.add_(ctx[:, :, :, :x_slab.shape[3]])


@functools.cache
def _compiled():
    from backends.runtime.ltx2 import under_settings

    return under_settings(torch.compile(_add_context))


def inject_context(x: torch.Tensor, stage4_feat: torch.Tensor, upsample_proj, context_proj, stride, *,
                   w_chunks: int, drop_leading_frame: bool) -> torch.Tensor:
    """LTX-2's `deferred` (x += context_proj(pixel_shuffle(upsample_proj(stage4_feat))), in place,
    W slab by W slab); its parameters. Returns x."""
    add = _compiled()
    if w_chunks <= 1:
        add(x, stage4_feat, upsample_proj.weight, upsample_proj.bias, context_proj.weight, context_proj.bias,
            tuple(stride), drop_leading_frame)
        return x
    lo = 0
    for feat in torch.chunk(stage4_feat, w_chunks, dim=3):
        hi = min(x.shape[3], lo + feat.shape[3] * stride[2])
        add(x[:, :, :, lo:hi], feat, upsample_proj.weight, upsample_proj.bias, context_proj.weight,
            context_proj.bias, tuple(stride), drop_leading_frame)
        lo = hi
    return x
