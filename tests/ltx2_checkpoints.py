"""Random LTX-2 v1.2.0 checkpoints that LTX-2's own, unmodified pipeline modules load.

Every tensor name and shape is read off a model that LTX-2's own configurators build (on the
meta device) from the very config this module writes into the file's metadata, then mapped
back to the on-disk key layout that LTX-2's loaders (its ``SDOps``) expect. Only config
values are written here; module structure, key names and shapes follow whatever LTX-2
sources are importable (``ltx_core`` on ``sys.path``). What is written:

* the monolith checkpoint: ``__metadata__["config"]`` (JSON: ``transformer``, ``vae``,
  ``audio_vae``, ``vocoder``) + ``model_version``; keys ``model.diffusion_model.*`` (the
  ``LTXModel`` and the two embeddings connectors), ``text_embedding_projection.*``, ``vae.*``
  (``VideoEncoder`` + a ``CausalDiffusionVAE`` ``DiffusionVideoDecoder`` with fused
  ``qkv``, as released files ship it), ``audio_vae.*`` and ``vocoder.*``;
* a Gemma 3 root folder (HF layout: ``config.json``, a ``tokenizers`` BPE ``tokenizer.json``
  trained here on a few sentences, ``tokenizer_config.json``, ``processor_config.json``,
  ``preprocessor_config.json``, ``chat_template.jinja``, ``model.safetensors``);
* the spatial latent upsampler (its own file, ``config`` metadata);
* a distilled LoRA (``diffusion_model.<linear>.lora_{A,B}.weight``) for the two-stage
  pipelines that take ``--distilled-lora``.

``size="tiny"``: a few narrow DiT blocks, a narrow DiffVAE, a tiny Gemma; a whole CPU run of
a pipeline takes seconds. ``size="full"``: the configurators' default DiT (48 blocks unless
``dit_blocks`` says fewer), the default ``DiffusionVideoDecoder``, LTX-2's video encoder and
audio VAE / vocoder, the default upsampler, and a small Gemma whose hidden width (3840) keeps
every DiT-side shape at its default. Weights are random bf16, written tensor by tensor
(the safetensors file is streamed; large tensors reuse seeded random pools), so the ~38 GB
monolith never sits in RAM.

CLI: ``python tests/ltx2_checkpoints.py OUT_DIR [--size tiny|full] [--dit-blocks N]``
(``ltx_core`` must be importable: put LTX-2's ``ltx-core/src`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MODEL_VERSION = "2.3.0"
"""``model_version`` stamped on the monolith: an LTX-2.3 generation (gemma3 text encoder,
so no ``gemma_source_checkpoint`` is required; pipelines pick ``LTX_2_3_PARAMS``)."""

PIPELINE_MODULES = ("distilled", "ti2vid_one_stage", "ti2vid_two_stages")
MGPU_MODULES = ("distilled_mgpu", "ti2vid_two_stages_mgpu")
"""LTX-2's multi-GPU modules with the same command line as their single-GPU module (``_mgpu`` dropped)."""
STAND_INS = Path(__file__).resolve().parent / "stand_ins"
"""Test-only stand-ins (``torchaudio``: imported by ``ltx_core.model.audio_vae``, never called
by the generation pipelines); see :func:`stand_in_paths`."""
DEFAULT_PROMPT = "A red fox trots across a snowy meadow at dawn."

_SIZES = ("tiny", "full")
_FULL_DIT_BLOCKS = 48
_TINY_DIT_BLOCKS = 2
_LORA_RANK = {"tiny": 4, "full": 16}

# Gemma 3 special tokens, in id order (ids 0..8 of the tiny vocabulary).
_GEMMA_SPECIAL_TOKENS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
)
_GEMMA_VOCAB_SIZE = 384
_GEMMA_TRAINING_SENTENCES = (
    "A red fox trots across a snowy meadow at dawn.",
    "The camera slowly pans over a quiet harbor while gulls call overhead.",
    "A woman in a yellow raincoat laughs and says hello to her friend.",
    "Close-up of a steaming cup of coffee on a wooden table, soft morning light.",
    "blurry, out of focus, overexposed, underexposed, low contrast, washed out colors",
    "Cinematic wide shot of mountains under a starry sky, time-lapse clouds drifting.",
    "user prompt: a dog runs on the beach. model: The golden retriever sprints along the shore.",
)
_GEMMA_CHAT_TEMPLATE = (  # Gemma 3's turn format (system text goes in a user turn here)
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Checkpoints:
    """Paths of one written checkpoint set (all absolute)."""

    root: Path
    size: str
    checkpoint: Path  # the monolith (--checkpoint-path / --distilled-checkpoint-path)
    gemma_root: Path  # --gemma-root
    spatial_upsampler: Path  # --spatial-upsampler-path
    distilled_lora: Path  # --distilled-lora

    @classmethod
    def at(cls, out_dir: str | os.PathLike[str], size: str = "tiny") -> Checkpoints:
        """The paths ``write_checkpoints(out_dir, size)`` writes (whether or not they exist yet)."""
        _check_size(size)
        root = Path(out_dir).resolve()
        return cls(root=root, size=size, **{key: root / name for key, name in _names(size).items()})

    def exists(self) -> bool:
        """Whether every file of the set is on disk."""
        needed = (self.checkpoint, self.spatial_upsampler, self.distilled_lora, self.gemma_root / "model.safetensors")
        return all(p.exists() for p in needed)

    def files(self) -> list[Path]:
        """Every file written, the Gemma folder's included."""
        single = [self.checkpoint, self.spatial_upsampler, self.distilled_lora]
        return single + sorted(p for p in self.gemma_root.rglob("*") if p.is_file())

    def sizes(self) -> dict[str, int]:
        """Bytes on disk per component (the Gemma folder summed)."""
        return {
            "checkpoint": self.checkpoint.stat().st_size,
            "gemma_root": sum(p.stat().st_size for p in self.gemma_root.rglob("*") if p.is_file()),
            "spatial_upsampler": self.spatial_upsampler.stat().st_size,
            "distilled_lora": self.distilled_lora.stat().st_size,
        }


# ---------------------------------------------------------------------------
# Configs (what LTX-2's configurators read)
# ---------------------------------------------------------------------------


def _transformer_config(size: str, num_layers: int) -> dict[str, Any]:
    """``config["transformer"]``: the values ``LTXModelConfigurator`` checks, then dimensions."""
    config: dict[str, Any] = {
        # Checked verbatim by LTXModelConfigurator.from_metadata.
        "dropout": 0.0,
        "attention_bias": True,
        "num_vector_embeds": None,
        "activation_fn": "gelu-approximate",
        "num_embeds_ada_norm": 1000,
        "use_linear_projection": False,
        "only_cross_attention": False,
        "cross_attention_norm": True,
        "double_self_attention": False,
        "upcast_attention": False,
        "standardization_norm": "rms_norm",
        "norm_elementwise_affine": False,
        "qk_norm": "rms_norm",
        "positional_embedding_type": "rope",
        "use_audio_video_cross_attention": True,
        "share_ff": False,
        "av_cross_ada_norm": True,
        "use_middle_indices_grid": True,
        # Latent channels are fixed by the pipelines (VIDEO_LATENT_CHANNELS, AudioLatentShape).
        "in_channels": 128,
        "out_channels": 128,
        "audio_in_channels": 128,
        "audio_out_channels": 128,
        "num_layers": num_layers,
        "norm_eps": 1e-06,
        "rope_type": "split",
        "positional_embedding_theta": 10000.0,
        "positional_embedding_max_pos": [20, 2048, 2048],
        "audio_positional_embedding_max_pos": [20],
        "timestep_scale_multiplier": 1000,
        "av_ca_timestep_scale_multiplier": 1,
    }
    if size == "full":
        # LTXModelConfigurator's defaults (the 19B audio-video DiT), caption projection in the
        # DiT (V1 text path: Gemma 3 width 3840, connectors 30 x 128).
        config.update(
            num_attention_heads=32,
            attention_head_dim=128,
            cross_attention_dim=4096,
            audio_num_attention_heads=32,
            audio_attention_head_dim=64,
            audio_cross_attention_dim=2048,
            caption_channels=3840,
            connector_num_attention_heads=30,
            connector_attention_head_dim=128,
            connector_num_layers=2,
        )
    else:
        config.update(
            num_attention_heads=2,
            attention_head_dim=32,
            cross_attention_dim=64,
            audio_num_attention_heads=2,
            audio_attention_head_dim=16,
            audio_cross_attention_dim=32,
            caption_channels=64,  # == tiny Gemma hidden_size
            connector_num_attention_heads=2,
            connector_attention_head_dim=32,
            connector_num_layers=1,
        )
    return config


def _vae_config(size: str) -> dict[str, Any]:
    """``config["vae"]``: a ``CausalDiffusionVAE`` (video encoder + DiffVAE decoder)."""
    from ltx_core.model.video_vae import diffusion_video_decoder as dvd

    upsamples = [[list(stride), reduction] for stride, reduction in dvd._L_UPSAMPLES]
    if size == "full":
        # LTX-2's video encoder; the decoder is DiffusionVideoDecoder()'s own defaults, spelled
        # out because the tiling helpers require stage_channels / head_dim in the config.
        encoder_blocks = [
            ["res_x", {"num_layers": 4}],
            ["compress_space_res", {"multiplier": 2}],
            ["res_x", {"num_layers": 6}],
            ["compress_time_res", {"multiplier": 2}],
            ["res_x", {"num_layers": 6}],
            ["compress_all_res", {"multiplier": 2}],
            ["res_x", {"num_layers": 2}],
            ["compress_all_res", {"multiplier": 2}],
            ["res_x", {"num_layers": 2}],
        ]
        decoder = {
            "head_dim": 64,
            "stage_channels": list(dvd._L_STAGE_CHANNELS),
            "stage_depths": list(dvd._DIFF_STAGE_DEPTHS_DEFAULT),
            "t_emb_dim": 384,
            "stage_kernels": [list(k) for k in dvd._L_STAGE_KERNELS],
            "stage5_kernel": list(dvd._DIFF_STAGE5_KERNEL_DEFAULT),
        }
    else:
        # Same 8x32x32 compression (the pipelines assume it), channel-preserving and 1 block each.
        encoder_blocks = [
            ["compress_space_res", {"multiplier": 1}],
            ["compress_time_res", {"multiplier": 1}],
            ["compress_all_res", {"multiplier": 1}],
            ["compress_all_res", {"multiplier": 1}],
        ]
        decoder = {
            "head_dim": 16,  # smallest the default RoPE split allows
            "stage_channels": [128, 64, 32, 32, 16],  # each stage = previous / upsample reduction
            "stage_depths": [1, 1, 1, 1, 1],
            "t_emb_dim": 32,
            # 3x3x3 neighbourhoods: the decoder edge-pads latents up to what its kernels need
            # (7 latent pixels for the default stage-1 (3, 7, 7)), which would dominate a CPU run.
            "stage_kernels": [[3, 3, 3]] * 5,
            "stage5_kernel": [3, 3, 3],
        }
    decoder.update(
        in_channels=128,
        out_channels=3,
        patch_size=4,
        upsamples=upsamples,
        default_num_inference_steps=2,
        timestep_scale_multiplier=1.0,
    )
    return {
        "_class_name": "CausalDiffusionVAE",
        "latent_channels": 128,
        "model_output_type": "v",
        "encoder": {
            "dims": 3,
            "in_channels": 3,
            "out_channels": 128,
            "patch_size": 4,
            "blocks": encoder_blocks,
            "norm_layer": "pixel_norm",
            "latent_log_var": "uniform",
            "spatial_padding_mode": "zeros",
        },
        "decoder": decoder,
    }


def _audio_vae_config(size: str) -> dict[str, Any]:
    """``config["audio_vae"]``. ``ch`` stays 128: it is also the patchified latent width."""
    if size == "full":
        ddconfig = {"ch_mult": [1, 2, 4], "num_res_blocks": 2, "attn_resolutions": [8, 16, 32]}
    else:
        ddconfig = {"ch_mult": [1], "num_res_blocks": 1, "attn_resolutions": [], "mid_block_add_attention": False}
    ddconfig.update(
        ch=128,
        out_ch=2,
        in_channels=2,
        resolution=256,
        z_channels=8,
        double_z=True,
        mel_bins=64,  # the vocoder reads 2 x 64 mel channels
        norm_type="pixel",
        causality_axis="height",
        dropout=0.0,
        attn_type="vanilla",
    )
    ddconfig.setdefault("mid_block_add_attention", True)
    return {
        "model": {"params": {"ddconfig": ddconfig, "sampling_rate": 16000}},
        "preprocessing": {
            "stft": {"hop_length": 160, "filter_length": 1024, "causal": True},
            "mel": {"n_mel_channels": 64},
        },
    }


def _vocoder_config(size: str) -> dict[str, Any]:
    """``config["vocoder"]``: the flat (pre-BWE) HiFi-GAN layout ``VocoderConfigurator`` checks."""
    config: dict[str, Any] = {"resblock": "1", "stereo": True, "output_sampling_rate": 24000}
    if size == "tiny":
        config.update(
            upsample_initial_channel=32,
            resblock_kernel_sizes=[3],
            resblock_dilation_sizes=[[1, 3, 5]],
        )
    return config


def _upsampler_config(size: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "in_channels": 128,
        "dims": 3,
        "spatial_upsample": True,
        "temporal_upsample": False,
        "spatial_scale": 2.0,
        "rational_resampler": False,
    }
    if size == "full":
        config.update(mid_channels=512, num_blocks_per_stage=4)
    else:
        # GroupNorm(32, mid_channels): 2 channels per group keep a 1-frame 1x1 latent normalisable.
        config.update(mid_channels=64, num_blocks_per_stage=1)
    return config


def _gemma_config(size: str, token_ids: dict[str, int], vocab_size: int) -> dict[str, Any]:
    """A Gemma 3 ``config.json`` (``Gemma3ForConditionalGeneration``: text + SigLIP vision)."""
    if size == "full":
        text = {
            "hidden_size": 3840,  # Gemma 3 12B's width: keeps caption_channels / connectors at default
            "intermediate_size": 1536,
            "num_hidden_layers": 2,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "query_pre_attn_scalar": 256,
        }
    else:
        text = {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "query_pre_attn_scalar": 32,
        }
    text.update(
        model_type="gemma3_text",
        vocab_size=vocab_size,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=8192,  # prompts pad to 1024; enhancement adds a ~3k-token system prompt
        sliding_window=512,
        sliding_window_pattern=6,
        rope_theta=1_000_000.0,
        rope_local_base_freq=10_000.0,
        rms_norm_eps=1e-06,
        pad_token_id=token_ids["<pad>"],
        bos_token_id=token_ids["<bos>"],
        eos_token_id=[token_ids["<eos>"], token_ids["<end_of_turn>"]],
        attention_bias=False,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_channels": 3,
        "image_size": 32,
        "patch_size": 8,  # 4 x 4 patches, pooled 2 x 2 into mm_tokens_per_image = 4
        "layer_norm_eps": 1e-06,
        "vision_use_head": False,
    }
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": text,
        "vision_config": vision,
        "mm_tokens_per_image": 4,
        "boi_token_index": token_ids["<start_of_image>"],
        "eoi_token_index": token_ids["<end_of_image>"],
        "image_token_index": token_ids["<image_soft_token>"],
        "initializer_range": 0.02,
        "dtype": "bfloat16",
    }


def ltx2_config(size: str = "tiny", *, dit_blocks: int | None = None) -> dict[str, Any]:
    """The monolith's ``__metadata__["config"]`` for ``size`` (JSON-serialisable)."""
    _check_size(size)
    num_layers = dit_blocks if dit_blocks is not None else (_FULL_DIT_BLOCKS if size == "full" else _TINY_DIT_BLOCKS)
    if num_layers < 1:
        raise ValueError(f"dit_blocks must be >= 1, got {num_layers}")
    return {
        "transformer": _transformer_config(size, num_layers),
        "vae": _vae_config(size),
        "audio_vae": _audio_vae_config(size),
        "vocoder": _vocoder_config(size),
    }


def _check_size(size: str) -> None:
    if size not in _SIZES:
        raise ValueError(f"size must be one of {_SIZES}, got {size!r}")


# ---------------------------------------------------------------------------
# Tensor specs: on-disk key, shape, init -- from LTX-2's own meta models
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    init: str  # "normal" | "ones" | "zeros"
    std: float = 0.0


def _init_for(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[str, float]:
    """Init a random model can run with: fan-in-scaled normals, identity-ish norms/statistics."""
    if not dtype.is_floating_point:
        return "zeros", 0.0
    if name.endswith("std-of-means"):
        return "ones", 0.0
    if name.endswith("mean-of-means"):
        return "zeros", 0.0
    if len(shape) <= 1:
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "weight" and "norm" in name:
            return "ones", 0.0
        return "normal", 0.02
    fan_in = math.prod(shape[1:])
    return "normal", 1.0 / math.sqrt(max(fan_in, 1))


def _spec(key: str, name: str, shape: Iterable[int], dtype: torch.dtype, write_dtype: torch.dtype) -> _Spec:
    shape = tuple(int(d) for d in shape)
    init, std = _init_for(name, shape, dtype)
    return _Spec(key, shape, write_dtype if dtype.is_floating_point else dtype, init, std)


def _meta_state(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Persistent state (what a checkpoint carries) of a meta model."""
    yield from model.state_dict(keep_vars=True).items()


def _meta_model(configurator: type, metadata: dict[str, Any]) -> torch.nn.Module:
    from ltx_core.loader.helpers import create_meta_model

    return create_meta_model(configurator, metadata)


class _SpecSet:
    """Ordered, de-duplicated specs; a key seen twice must agree on shape (shared statistics)."""

    def __init__(self) -> None:
        self._specs: dict[str, _Spec] = {}

    def add(self, spec: _Spec) -> None:
        seen = self._specs.get(spec.key)
        if seen is None:
            self._specs[spec.key] = spec
        elif seen.shape != spec.shape:
            raise ValueError(f"{spec.key}: two components disagree on its shape ({seen.shape} vs {spec.shape})")

    def add_model(
        self,
        model: torch.nn.Module,
        to_file_key: Callable[[str], str | None],
        write_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        for name, tensor in _meta_state(model):
            key = to_file_key(name)
            if key is not None:
                self.add(_spec(key, name, tensor.shape, tensor.dtype, write_dtype))

    def __iter__(self) -> Iterator[_Spec]:
        return iter(self._specs.values())


def _prefixed(prefix: str, shared: dict[str, str] | None = None) -> Callable[[str], str]:
    """``name -> prefix + name``, except names starting with a ``shared`` key (re-prefixed)."""

    def to_file_key(name: str) -> str:
        for start, replacement in (shared or {}).items():
            if name.startswith(start):
                return replacement + name[len(start) :]
        return prefix + name

    return to_file_key


def _diffvae_decoder_specs(decoder: torch.nn.Module, specs: _SpecSet) -> None:
    """DiffVAE decoder keys as released files carry them (inverse of LTX-2's decoder SDOps):
    ``t_embedder.mlp.{0,2}`` and one fused ``qkv`` per attention (the loader splits it)."""
    renames = (
        ("t_embedder.timestep_embedder.linear_1.", "t_embedder.mlp.0."),
        ("t_embedder.timestep_embedder.linear_2.", "t_embedder.mlp.2."),
    )
    fused: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in _meta_state(decoder):
        if name.startswith("per_channel_statistics."):
            specs.add(_spec("vae." + name, name, tensor.shape, tensor.dtype, torch.bfloat16))
            continue
        for old, new in renames:
            if name.startswith(old):
                name = new + name[len(old) :]
        head, _, leaf = name.rpartition(".")
        if head.endswith((".qkv.to_q", ".qkv.to_k", ".qkv.to_v")):
            fused.setdefault(f"{head[: -len('.to_q')]}.{leaf}", []).append((head[-4:], tensor))
            continue
        specs.add(_spec("vae.decoder." + name, name, tensor.shape, tensor.dtype, torch.bfloat16))
    for name, parts in fused.items():
        order = {"to_q": 0, "to_k": 1, "to_v": 2}
        parts.sort(key=lambda p: order[p[0]])
        if [p[0] for p in parts] != ["to_q", "to_k", "to_v"]:
            raise ValueError(f"{name}: expected to_q/to_k/to_v, got {[p[0] for p in parts]}")
        first = parts[0][1]
        shape = (3 * first.shape[0], *first.shape[1:])
        specs.add(_spec("vae.decoder." + name, name, shape, first.dtype, torch.bfloat16))


def _monolith_specs(metadata: dict[str, Any], gemma_root: Path) -> _SpecSet:
    from ltx_core.model.audio_vae import AudioDecoderConfigurator, AudioEncoderConfigurator, VocoderConfigurator
    from ltx_core.model.transformer import LTXModelConfigurator
    from ltx_core.model.video_vae import VideoDecoderConfigurator, VideoEncoderConfigurator
    from ltx_core.text_encoders.gemma import EmbeddingsProcessorConfigurator

    specs = _SpecSet()
    specs.add_model(_meta_model(LTXModelConfigurator, metadata), _prefixed("model.diffusion_model."))
    embeddings = _meta_model(EmbeddingsProcessorConfigurator.with_gemma_model_path(str(gemma_root)), metadata)
    specs.add_model(
        embeddings,
        _prefixed(
            "",
            {
                "feature_extractor.": "text_embedding_projection.",
                "video_connector.": "model.diffusion_model.video_embeddings_connector.",
                "audio_connector.": "model.diffusion_model.audio_embeddings_connector.",
            },
        ),
    )
    stats = {"per_channel_statistics.": "vae.per_channel_statistics."}
    specs.add_model(_meta_model(VideoEncoderConfigurator, metadata), _prefixed("vae.encoder.", stats))
    decoder = _meta_model(VideoDecoderConfigurator, metadata)
    if type(decoder).__name__ != "DiffusionVideoDecoder":
        raise TypeError(f"VideoDecoderConfigurator built {type(decoder).__name__}, expected DiffusionVideoDecoder")
    _diffvae_decoder_specs(decoder, specs)
    audio_stats = {"per_channel_statistics.": "audio_vae.per_channel_statistics."}
    specs.add_model(_meta_model(AudioEncoderConfigurator, metadata), _prefixed("audio_vae.encoder.", audio_stats))
    specs.add_model(_meta_model(AudioDecoderConfigurator, metadata), _prefixed("audio_vae.decoder.", audio_stats))
    specs.add_model(_meta_model(VocoderConfigurator, metadata), _prefixed("vocoder."))
    return specs


def _gemma_specs(gemma_config: dict[str, Any]) -> _SpecSet:
    """Gemma 3 weights in the HF checkpoint layout LTX-2's ``GEMMA3_LLM_KEY_OPS`` maps from."""
    from ltx_core.text_encoders.gemma import GemmaAssets, LTXGemmaTextEncoder, build_gemma_hf_config
    from transformers import AutoModelForImageTextToText

    assets = GemmaAssets(
        source="<generated>", config_dict=gemma_config, tokenizer_json=b"", sidecars={}, weight_paths=()
    )
    with torch.device("meta"):
        model = LTXGemmaTextEncoder(model=AutoModelForImageTextToText.from_config(build_gemma_hf_config(assets)))

    def to_file_key(name: str) -> str | None:
        if name == "model.lm_head.weight":
            return None  # tied to embed_tokens; LTX-2 mirrors it at load time
        for start, replacement in (
            ("model.model.language_model.", "language_model.model."),
            ("model.model.vision_tower.", "vision_tower.vision_model."),
            ("model.model.multi_modal_projector.", "multi_modal_projector."),
        ):
            if name.startswith(start):
                return replacement + name[len(start) :]
        raise ValueError(f"Gemma parameter {name!r} has no checkpoint key mapping")

    specs = _SpecSet()
    specs.add_model(model, to_file_key)
    return specs


def _lora_specs(metadata: dict[str, Any], rank: int) -> _SpecSet:
    """A LoRA on every Linear of the DiT's transformer blocks (Comfy ``diffusion_model.`` keys)."""
    from ltx_core.model.transformer import LTXModelConfigurator

    model = _meta_model(LTXModelConfigurator, metadata)
    specs = _SpecSet()
    for name, module in model.named_modules():
        if not (name.startswith("transformer_blocks.") and isinstance(module, torch.nn.Linear)):
            continue
        out_features, in_features = module.weight.shape
        key = f"diffusion_model.{name}"
        specs.add(_Spec(f"{key}.lora_A.weight", (rank, in_features), torch.bfloat16, "normal", in_features**-0.5))
        specs.add(_Spec(f"{key}.lora_B.weight", (out_features, rank), torch.bfloat16, "normal", 0.01))
    return specs


def _upsampler_specs(config: dict[str, Any]) -> _SpecSet:
    from ltx_core.model.upsampler import LatentUpsamplerConfigurator

    specs = _SpecSet()
    specs.add_model(_meta_model(LatentUpsamplerConfigurator, {"config": config}), lambda name: name)
    return specs


# ---------------------------------------------------------------------------
# Streaming safetensors writer
# ---------------------------------------------------------------------------

_ST_DTYPES = {
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_POOL_NUMEL = 1 << 24  # 32 MiB of bf16 per distinct std
_DIRECT_MAX_NUMEL = 1 << 22  # smaller tensors are drawn directly


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _as_bytes(t: torch.Tensor) -> memoryview:
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return memoryview(t.view(torch.uint8).numpy())


class _RandomSource:
    """Seeded values: small tensors drawn directly; large ones cycle a per-std random pool
    from a random offset (fast enough for tens of GB, still deterministic)."""

    def __init__(self, seed: int) -> None:
        self._gen = torch.Generator().manual_seed(seed)
        self._pools: dict[tuple[torch.dtype, float], memoryview] = {}

    def _normal(self, numel: int, std: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=torch.float32).normal_(0.0, std, generator=self._gen).to(dtype)

    def chunks(self, spec: _Spec) -> Iterator[memoryview]:
        numel = math.prod(spec.shape)
        if spec.init != "normal" or not spec.dtype.is_floating_point:
            value = 1 if spec.init == "ones" else 0
            yield _as_bytes(torch.full((numel,), value, dtype=spec.dtype))
            return
        if numel <= _DIRECT_MAX_NUMEL:
            yield _as_bytes(self._normal(numel, spec.std, spec.dtype))
            return
        pool_key = (spec.dtype, round(spec.std, 12))
        pool = self._pools.get(pool_key)
        if pool is None:
            pool = _as_bytes(self._normal(_POOL_NUMEL, spec.std, spec.dtype))
            self._pools[pool_key] = pool
        item = _itemsize(spec.dtype)
        remaining = numel * item
        start = int(torch.randint(0, _POOL_NUMEL, (), generator=self._gen)) * item
        while remaining:
            piece = pool[start : start + remaining]
            yield piece
            remaining -= len(piece)
            start = 0


def _layout(specs: _SpecSet, metadata: dict[str, str]) -> tuple[list[_Spec], bytes, int]:
    """Tensor order, header bytes (length prefix included) and total file size."""
    ordered = sorted(specs, key=lambda s: -_itemsize(s.dtype))  # keeps every tensor aligned
    header: dict[str, Any] = {}
    offset = 0
    for spec in ordered:
        nbytes = math.prod(spec.shape) * _itemsize(spec.dtype)
        header[spec.key] = {
            "dtype": _ST_DTYPES[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    head = struct.pack("<Q", len(blob)) + blob
    return ordered, head, len(head) + offset


def _write_safetensors(path: Path, specs: _SpecSet, metadata: dict[str, str], source: _RandomSource) -> None:
    """Write ``specs`` as a safetensors file, one tensor at a time (never the whole file in RAM)."""
    ordered, head, size = _layout(specs, metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a full set is ~39 GiB: never hold the old and new file at once
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb", buffering=16 << 20) as f:
        f.write(head)
        for spec in ordered:
            f.writelines(source.chunks(spec))
    if tmp.stat().st_size != size:
        raise OSError(f"{tmp}: wrote {tmp.stat().st_size} bytes, expected {size}")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# Gemma root folder
# ---------------------------------------------------------------------------


def _gemma_tokenizer() -> tuple[str, dict[str, int], int]:
    """A byte-level BPE ``tokenizer.json`` trained here, with Gemma 3's special tokens:
    ``(json, special token ids, vocabulary size)``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_GEMMA_VOCAB_SIZE,
        special_tokens=list(_GEMMA_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_GEMMA_TRAINING_SENTENCES, trainer=trainer)
    ids = {token: tokenizer.token_to_id(token) for token in _GEMMA_SPECIAL_TOKENS}
    # Gemma 3's tokenizer emits a leading <bos> itself (LTX-2 relies on, or else adds, it).
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", ids["<bos>"])]
    )
    return tokenizer.to_str(), ids, tokenizer.get_vocab_size(with_added_tokens=True)


def _write_gemma_root(root: Path, size: str, source: _RandomSource) -> dict[str, Any]:
    tokenizer_json, ids, vocab_size = _gemma_tokenizer()
    config = _gemma_config(size, ids, vocab_size)
    image_tokens = {
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    }
    tokenizer_config = {
        "tokenizer_class": "GemmaTokenizer",
        "processor_class": "Gemma3Processor",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        **image_tokens,
        "extra_special_tokens": image_tokens,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "spaces_between_special_tokens": False,
        "padding_side": "left",
    }
    vision = config["vision_config"]
    preprocessor = {
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor",
        "do_convert_rgb": None,
        "do_normalize": True,
        "do_pan_and_scan": None,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "image_seq_length": config["mm_tokens_per_image"],
        "resample": 2,
        "rescale_factor": 1 / 255,
        "size": {"height": vision["image_size"], "width": vision["image_size"]},
    }
    processor = {"processor_class": "Gemma3Processor", "image_seq_length": config["mm_tokens_per_image"]}

    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob("*.safetensors"):
        stale.unlink()  # LTX-2 loads every *.safetensors under the weights folder
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (root / "tokenizer.json").write_text(tokenizer_json)
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (root / "processor_config.json").write_text(json.dumps(processor, indent=2) + "\n")
    (root / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")
    (root / "chat_template.jinja").write_text(_GEMMA_CHAT_TEMPLATE)
    _write_safetensors(root / "model.safetensors", _gemma_specs(config), {"format": "pt"}, source)
    return config


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _names(size: str) -> dict[str, str]:
    return {
        "checkpoint": f"ltx-2-{size}-random.safetensors",
        "gemma_root": f"gemma-3-{size}-random",
        "spatial_upsampler": f"ltx-2-spatial-upscaler-x2-{size}-random.safetensors",
        "distilled_lora": f"ltx-2-distilled-lora-{size}-random.safetensors",
    }


def write_checkpoints(
    out_dir: str | os.PathLike[str],
    size: str = "tiny",
    *,
    dit_blocks: int | None = None,
    seed: int = 0,
    model_version: str = MODEL_VERSION,
) -> Checkpoints:
    """Write a random LTX-2 v1.2.0 checkpoint set under ``out_dir`` and return its paths.

    Needs ``ltx_core`` (LTX-2's ``ltx-core/src``) and ``transformers`` / ``tokenizers``
    importable. Files are written to ``*.partial`` and renamed, so a crash leaves no
    truncated checkpoint behind. Deterministic for a given ``seed``.
    """
    ckpt = Checkpoints.at(out_dir, size)
    source = _RandomSource(seed)

    _write_gemma_root(ckpt.gemma_root, size, source)

    config = ltx2_config(size, dit_blocks=dit_blocks)
    metadata = {"config": config, "model_version": model_version}
    _write_safetensors(
        ckpt.checkpoint,
        _monolith_specs(metadata, ckpt.gemma_root),
        _monolith_metadata(config, model_version),
        source,
    )
    upsampler = _upsampler_config(size)
    _write_safetensors(ckpt.spatial_upsampler, _upsampler_specs(upsampler), _upsampler_metadata(upsampler), source)
    rank = _LORA_RANK[size]
    _write_safetensors(ckpt.distilled_lora, _lora_specs(metadata, rank), _lora_metadata(rank), source)
    return ckpt


def _monolith_metadata(config: dict[str, Any], model_version: str) -> dict[str, str]:
    return {"config": json.dumps(config), "model_version": model_version, "format": "pt"}


def _lora_metadata(rank: int) -> dict[str, str]:
    return {"format": "pt", "rank": str(rank), "alpha": str(rank)}


def _upsampler_metadata(config: dict[str, Any]) -> dict[str, str]:
    return {"config": json.dumps(config), "format": "pt"}


def planned_sizes(
    size: str = "tiny", *, dit_blocks: int | None = None, model_version: str = MODEL_VERSION
) -> dict[str, int]:
    """Bytes on disk of each part ``write_checkpoints(size, dit_blocks=...)`` writes, without
    writing the big files (only the small Gemma root goes to a temporary folder: its config
    feeds the shapes of the text projection)."""
    _check_size(size)
    config = ltx2_config(size, dit_blocks=dit_blocks)
    metadata = {"config": config, "model_version": model_version}
    upsampler = _upsampler_config(size)
    with tempfile.TemporaryDirectory(prefix="ltx2-sizes-") as tmp:
        gemma_root = Path(tmp) / "gemma"
        _write_gemma_root(gemma_root, size, _RandomSource(0))
        gemma_bytes = sum(p.stat().st_size for p in gemma_root.rglob("*") if p.is_file())
        monolith = _monolith_specs(metadata, gemma_root)
    return {
        "checkpoint": _layout(monolith, _monolith_metadata(config, model_version))[2],
        "gemma_root": gemma_bytes,
        "spatial_upsampler": _layout(_upsampler_specs(upsampler), _upsampler_metadata(upsampler))[2],
        "distilled_lora": _layout(_lora_specs(metadata, _LORA_RANK[size]), _lora_metadata(_LORA_RANK[size]))[2],
    }


def pipeline_args(
    ckpt: Checkpoints,
    module: str,
    *,
    width: int,
    height: int,
    frames: int,
    output: str | os.PathLike[str],
    steps: int | None = None,
    prompt: str = DEFAULT_PROMPT,
    seed: int = 0,
) -> list[str]:
    """``python -m ltx_pipelines.<module>`` arguments (module's own CLI) for ``ckpt``.

    ``module``: ``distilled``, ``ti2vid_one_stage`` or ``ti2vid_two_stages`` (or one of
    ``MGPU_MODULES``: the same arguments as the module without ``_mgpu``). ``steps`` sets
    ``--num-inference-steps`` (not a flag of ``distilled``, whose schedule is fixed). Two-stage
    modules need width/height divisible by 64, ``ti2vid_one_stage`` by 32; frames = 8k + 1.
    """
    if module in MGPU_MODULES:
        module = module.removesuffix("_mgpu")
    if module not in PIPELINE_MODULES:
        raise ValueError(f"module must be one of {PIPELINE_MODULES + MGPU_MODULES}, got {module!r}")
    checkpoint_flag = "--distilled-checkpoint-path" if module == "distilled" else "--checkpoint-path"
    args = [
        checkpoint_flag,
        str(ckpt.checkpoint),
        "--gemma-root",
        str(ckpt.gemma_root),
        "--prompt",
        prompt,
        "--output-path",
        str(output),
        "--seed",
        str(seed),
        "--width",
        str(width),
        "--height",
        str(height),
        "--num-frames",
        str(frames),
    ]
    if module in ("distilled", "ti2vid_two_stages"):
        args += ["--spatial-upsampler-path", str(ckpt.spatial_upsampler)]
    if module == "ti2vid_two_stages":
        args += ["--distilled-lora", str(ckpt.distilled_lora)]
    if steps is not None:
        if module == "distilled":
            raise ValueError("ltx_pipelines.distilled has no --num-inference-steps (fixed distilled schedule)")
        args += ["--num-inference-steps", str(steps)]
    return args


def stand_in_paths() -> list[Path]:
    """Entries to put on ``sys.path`` / ``PYTHONPATH`` before importing LTX-2: ``[STAND_INS]``
    when no real ``torchaudio`` is importable (none exists for torch 2.13), else ``[]``."""
    import importlib.util

    spec = importlib.util.find_spec("torchaudio")
    real = spec is not None and not str(spec.origin or "").startswith(str(STAND_INS))
    return [] if real else [STAND_INS]


def _human(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    value = nbytes / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def smallest_shape(module: str) -> dict[str, int]:
    """The smallest ``width`` / ``height`` / ``frames`` ``module`` accepts (two-stage pipelines
    need multiples of 64, ``ti2vid_one_stage`` of 32; frames = 8k + 1)."""
    side = 32 if module == "ti2vid_one_stage" else 64
    return {"width": side, "height": side, "frames": 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--size", choices=_SIZES, default="tiny")
    parser.add_argument("--dit-blocks", type=int, default=None, help="DiT blocks (default: tiny 2, full 48)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="only print the planned sizes")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(p) for p in stand_in_paths() if str(p) not in sys.path]

    if args.dry_run:
        for name, nbytes in planned_sizes(args.size, dit_blocks=args.dit_blocks).items():
            print(f"{name:18} {_human(nbytes):>12}  ({nbytes} bytes)")
        return 0

    started = time.perf_counter()
    ckpt = write_checkpoints(args.out_dir, args.size, dit_blocks=args.dit_blocks, seed=args.seed)
    elapsed = time.perf_counter() - started
    paths = {
        "checkpoint": ckpt.checkpoint,
        "gemma_root": ckpt.gemma_root,
        "spatial_upsampler": ckpt.spatial_upsampler,
        "distilled_lora": ckpt.distilled_lora,
    }
    sizes = ckpt.sizes()
    print(f"wrote {args.size} LTX-2 v1.2.0 checkpoints in {elapsed:.1f} s:")
    for name, path in paths.items():
        print(f"  {name:18} {_human(sizes[name]):>12}  {path}")
    print("\n# PYTHONPATH: ltx-core/src, ltx-pipelines/src" + (f", {STAND_INS}" if stand_in_paths() else ""))
    for module in PIPELINE_MODULES:
        output = ckpt.root / f"{module}.mp4"
        cli = pipeline_args(ckpt, module, output=output, **smallest_shape(module))
        print(f"\n# {module}\n" + shlex.join([sys.executable, "-m", f"ltx_pipelines.{module}", *cli]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
