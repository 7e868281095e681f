"""LTX-2's RoPE tables computed once per positions, not at every forward.

LTX-2 v1.2.0's preprocessors (`TransformerArgsPreprocessor._prepare_positional_embeddings`,
ltx_core/model/transformer/transformer_args.py) build the cos/sin tables from the tokens'
positions at every DiT forward: four tables a forward for audio and video (each modality's own and
its A-V cross-attention's), about a hundred small eager launches, while a denoising loop gives the
same positions at every step. With the block loop captured (`runtime.block_graph`) that host work is
most of what the GPU waits for between two forwards. `install` gives each preprocessor of LTX-2's
LTXModel a cache of its last `KEEP` tables: a call whose positions equal a cached call's (same
shape, strides, dtype, device and values, compared on the device: one small sync; the other
arguments equal) gets those tables back, the same numbers LTX-2 would compute again. Tensors
without a version counter (made under inference mode, as LTX-2's pipelines make them) can change in
place unseen, so the values are always compared, never the tensor's identity.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch
import torch.nn as nn

from backends.runtime.timestep_rows import dit_owner

METHOD = "_prepare_positional_embeddings"
ENABLED = True  # bench/ltx2_dit.py's `:tables-each-call` ablation turns it off
KEEP = 2  # a preprocessor's own table and its cross-attention's


class Tables:
    """Stands in for one preprocessor's `_prepare_positional_embeddings`; `computed` counts the
    calls that computed tables."""

    def __init__(self, compute: Callable) -> None:
        self.compute = compute
        self.entries: OrderedDict[tuple, tuple[torch.Tensor, object]] = OrderedDict()
        self.computed = 0

    def __call__(self, positions: torch.Tensor, inner_dim: int, max_pos: list[int], use_middle_indices_grid: bool,
                 num_attention_heads: int, x_dtype: torch.dtype):
        args = dict(positions=positions, inner_dim=inner_dim, max_pos=max_pos,
                    use_middle_indices_grid=use_middle_indices_grid, num_attention_heads=num_attention_heads,
                    x_dtype=x_dtype)
        if torch.compiler.is_compiling() or (positions.is_cuda and torch.cuda.is_current_stream_capturing()):
            return self.compute(**args)
        key = (tuple(positions.shape), positions.stride(), positions.dtype, positions.device, inner_dim,
               tuple(max_pos), use_middle_indices_grid, num_attention_heads, x_dtype)
        hit = self.entries.get(key)
        if hit is not None and torch.equal(hit[0], positions):
            self.entries.move_to_end(key)
            return hit[1]
        tables = self.compute(**args)
        self.computed += 1
        self.entries[key] = (positions.clone(), tables)
        self.entries.move_to_end(key)
        while len(self.entries) > KEEP:
            self.entries.popitem(last=False)
        return tables


def install(model: nn.Module) -> bool:
    """Give the preprocessors of LTX-2's LTXModel in `model` their table cache (once); False when
    there is none (or `ENABLED` is off)."""
    owner = dit_owner(model) if ENABLED else None
    if owner is None:
        return False
    done = False
    for name in ("video_args_preprocessor", "audio_args_preprocessor"):
        pre = getattr(owner, name, None)
        pre = getattr(pre, "simple_preprocessor", pre)  # the multi-modal one holds LTX-2's simple one
        compute = getattr(pre, METHOD, None)
        if compute is None:
            continue
        if not isinstance(compute, Tables):
            setattr(pre, METHOD, Tables(compute))
        done = True
    return done
