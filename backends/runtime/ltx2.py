"""LTX-2 v1.2.0 (ltx-core) as the runtime meets it: finding it, and laying out its DiffVAE decoder.

ltx-core is found as an installed `ltx_core` package, else under `$LTX2_CORE_SRC` (the `src`
folder of an ltx-core checkout; PyPI ships only 1.0.0, which has no DiffVAE). Its model modules
need torch, numpy, einops and safetensors.

`apply_decoder_layout(decoder, mode)` runs LTX-2's own `apply_diffvae_config` with the recipe of
`mode` (block class, deferred stage 4, W chunks, torch.compile of the blocks) but with the NA left
to the runtime: LTX-2 would turn compile off (chunked_compile) or raise (combined_compile) without
natten, because its fallback NA is not visible to torch.compile; ltx-tui's NA ops are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import sys
from typing import Any

import torch.nn as nn

ENV = "LTX2_CORE_SRC"
HOW = (f"install ltx-core v1.2.0, or set {ENV} to the src/ folder of an ltx-core v1.2.0 checkout "
       "(its model modules need torch, numpy, einops and safetensors)")


def import_from_src(package: str, env: str, how: str) -> tuple[Any, str | None]:
    """(`package`, None), found installed or under the folder `$env` names; or (None, why not and
    `how` to get it)."""
    src = os.environ.get(env)
    if src and src not in sys.path and os.path.isdir(os.path.join(src, package)):
        sys.path.append(src)
    try:
        return importlib.import_module(package), None
    except ImportError as e:
        where = f" ({env}={src!r})" if src else f" ({env} is not set)"
        return None, f"{package} is not importable{where}: {e}; {how}"


def import_ltx_core() -> tuple[Any, str | None]:
    """(the ltx_core package, None), or (None, why not and how to get it)."""
    return import_from_src("ltx_core", ENV, HOW)


OPS_MODULE = "ltx_core.model.transformer.ops"  # LTX-2 v1.2.0's own DiT block ops (TransformerOpsConfig's)


def is_ltx2_op(function: Any, name: str) -> bool:
    """Whether `function` is an instance of LTX-2's own block op class `name` (e.g. PytorchPreAttention)."""
    cls = type(function)
    return cls.__name__ == name and cls.__module__ == OPS_MODULE


def is_diffusion_decoder(model: nn.Module) -> bool:
    """Whether `model` is LTX-2's DiffusionVideoDecoder (checked without importing ltx_core)."""
    return any(c.__name__ == "DiffusionVideoDecoder" and c.__module__.startswith("ltx_core.")
               for c in type(model).__mro__)


@contextlib.contextmanager
def _quiet(logger_name: str):
    """LTX-2 logs a loud "natten is NOT installed" banner when its fallback NA is named; the
    runtime replaces that NA right after, so the banner would be wrong."""
    logger = logging.getLogger(logger_name)
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


@dataclasses.dataclass(frozen=True)
class ChunkedCompile:
    """What ltx-tui compiles in the chunked_compile layout beyond LTX-2's recipe (which compiles
    only each diffusion block's attention+MLP call, and there only the MLP half really: the
    attention half is an opaque op). Each part keeps LTX-2's in-place stage-5 buffers, so the
    peak stays the chunked layout's.

    slabs: the per-W-slab attention body (`_attn_on_chunk_impl`), with ltx-tui's NA op inside;
    with fused_qk, ltx-tui's slab loop around it too (`runtime.diffvae_slab.slab_residual`).
    det_stages: the NA blocks of stages 1-4 (LTX-2's own `compile_det_stages`).
    inject: the deferred stage-4 upsample + context projection of each W slab, with its in-place
    add into the stage-5 buffer (`runtime.diffvae_inject`).
    static_shapes: no `mark_dynamic` on T/H/W: a decode has one shape, and static kernels are
    faster; another shape recompiles.
    mlp_tile: tokens per tile of LTX-2's tiled SwiGLU where it still runs (the det stages, and
    stage 5 without fused_mlp; None: LTX-2's 16384, whose loop was bound by kernel launches on an
    H200 at stage 5); its workspace is tile x 4 x channels (512 MiB at 262144 x 256, stage 4).
    fused_qk: the slab body is ltx-tui's (`runtime.diffvae_slab`: one QKV projection, q/k norm +
    RoPE in one kernel) rather than LTX-2's, compiled.
    fused_mlp: the stage-5 blocks' modulated SwiGLU + residual is ltx-tui's one kernel
    (`runtime.diffvae_mlp`) rather than LTX-2's tiled op, in both chunked layouts (chunked_eager
    too: it is a kernel, not a compile), for blocks whose width the kernel takes
    (`kernels.swiglu_residual.supports`); it needs no workspace.
    fused_det: the det stages' q/k norms + RoPE are ltx-tui's one kernel (`runtime.diffvae_det`)
    rather than LTX-2's eager tiled RoPE op, in every layout but blackwell_dsl (a kernel, not a
    compile).
    """

    slabs: bool = True
    det_stages: bool = True
    inject: bool = True
    static_shapes: bool = True
    mlp_tile: int | None = 262_144
    fused_qk: bool = True
    fused_mlp: bool = True
    fused_det: bool = True


def decoder_recipe(mode: str, chunked: ChunkedCompile = ChunkedCompile()) -> Any:
    """LTX-2's install recipe for DiffVAE `mode`, with the NA left to the runtime."""
    from ltx_core.model.video_vae.transformer.config import DiffVAEMode, NAttentionKind

    recipe = DiffVAEMode(mode).resolve()
    if recipe.attention is NAttentionKind.BLACKWELL_DSL:
        return recipe
    if mode == "chunked_compile":
        recipe = dataclasses.replace(recipe, compile_det_stages=chunked.det_stages)
    # EAGER_SDPA keeps LTX-2 from remapping the recipe for a host without natten; the runtime's
    # NA step installs the NA the plan chose on every NeighborhoodAttention3D afterwards.
    return dataclasses.replace(recipe, attention=NAttentionKind.EAGER_SDPA, natten_backend=None)


def apply_decoder_layout(decoder: nn.Module, mode: str, chunked: ChunkedCompile = ChunkedCompile()) -> None:
    """Lay out `decoder` (LTX-2's DiffusionVideoDecoder) for DiffVAE `mode`; `chunked` says what
    the chunked_compile layout compiles."""
    apply = importlib.import_module("ltx_core.model.video_vae.transformer.apply")
    with _quiet("ltx_core.model.video_vae.transformer.fallback_na"):
        apply.apply_diffvae_config(decoder, decoder_recipe(mode, chunked))
    _settle_dynamo(decoder)
    if mode != "blackwell_dsl" and chunked.fused_det:
        from backends.runtime.diffvae_det import det_qkv_rope

        # NeighborhoodAttention3D.forward calls it (compiled by LTX-2 with the det stages, or eager)
        _compile_marked("attention", "det_qkv_rope", lambda attn, x: attn, {"ltx-tui": det_qkv_rope},
                        compile_bodies=False)
        for module in decoder.det_stages.modules():
            if hasattr(module, "kernel_size") and hasattr(module, "rope_dim_split"):
                module.ltx_tui_compiled = "ltx-tui"
    if mode in ("chunked_eager", "chunked_compile") and chunked.fused_mlp:
        from backends.runtime.diffvae_mlp import residual_mlp
        from kernels.swiglu_residual import supports

        # forward_attn_mlp calls it (compiled by LTX-2 in chunked_compile): ltx-tui's op, not compiled again
        _compile_marked("chunked.block", "residual_modulating_mlp", lambda x, mlp, *args: mlp,
                        {"ltx-tui": residual_mlp}, compile_bodies=False)
        for block in decoder.diff_blocks:
            if hasattr(block, "forward_attn_mlp") and supports(block.mlp.w_gate.in_features):
                block.mlp.ltx_tui_compiled = "ltx-tui"
    if mode != "chunked_compile":
        return
    if chunked.mlp_tile:
        swiglu = importlib.import_module("ltx_core.model.video_vae.transformer.swiglu")
        swiglu.configure_swiglu_tile(decoder, tile_size=chunked.mlp_tile)
    if chunked.static_shapes:
        decoder.mark_dynamic_shapes = False
    if chunked.slabs:
        from backends.runtime.diffvae_slab import slab_attention, slab_residual

        namespace = importlib.import_module("ltx_core.model.video_vae.transformer.chunked.attn")
        _compile_marked("chunked.attn", "_attn_on_chunk_impl", lambda fn, attn, *args: attn,
                        {"ltx-tui": slab_attention})
        loop = namespace._run_w_chunked_residual
        _compile_marked("chunked.attn", "_run_w_chunked_residual",
                        lambda *args: namespace._CHUNKED_ATTN_MODULE.get(),  # bound by LTX-2's chunked()
                        {"ltx-tui": slab_residual, "ltx-2": getattr(loop, "__wrapped__", loop)},
                        compile_bodies=False)
        for module in decoder.diff_blocks.modules():
            if hasattr(module, "kernel_size") and hasattr(module, "attention_function"):
                module.ltx_tui_compiled = "ltx-tui" if chunked.fused_qk else "ltx-2"
    if chunked.inject:
        from backends.runtime.diffvae_inject import inject_context

        _compile_marked("chunked.block", "inject_context", lambda x, feat, up, ctx, *args: ctx.weight,
                        {"ltx-tui": inject_context}, compile_bodies=False)
        for block in decoder.diff_blocks:
            if hasattr(block, "context_proj"):
                block.context_proj.weight.ltx_tui_compiled = "ltx-tui"


# Dynamo settings for every compiled region of a laid-out decoder: Dynamo counts recompiles per
# code object, and LTX-2 compiles one method per block (16 det blocks of stages 1-4: 4 shapes, 3
# widths), so its default limit of 8 would silently leave the blocks past it eager; and a shape
# seen second is compiled for that shape, not made symbolic (automatic dynamic shapes fail to
# compile some of the decoder's graphs: an AssertionError "vr must not be None" on the CPU). A
# graph Inductor cannot build (seen once on the H200: a SyntaxError in its generated code) runs
# eagerly, decided before that graph runs, with Dynamo's warning on stderr, instead of ending
# the decode.
DYNAMO_SETTINGS = {"recompile_limit": 256, "automatic_dynamic_shapes": False, "suppress_errors": True}


def under_settings(compiled):
    """`compiled`, called under DYNAMO_SETTINGS."""
    import torch

    def run(*args, **kwargs):
        with torch._dynamo.config.patch(**DYNAMO_SETTINGS):
            return compiled(*args, **kwargs)
    return run


def _settle_dynamo(decoder: nn.Module) -> None:
    """Run each method LTX-2 compiled in `decoder` under DYNAMO_SETTINGS."""
    import functools

    for module in decoder.modules():
        for name, fn in list(vars(module).items()):
            if callable(fn) and hasattr(fn, "_torchdynamo_orig_callable"):
                setattr(module, name, functools.wraps(fn)(under_settings(fn)))


def _compile_marked(module: str, name: str, owner, bodies: dict | None = None, compile_bodies: bool = True) -> None:
    """Replace LTX-2's function `name` of `...transformer.<module>` by one that, when `owner(*args)`
    (a module or parameter) is marked `ltx_tui_compiled = key`, runs `bodies[key]` compiled
    ("ltx-2": LTX-2's own function; `compile_bodies=False`: `bodies` as they are, for a function
    LTX-2 calls inside a region it compiles itself), and LTX-2's function as it is for anything
    unmarked (so LTX-2's own decoders in the same process keep their behaviour).

    In the chunked layouts LTX-2 runs the attention half of each diffusion block as one opaque
    custom op (`ltx_core::na_residual_w_chunked`) that loops over W slabs eagerly, and injects the
    deferred stage-4 context slab by slab outside any compiled region. The per-slab bodies have
    fixed shapes per decode; compiled, their elementwise work fuses and ltx-tui's NA op sits
    inside the graph. Where `runtime.diffvae_slab` and `runtime.diffvae_inject` say, the loops
    around them are ltx-tui's too.
    """
    import functools

    import torch

    namespace = importlib.import_module(f"ltx_core.model.video_vae.transformer.{module}")
    installed = getattr(namespace, name)
    compiled = getattr(installed, "ltx_tui_bodies", None)
    if compiled is None:
        original, compiled = installed, {}

        @functools.wraps(original)
        def body(*args, **kwargs):
            key = getattr(owner(*args), "ltx_tui_compiled", None)
            return original(*args, **kwargs) if key is None else compiled[key](*args, **kwargs)

        body.ltx_tui_bodies = compiled
        setattr(namespace, name, body)
    if not compile_bodies:
        compiled.update({key: fn for key, fn in (bodies or {}).items() if key not in compiled})
        return
    for key, fn in {"ltx-2": getattr(installed, "__wrapped__", installed), **(bodies or {})}.items():
        if key not in compiled:
            compiled[key] = under_settings(torch.compile(fn))


# --- LTX-2's real modules in small configurations (smoke checks, tests) ------------------------

def wake_zero_tables(model: nn.Module, generator: Any = None) -> nn.Module:
    """Give LTX-2's AdaLN tables (`*scale_shift_table*`, allocated uninitialised: a checkpoint
    fills them) and the parameters it initialises to zero (AdaLN-Zero projections) small random
    values, so every path of a randomly initialised model is finite and shapes its output."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() and ("scale_shift_table" in name or not p.abs().max() or not p.isfinite().all()):
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32).mul_(0.1).to(p))
    return model


def tiny_decoder(seed: int = 0) -> nn.Module:
    """LTX-2's DiffusionVideoDecoder, 5 stages, head_dim 16, kernels 3x3x3; ~0.45 M parameters."""
    import torch
    from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder

    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = DiffusionVideoDecoder(in_channels=16, head_dim=16, stage_channels=(128, 64, 32, 32, 16),
                                        stage_depths=(1, 1, 1, 1, 2), stage_kernels=((3, 3, 3),) * 5,
                                        stage5_kernel=(3, 3, 3), t_emb_dim=64)
    return wake_zero_tables(decoder.eval(), g)


def decoder_latent(decoder: nn.Module, frames: int = 2, height: int = 3, width: int = 3, seed: int = 0):
    """A latent (1, C, frames, height, width) for `decoder`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, decoder.per_channel_statistics.get_buffer("std-of-means").numel(), frames, height, width,
                       generator=g)


def tiny_transformer(seed: int = 0, layers: int = 2) -> nn.Module:
    """LTX-2's audio-video LTXModel: 2 heads x 32 (video), 2 x 16 (audio), `layers` blocks."""
    import torch
    from ltx_core.model.transformer.model import LTXModel, LTXModelType

    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LTXModel(model_type=LTXModelType.AudioVideo, num_attention_heads=2, attention_head_dim=32,
                         in_channels=16, out_channels=16, num_layers=layers, cross_attention_dim=64,
                         audio_num_attention_heads=2, audio_attention_head_dim=16, audio_in_channels=8,
                         audio_out_channels=8, audio_cross_attention_dim=32)
    return wake_zero_tables(model.eval(), g)


def transformer_inputs(tokens: int = 24, audio_tokens: int = 10, context: int = 7, seed: int = 0,
                       device: Any = "cpu", dtype: Any = None, channels: int = 16, context_dim: int = 64,
                       with_audio: bool = True, audio_channels: int = 8, audio_context_dim: int = 32,
                       padded: int = 2) -> tuple:
    """(video, audio, perturbations) for `tiny_transformer` (or, with `channels`/`context_dim` and
    `with_audio`, another LTXModel), with a text mask whose last `padded` tokens are padding (the masked
    slot runs); `padded=0`: no mask, as LTX-2 v1.2.0's pipelines call the DiT (`context_mask=None`).
    Timesteps (B, T, 1), as its pipelines make them (`denoise_mask * sigma`)."""
    import torch
    from ltx_core.model.transformer.modality import Modality

    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    def positions(n: int, dims: int):
        start = torch.arange(n, dtype=torch.float32)
        pos = torch.stack([start, start + 1], dim=-1)[None, None].expand(1, dims, n, 2)
        return pos.contiguous().to(device)

    mask = None
    if padded:
        mask = torch.ones(1, context, dtype=torch.long, device=device)  # 0: a padded text token
        mask[:, -padded:] = 0
    sigma = torch.full((1,), 0.5, device=device)
    video = Modality(latent=rand(1, tokens, channels), sigma=sigma,
                     timesteps=torch.full((1, tokens, 1), 0.5, device=device), positions=positions(tokens, 3),
                     context=rand(1, context, context_dim), context_mask=mask)
    if not with_audio:
        return video, None, None
    audio = Modality(latent=rand(1, audio_tokens, audio_channels), sigma=sigma,
                     timesteps=torch.full((1, audio_tokens, 1), 0.5, device=device),
                     positions=positions(audio_tokens, 1),
                     context=rand(1, context, audio_context_dim))
    return video, audio, None
