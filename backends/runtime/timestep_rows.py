"""One AdaLN row for a modality whose timesteps are equal across its tokens.

LTX-2 v1.2.0's pipelines give the DiT per-token timesteps (`denoise_mask * sigma`: shape (B, T, 1),
the denoise mask's channel kept; `Modality` documents (B, T), which the preprocessor takes alike).
Its preprocessors embed every token's value (`TransformerArgsPreprocessor._prepare_timestep`: at
full size an MLP to 9 x 4096 values a token, 0.45 GB for 6144 tokens, and the A-V cross-attention's
own), and every block reads those per-token values back in each AdaLN modulation and gate: about
13 tensors of the activations' size a block. LTX-2 also takes timesteps of shape (B, 1), one value
broadcast over the tokens ("Second dimension is 1 or number of tokens", transformer_args.py;
compiling.py keeps such a dim static). Where every token of a batch row has the same value (no
conditioning mask: text-to-video, stage 2's noise), the one-token form ((B, 1) or (B, 1, 1))
computes the same numbers from one row. `install` gives LTXModel (any model type: audio and video,
video only, audio only) a forward pre-hook that checks each call (one device sync for both
modalities) and passes such timesteps with one token; the wrappers around it (LTX-2's `X0Model`,
its multi-GPU tiling) still see their own tensors, and a copy of the model keeps it. A modality
with a conditioning mask keeps its per-token form.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

WRAPPED = "_ltx_tui_timestep_rows"
ENABLED = True  # bench/ltx2_dit.py's `:per-token` ablation turns it off


def dit_owner(model: nn.Module) -> nn.Module | None:
    """LTX-2's `LTXModel` in `model` (itself or inside a wrapper); None for other models."""
    for module in model.modules():
        if hasattr(module, "video_args_preprocessor") or hasattr(module, "audio_args_preprocessor"):
            return module
    return None


def _per_token(modality) -> bool:
    """(B, T) or (B, T, 1) timesteps with T > 1."""
    t = getattr(modality, "timesteps", None)
    return isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[1] > 1 and all(n == 1 for n in t.shape[2:])


def collapse(*modalities):
    """The modalities with each per-token timesteps ((B, T) or (B, T, 1)) whose batch rows are
    constant replaced by its first token ((B, 1) or (B, 1, 1)); the others (None, values that
    differ, other shapes) as they are."""
    todo = [i for i, m in enumerate(modalities) if _per_token(m)]
    if not todo:
        return modalities
    flags = torch.stack([(t == t[:, :1]).all() for t in (modalities[i].timesteps for i in todo)])
    same = flags.tolist()  # the one host sync
    out = list(modalities)
    for i, uniform in zip(todo, same):
        if uniform:
            out[i] = dataclasses.replace(out[i], timesteps=out[i].timesteps[:, :1])
    return tuple(out)


def _rows_hook(module: nn.Module, args: tuple, kwargs: dict):
    """LTXModel's forward pre-hook: its video and audio (positional or by keyword) collapsed."""
    video = args[0] if args else kwargs.get("video")
    audio = args[1] if len(args) > 1 else kwargs.get("audio")
    both = collapse(video, audio)
    named = {k: v for k, v in zip(("video", "audio")[len(args):], both[len(args):]) if k in kwargs}
    return (*both[:len(args)], *args[2:]), {**kwargs, **named}


def install(model: nn.Module) -> bool:
    """Give LTX-2's LTXModel in `model` the collapsing forward pre-hook (once: a copy of the model
    keeps it); False when there is none (or `ENABLED` is off)."""
    owner = dit_owner(model) if ENABLED else None
    if owner is None:
        return False
    if not getattr(owner, WRAPPED, False):
        owner.register_forward_pre_hook(_rows_hook, with_kwargs=True)
        setattr(owner, WRAPPED, True)
    return True
