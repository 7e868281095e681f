"""The tensor shapes an LTX-2 v1.2.0 run has at a given resolution (pure data, no I/O).

Every number is a fact of ltx-core v1.2.0 (tests/test_ltx2_shapes.py checks them against its
source when it is importable, and the derived stage shapes against the shapes its real decoder
hands its NA modules):

- VAE compression (`ltx_core/types.py`, `SpatioTemporalScaleFactors.default()`): time 8, height
  32, width 32; a clip of `frames` = 8k+1 frames is a latent of k+1 frames of H/32 x W/32.
- DiT (`ltx_core/model/transformer/model.py`, `LTXModel.__init__` defaults, which
  `model_configurator.py` keeps unless a checkpoint overrides them): 48 layers, video 32 heads x
  128 (width 4096), patch size 1 (one token per latent voxel), cross-attention width 4096;
  the feed-forward is 4x the width (`FeedForward`, mult 4). Text context: the Gemma tokenizer's
  `TOKENIZER_MAX_LENGTH` 1024 (`text_encoders/gemma/gemma_assets.py`).
- DiffVAE decoder (`ltx_core/model/video_vae/diffusion_video_decoder.py`, the `_L_*`/`_DIFF_*`
  module constants): head_dim 64; stages 1-4 channels 1024, 512, 256, 256 with depths 4, 6, 4, 2
  and kernels (3,7,7), (3,7,7), (3,5,5), (3,5,5); upsamples between them with strides (1,2,2),
  (2,1,1), (2,2,2), (2,2,2); stage 5 (the diffusion stage): 128 channels (stage 4's 256 halved
  by the last upsample), 8 blocks, kernel (3,7,7), run once per inference step (2 by default)
  on the patchified pixels (patch 4: frames x H/4 x W/4).
- Frame bookkeeping (same file): stages 1-4 run with the last latent frame repeated
  (3 // 2) * 2 = 2 times (NATTEN's border workaround); an upsample with time stride 2 drops its
  leading frame, so T -> 2T - 1. Stage 5 runs on the clip's own frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TIME_SCALE, SPACE_SCALE = 8, 32
# ltx-tui's bounds on a run (LTX-2's pipelines state none; they catch typos such as 80000001 frames,
# whose memory plan ran to petabytes). LTX-2's DiT places tokens by time in seconds and space in pixels,
# its RoPE spanning [20 s, 2048 px, 2048 px] (ltx-core model.py, `positional_embedding_max_pos`):
# 1025 = 8 * 128 + 1 frames holds those 20 s up to 51 fps (43 s at the pipelines' default 24 fps);
# 4096 px a side (DCI 4K): the two-stage pipelines upsample 2x (ltx-pipelines `utils/constants.py`)
# from a first stage within those 2048 px.
MAX_FRAMES, MAX_SIDE = 1025, 4096
MAX_BATCH = 64  # also memory.max_batch_size's largest: a batch of 100000 planned 430 TiB

DIT_LAYERS, DIT_HEADS, DIT_HEAD_DIM, DIT_FF_MULT, TEXT_TOKENS = 48, 32, 128, 4, 1024

VAE_HEAD_DIM = 64
VAE_STAGE_CHANNELS = (1024, 512, 256, 256)
VAE_STAGE_DEPTHS = (4, 6, 4, 2)
VAE_STAGE_KERNELS = ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5))
VAE_UPSAMPLE_STRIDES = ((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 2, 2))
VAE_STAGE5 = (128, 8, (3, 7, 7))  # channels, blocks, kernel
VAE_PATCH, VAE_STEPS, VAE_TRAILING_PAD = 4, 2, 2


@dataclass(frozen=True)
class NAStage:
    """One DiffVAE stage's neighborhood attention: (T, H, W), heads, kernel, calls per decode."""

    name: str
    thw: tuple[int, int, int]
    heads: int
    kernel: tuple[int, int, int]
    calls: int

    @property
    def tokens(self) -> int:
        return self.thw[0] * self.thw[1] * self.thw[2]


def shape_problems(width: int | None = None, height: int | None = None, frames: int | None = None,
                   batch: int | None = None, bounded: bool = True) -> list[str]:
    """What is wrong with the parts of a run given (None: not checked), resolution, frames, batch;
    `bounded=False` leaves out ltx-tui's upper bounds (a shape LTX-2's own command line chose)."""
    problems = []
    top_side, top_frames, top_batch = (MAX_SIDE, MAX_FRAMES, MAX_BATCH) if bounded else (float("inf"),) * 3
    if width is not None and height is not None and not all(
            SPACE_SCALE <= side <= top_side and side % SPACE_SCALE == 0 for side in (width, height)):
        near = "x".join(str(min(MAX_SIDE, max(SPACE_SCALE, round(side / SPACE_SCALE) * SPACE_SCALE)))
                        for side in (width, height))
        problems.append(f"resolution {width}x{height}: width and height must be multiples of {SPACE_SCALE} from "
                        f"{SPACE_SCALE} to {MAX_SIDE} (LTX-2's VAE compresses space by {SPACE_SCALE}) — use {near}")
    if frames is not None and not (1 <= frames <= top_frames and (frames - 1) % TIME_SCALE == 0):
        below = frames - (frames - 1) % TIME_SCALE
        fix = (f"at most {MAX_FRAMES}" if frames > MAX_FRAMES else "at least 1" if frames < 1 else
               f"{below} or {below + TIME_SCALE}")
        problems.append(f"frames {frames}: must be 8k+1 from 1 to {MAX_FRAMES} (1, 9, 17, ..., 121, ..., {MAX_FRAMES}; "
                        f"LTX-2's VAE compresses time by {TIME_SCALE} after the first frame) — use {fix}")
    if batch is not None and not 1 <= batch <= top_batch:
        problems.append(f"batch {batch}: must be from 1 to {MAX_BATCH} (memory.max_batch_size's range) — use "
                        + (f"at most {MAX_BATCH}" if batch > 1 else "at least 1"))
    return problems


@dataclass(frozen=True)
class RunShapes:
    """The shapes of one LTX-2 run at `width` x `height`, `frames` frames, batch `batch`;
    `bounded=False`: a shape LTX-2's own command line chose (`ltx-tui run`), beyond ltx-tui's bounds."""

    width: int
    height: int
    frames: int
    batch: int = 1
    bounded: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if problems := shape_problems(self.width, self.height, self.frames, self.batch, self.bounded):
            raise ValueError("; ".join(problems))

    @property
    def label(self) -> str:
        return f"{self.width}x{self.height}x{self.frames}" + (f" batch {self.batch}" if self.batch > 1 else "")

    @property
    def latent(self) -> tuple[int, int, int]:
        """Latent frames, height, width."""
        return (self.frames - 1) // TIME_SCALE + 1, self.height // SPACE_SCALE, self.width // SPACE_SCALE

    @property
    def dit_tokens(self) -> int:
        """Video tokens of the DiT per sample (patch size 1)."""
        f, h, w = self.latent
        return f * h * w

    @property
    def dit_width(self) -> int:
        return DIT_HEADS * DIT_HEAD_DIM

    def na_stages(self) -> tuple[NAStage, ...]:
        """The DiffVAE decoder's NA calls when it decodes the whole latent at once (no tiling)."""
        f, h, w = self.latent
        t = f + VAE_TRAILING_PAD
        stages = []
        for i, (channels, depth, kernel) in enumerate(zip(VAE_STAGE_CHANNELS, VAE_STAGE_DEPTHS, VAE_STAGE_KERNELS)):
            stages.append(NAStage(f"stage {i + 1}", (t, h, w), channels // VAE_HEAD_DIM, kernel, depth))
            st, sh, sw = VAE_UPSAMPLE_STRIDES[i]
            t, h, w = t * st - (st - 1), h * sh, w * sw
        channels, blocks, kernel = VAE_STAGE5
        stages.append(NAStage("stage 5", (self.frames, self.height // VAE_PATCH, self.width // VAE_PATCH),
                              channels // VAE_HEAD_DIM, kernel, blocks * VAE_STEPS))
        return tuple(stages)

    def to_dict(self) -> dict:
        return {"resolution": f"{self.width}x{self.height}", "frames": self.frames, "batch": self.batch,
                "latent": list(self.latent), "dit": {"tokens": self.dit_tokens, "heads": DIT_HEADS,
                                                    "head_dim": DIT_HEAD_DIM, "layers": DIT_LAYERS,
                                                    "text_tokens": TEXT_TOKENS},
                "diffvae": [{"stage": s.name, "thw": list(s.thw), "heads": s.heads, "head_dim": VAE_HEAD_DIM,
                             "kernel": list(s.kernel), "calls": s.calls} for s in self.na_stages()]}


# The run ltx-tui plans for until told otherwise: LTX-2's distilled defaults (--width 768
# --height 512 --num-frames 121) in ltx-pipelines v1.2.0.
DEFAULT_RUN = RunShapes(768, 512, 121)


def parse_resolution(text: str) -> tuple[int, int]:
    """'768x512' -> (768, 512); ValueError saying what is expected."""
    parts = text.lower().replace(" ", "").split("x")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):  # ASCII digits only
        raise ValueError(f"resolution {text!r}: expected WIDTHxHEIGHT, e.g. 768x512")
    return int(parts[0]), int(parts[1])
