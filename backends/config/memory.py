"""Will it fit? A per-stage GPU memory plan of an LTX-2 v1.2.0 run, before anything runs (pure data).

Stages run one after another (LTX-2's pipelines load each model for its stage), so each stage's
peak is its resident weights plus its own working set; the run's peak is the largest.

- text encoder: Gemma 3 12B's language model in bf16 (hidden 3840, 48 layers, MLP 15360, 16
  query heads and 8 KV heads of 256, vocabulary 262144: the public gemma-3-12b config that
  ltx-core's `encoder_configurator.py` reads `hidden_size`/`num_hidden_layers` from), plus
  its activations over 1024 tokens (small). Not yet measured on a GPU.
- DiT: weights by quantization and offload: the 48 blocks of 386,074,624 parameters (385,875,968
  of them in the block linears fp8-cast/int8 store in one byte; formulas below) and 300,015,872
  outside the blocks (patchify, AdaLN, caption projections, output; counted from
  `LTXModel()` on the meta device); with offload only `gpu_slots` blocks are resident. Working
  set: tokens x width x 2 bytes x DIT_ACT (the hidden state, q/k/v, the attention output, the
  4x feed-forward of one block, the audio stream); CUDA-graph compile modes keep a second copy in
  the graph pool. DIT_ACT = 28 is fitted to the H200 (bench/memory.py: LTX-2's full LTXModel at
  6144, 9216 and 24576 tokens kept 1.35, 1.99 and 5.22 GiB over its weights, 225-236 KB a token,
  the same with fp8-cast weights).
- DiffVAE decode: LTX-2's own heuristic (`diffusion_tiling.py`): the stage-4 input feature +
  an RGB accumulator of 2 x frames + stage-5 tokens x 128 channels x 2 bytes x a coefficient by
  mode, plus the decoder's 104.8 M bf16 weights. The coefficients are fitted to this project's
  H200 measurements of LTX-2's real decoder at 768x512x121 and predict 1536x1024x121 within
  3% (bench/RESULTS.md): chunked_eager 5.04 (LTX-2 uses 5), chunked_compile the same (ltx-tui's
  compiled slabs keep LTX-2's chunked working set: 4.31 and 17.24 GiB measured for both),
  combined_compile 9.28 (LTX-2 uses 11 for its natten path); blackwell_dsl LTX-2's 2.5.
  Tiled decode (a fix): the stage-5 tokens of one of N spatial tiles, x1.15 for the overlap
  (an estimate); the stage-4 feature and the accumulator stay full size, as in LTX-2's tiling.
- latent upsampler (the two-stage pipelines run LTX-2's `LatentUpsampler` between their DiT
  passes; LTX-2's `VideoUpsampler` block builds the video encoder beside it, for the latent
  statistics: VIDEO_ENCODER_PARAMS, the encoder of the public LTX-2 VAE config, which ltx-core
  v1.2.0 does not ship: 694,098,881 parameters, bf16; with it the stage's prediction met the
  H200's 1.63 GiB, bench/RESULTS.md): the upsampler's default config (128 latent channels, 512 mid, 4 ResBlocks before and after a
  2x spatial Conv2d + pixel shuffle; `ltx_core/model/upsampler/model.py`) has
  in*mid*27 + mid + 2 mid (first conv3d, GroupNorm) + 8 x (2 (mid^2*27 + mid) + 4 mid) +
  mid*4mid*9 + 4 mid + mid*in*27 + in = 126,250,624 parameters (LatentUpsampler() counts the
  same); working set UPSAMPLER_ACT x the output latent's tokens x mid x 2 bytes (the input,
  conv and norm outputs and the residual of a ResBlock; an estimate, not measured yet). Far
  below the other stages: shown so the plan covers every model the pipeline loads.

Multi-GPU (parallel.gpus = N > 1; LTX-2 v1.2.0's distilled_mgpu, one rank per GPU): a plan per rank,
the run's peak is the peak rank's. What each rank holds, from LTX-2's sources:
- The DiT: a full replica on every rank (sequence parallelism is a latency tool, not a memory tool:
  ltx-pipelines' docs/multigpu/README.md and pipeline-setup.md), fp8-cast (the *_mgpu command lines
  build it so), plus a ~1/N clone of its clean weights (`TransformerWeightTracker` in
  multigpu/weight_tracker.py clones the rank's `md5(key) % N` shard of the state dict; the runners
  do not pass `no_lora_swap`), plus the all2all IPC buffers: ceil(sp_max_tokens / N) tokens x 4096 x
  2 bytes each, four of them (q, k, v and the gathered heads: `AttentionManager` in
  ltx_core/multigpu/transformer/attention.py; the buffer in ltx-kernels' csrc/all2all/all2all.cpp).
  Its activations split by the world size: the video tokens padded to a multiple of N, N-th each
  (`pad_modality_for_uniform_sharding` / `tile_modality_for_rank` in
  ltx_core/multigpu/transformer/sequence_parallel.py; after the all2all a rank holds every token
  for 1/N of the heads, the same bytes); the audio stream is not split (counted in DIT_ACT).
- Gemma: loaded once, by rank 0's process, with Accelerate's `device_map="auto"`, which spreads its
  layers over the GPUs with balanced memory (`AccelerateGemmaBuilder` in
  ltx_pipelines/multigpu/gemma_builders.py, `load_gemma_with_device_map` in
  ltx_core/multigpu/gemma/loader.py; the other ranks get a broadcast stub): ~1/N of its weights on
  each GPU, its activations counted on each (they pass through every GPU's layers).
  `BatchParallelGemmaBuilder` (bp_gemma_builder.py, a full Gemma replica per rank) is not used by the
  shipped *_mgpu modules.
- Weights stay: the runners hand every block a `ModelRegistry()` that caches state dicts
  (ltx_core/loader/registry.py, `cache_weights=True` by default; the tracker keeps the DiT's
  registry tensors on the GPU), so each rank's share of every model it loaded stays on its GPU for
  the rest of the run: the DiT stage holds Gemma's share, the upsampler stage the DiT too, the
  decode stage all of them.
- The decoder: distributed over H x W tiles, one per rank (`balanced_tile_split(N)` height x width
  tiles with an overlap of 4 latent pixels in distilled_mgpu.py; tile i to rank i % N, in
  ltx_core/multigpu/vae/distributed_decoder.py), so a rank's decode working set is its tile's share
  of the frame (`split_by_count` in ltx_core/tiling.py sizes the tiles); the driver rank 0 then
  blends the tiles into frames spread over the GPUs (not counted).
Not measured on GPUs: the per-rank plan is these facts applied to the single-GPU model's numbers.

Block parameter formulas (d = 4096 video width, a = 2048 audio width; weights + biases + the
q/k RMS norms; `ltx_core/model/transformer/transformer.py` and `attention.py`): video self- and
cross-attention 4d^2 + 6d each; feed-forward (4x) 8d^2 + 5d; audio self- and cross-attention
4a^2 + 6a each; audio feed-forward 8a^2 + 5a; audio-to-video attention (q from video, k/v
audio, out to video) 2da + 2a^2 + (3a + d) + 2a; video-to-audio 2a^2 + 2da + 4a + 2a; AdaLN
tables 6d + 6a + 5a + 5d. Total 386,074,624 per block, as LTX-2's own LTXModel counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from backends.config import ltx2_shapes as S
from backends.config.ltx2_shapes import RunShapes
from backends.config.plan import Plan, resolve
from backends.config.rules import Status, sp_token_cap, sp_tokens
from backends.config.values import RUNTIME, value

GIB = 1 << 30
BF16 = 2
AUDIO_WIDTH = 2048
DIT_OUTSIDE_BLOCKS = 300_015_872
DIT_ACT = 28  # working set of one block, in units of tokens x width x 2 bytes (fitted on the H200)
VAE_PARAMS = 104_800_000
GEMMA = {"hidden": 3840, "layers": 48, "mlp": 15360, "q_heads": 16, "kv_heads": 8, "head_dim": 256, "vocab": 262144}
TILE_HALO = 1.15  # a tile's stage-5 tokens with its overlap, per tile's share (estimate)
UPSAMPLER = {"in": 128, "mid": 512, "blocks": 4}  # LatentUpsampler's defaults
UPSAMPLER_ACT = 6  # working set in units of latent tokens x mid x 2 bytes (estimate)
VIDEO_ENCODER_PARAMS = 694_098_881  # built beside the upsampler (the public LTX-2 VAE's encoder; an estimate)
SP_BUFFERS = 4  # all2all instances per rank: q, k, v and the gathered heads (AttentionManager)
MGPU_DECODE_OVERLAP = 4  # latent pixels shared by neighbouring decoder tiles (distilled_mgpu.py)


def block_params() -> tuple[int, int]:
    """(all parameters of one LTX-2 transformer block, those in its block linears)."""
    d, a = S.DIT_HEADS * S.DIT_HEAD_DIM, AUDIO_WIDTH
    attn, ff = 4 * d * d + 6 * d, 8 * d * d + 5 * d
    audio_attn, audio_ff = 4 * a * a + 6 * a, 8 * a * a + 5 * a
    a2v = 2 * d * a + 2 * a * a + (3 * a + d) + 2 * a  # q from video, k/v from audio, out to video
    v2a = 2 * a * a + 2 * d * a + 4 * a + 2 * a
    tables = 6 * d + 6 * a + 5 * a + 5 * d
    total = 2 * attn + ff + 2 * audio_attn + audio_ff + a2v + v2a + tables
    biases_norms = 2 * 6 * d + 5 * d + 2 * 6 * a + 5 * a + (3 * a + d) + 2 * a + 4 * a + 2 * a
    return total, total - tables - biases_norms


def upsampler_params() -> int:
    """Parameters of LTX-2's LatentUpsampler in its default config (3D convs, 2x spatial)."""
    c, m = UPSAMPLER["in"], UPSAMPLER["mid"]
    res_block = 2 * (m * m * 27 + m) + 4 * m
    return (c * m * 27 + m + 2 * m) + 2 * UPSAMPLER["blocks"] * res_block + (m * 4 * m * 9 + 4 * m) + (m * c * 27 + c)


def gemma_params() -> int:
    g = GEMMA
    attn = g["hidden"] * g["head_dim"] * (2 * g["q_heads"] + 2 * g["kv_heads"])
    return g["vocab"] * g["hidden"] + g["layers"] * (attn + 3 * g["hidden"] * g["mlp"])


@dataclass(frozen=True)
class StagePeak:
    stage: str
    peak_bytes: int
    detail: str
    running_bytes: int | None = None  # the peak once the stage's model is built, where building it peaks higher


@dataclass(frozen=True)
class RankPlan:
    """One rank's stages in a multi-GPU run (rank r runs on the r-th GPU the run uses)."""

    rank: int
    device: int
    stages: tuple[StagePeak, ...]

    @property
    def peak(self) -> StagePeak:
        return max(self.stages, key=lambda s: s.peak_bytes)

    def to_dict(self) -> dict:
        return {"rank": self.rank, "device": self.device, "peak_bytes": self.peak.peak_bytes,
                "peak_stage": self.peak.stage,
                "stages": [{"stage": s.stage, "peak_bytes": s.peak_bytes, "detail": s.detail} for s in self.stages]}


@dataclass(frozen=True)
class MemoryPlan:
    """The stages of a run (of its peak rank, for several GPUs: `ranks` holds each rank's); the
    free memory is that of one GPU (the least free of those the run uses)."""

    shapes: RunShapes
    stages: tuple[StagePeak, ...]
    free_bytes: int | None
    fixes: tuple[tuple[str, int], ...] = field(default=())
    ranks: tuple[RankPlan, ...] = field(default=())
    no_gpu: bool = False  # the capability has no GPU: nothing to fit on here

    @property
    def world_size(self) -> int:
        return max(1, len(self.ranks))

    @property
    def peak_rank(self) -> RankPlan | None:
        return _fullest(self.ranks) if self.ranks else None

    @property
    def peak(self) -> StagePeak:
        return max(self.stages, key=lambda s: s.peak_bytes)

    @property
    def fits(self) -> bool | None:
        return None if self.free_bytes is None else self.peak.peak_bytes <= self.free_bytes

    def verdict(self) -> str:
        peak = self.peak
        if self.free_bytes is None:
            why = "no GPU here to fit it on" if self.no_gpu else "free GPU memory unknown"
            return f"peak {peak.peak_bytes / GIB:.1f} GiB in {peak.stage} ({why})"
        spare = self.free_bytes - peak.peak_bytes
        where = f"rank {self.peak_rank.rank}'s {peak.stage}" if self.ranks else peak.stage
        if spare >= 0:
            return f"fits with {spare / GIB:.1f} GiB to spare (peak {where}, {peak.peak_bytes / GIB:.1f} GiB)"
        return f"does not fit: {where} needs {-spare / GIB:.1f} GiB more ({peak.peak_bytes / GIB:.1f} GiB)"

    def to_dict(self) -> dict:
        return {"stages": [{"stage": s.stage, "peak_bytes": s.peak_bytes, "detail": s.detail} for s in self.stages],
                "peak_bytes": self.peak.peak_bytes, "peak_stage": self.peak.stage, "free_bytes": self.free_bytes,
                "fits": self.fits, "verdict": self.verdict(),
                "fixes": [{"change": c, "peak_bytes": b} for c, b in self.fixes],
                "world_size": self.world_size, "peak_rank": self.peak_rank.rank if self.ranks else None,
                "ranks": [r.to_dict() for r in self.ranks]}


def _text_encoder() -> StagePeak:
    params = gemma_params()
    act = S.TEXT_TOKENS * GEMMA["hidden"] * BF16 * 16
    return StagePeak("text encoder", params * BF16 + act,
                     f"Gemma 3 12B language model {params / 1e9:.2f} B params bf16 + activations of "
                     f"{S.TEXT_TOKENS} tokens")


@dataclass(frozen=True)
class Effective:
    """What the memory plan counts: the values a plan runs, not those its profile asks for
    (offload drops CUDA graphs); an option the plan refuses (an error) is counted as asked."""

    quantization: str = "none"
    offload: str = "none"
    gpu_slots: int = 2
    cuda_graphs: bool = False
    decode: str = "chunked_eager"
    gpus: int = 1  # ranks of a multi-GPU run (parallel.gpus)
    devices: tuple[int, ...] = (0,)  # the CUDA ordinal of each rank

    @classmethod
    def of(cls, plan: Plan) -> Effective:
        def eff(key: str):  # an option the plan cannot run counts as asked (the plan says it is an error)
            d = plan[key]
            return d.effective if d.effective is not None else d.requested
        compile_step = plan.step("compile")
        par = plan.profile.parallel
        return cls(eff("transformer.quantization"), eff("offload.mode"), plan.profile.offload.gpu_slots,
                   bool(compile_step and compile_step.args["cudagraphs"]) or plan.step("capture") is not None,
                   eff("diffvae.mode"), par.gpus,
                   par.ordinals)


def dit_weight_bytes(e: Effective) -> int:
    """The DiT's weights on the GPU (quantization; with offload only the resident blocks)."""
    total, linears = block_params()
    per_linear = value("transformer.quantization", e.quantization).weight_bytes
    block_bytes = int(linears * per_linear + (total - linears) * BF16)
    resident = min(e.gpu_slots, S.DIT_LAYERS) if e.offload != "none" else S.DIT_LAYERS
    return resident * block_bytes + DIT_OUTSIDE_BLOCKS * BF16


def dit_build_bytes(e: Effective) -> int | None:
    """The DiT's weights as LTX-2's builder leaves them on the GPU under `ltx-tui run`, before
    ltx-tui's runtime quantizes its linears (bf16), where that is more than the quantized weights;
    None where the builder's weights are what runs (no runtime quantization, loader quantization,
    offload). `apply_profile` on a model built elsewhere quantizes before it places the model."""
    about = value("transformer.quantization", e.quantization)
    if e.offload != "none" or about.step != "quantize" or about.runner != RUNTIME or e.gpus > 1:
        return None
    built = dit_weight_bytes(replace(e, quantization="none"))
    return built if built > dit_weight_bytes(e) else None


def _dit(e: Effective, shapes: RunShapes) -> StagePeak:
    offload = e.offload != "none"
    resident = min(e.gpu_slots, S.DIT_LAYERS) if offload else S.DIT_LAYERS
    weights = dit_weight_bytes(e)
    tokens = shapes.batch * shapes.dit_tokens
    act = tokens * shapes.dit_width * BF16 * DIT_ACT
    if e.cuda_graphs:
        act *= 2
    where = f"{resident} of {S.DIT_LAYERS} blocks resident ({e.offload} offload)" if offload \
        else f"{S.DIT_LAYERS} blocks resident"
    running = f"weights {weights / GIB:.1f} GiB ({e.quantization}; {where}) + activations {act / GIB:.1f} GiB " \
        f"({tokens} tokens x {shapes.dit_width}{', x2 for the CUDA-graph pool' if e.cuda_graphs else ''})"
    build = dit_build_bytes(e)
    if build is not None and build > weights + act:
        return StagePeak("DiT denoising", build,
                         f"while built: LTX-2's builder puts the bf16 weights on the GPU ({build / GIB:.1f} GiB) before "
                         f"ltx-tui's runtime quantizes them; then {running}", weights + act)
    return StagePeak("DiT denoising", weights + act, running)


def _decode(e: Effective, shapes: RunShapes, tiles: int = 1) -> StagePeak:
    mode = e.decode
    coef = value("diffvae.mode", mode).decode_coef
    stages = {s.name: s for s in shapes.na_stages()}
    stage4, stage5 = stages["stage 4"], stages["stage 5"]
    feature = stage4.tokens * S.VAE_STAGE_CHANNELS[3] * BF16 * shapes.batch
    accumulator = shapes.height * shapes.width * 2 * shapes.frames * 3 * BF16 * shapes.batch
    tokens = stage5.tokens * shapes.batch * (1 if tiles == 1 else TILE_HALO / tiles)
    work = int(tokens * S.VAE_STAGE5[0] * BF16 * coef)
    weights = VAE_PARAMS * BF16
    tiled = f" in {tiles} spatial tiles" if tiles > 1 else ""
    return StagePeak("DiffVAE decode", weights + feature + accumulator + work,
                     f"{mode}{tiled}: stage-5 {int(tokens)} tokens x {S.VAE_STAGE5[0]} ch x coef "
                     f"{coef:g} ({work / GIB:.1f} GiB) + stage-4 feature {feature / GIB:.2f} GiB + "
                     f"accumulator {accumulator / GIB:.2f} GiB + weights {weights / GIB:.2f} GiB")


def _upsampler(shapes: RunShapes) -> StagePeak:
    weights = upsampler_params() * BF16
    encoder = VIDEO_ENCODER_PARAMS * BF16
    tokens = shapes.batch * shapes.dit_tokens
    act = tokens * UPSAMPLER["mid"] * BF16 * UPSAMPLER_ACT
    return StagePeak("latent upsampler", weights + encoder + act,
                     f"two-stage pipelines: {upsampler_params() / 1e6:.1f} M params bf16 + the video encoder "
                     f"{encoder / GIB:.2f} GiB + {tokens} latent tokens x {UPSAMPLER['mid']} ch x {UPSAMPLER_ACT} "
                     f"({act / GIB:.2f} GiB, estimate)")


def _fullest(ranks: tuple[RankPlan, ...]) -> RankPlan:
    """The rank whose peak is highest (every rank holds a full DiT: the fullest GPU decides)."""
    return max(ranks, key=lambda r: r.peak.peak_bytes)


def _stages(e: Effective, shapes: RunShapes, tiles: int = 1) -> tuple[StagePeak, ...]:
    if e.gpus > 1:
        return _fullest(_ranks(e, shapes, tiles)).stages
    return _text_encoder(), _dit(e, shapes), _upsampler(shapes), _decode(e, shapes, tiles)


# --- multi-GPU: one plan per rank ---------------------------------------------------------------

def balanced_split(n: int) -> tuple[int, int]:
    """`n` as (small, large) factors, as square as can be (small: the largest divisor of n not
    above its square root): LTX-2's height x width tile grid for n ranks."""
    small = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return small, n // small


def tile_extents(size: int, tiles: int, overlap: int) -> tuple[int, ...] | None:
    """The extent of each of `tiles` overlapping tiles over `size` (LTX-2's split by count: tiles of
    (size + overlap x (tiles - 1)) // tiles, the first remainder of them one longer, the last one
    reaching the end); None where LTX-2 refuses the split (too small a dimension)."""
    if tiles == 1:
        return (size,)
    total = size + overlap * (tiles - 1)
    tile, extra = total // tiles, total % tiles
    if tiles > size or tile <= overlap:
        return None
    span = size - extra  # laid out with equal tiles, then the first `extra` grow by one
    step = tile - overlap
    count = (span + tile - 2 * overlap - 1) // step
    starts = [i * step for i in range(count)]
    ends = [s + tile for s in starts[:-1]] + [span]
    out = [(e + min(i, extra) + (1 if i < extra else 0)) - (s + min(i, extra)) for i, (s, e) in enumerate(zip(starts, ends))]
    return tuple(out)


def _rank_tile(shapes: RunShapes, gpus: int, rank: int) -> tuple[float, str]:
    """(the share of the frame rank `rank` decodes, in words)."""
    _, h, w = shapes.latent
    rows, cols = balanced_split(gpus)
    hs, ws = tile_extents(h, rows, MGPU_DECODE_OVERLAP), tile_extents(w, cols, MGPU_DECODE_OVERLAP)
    if hs is None or ws is None or len(hs) * len(ws) != gpus:
        return 1.0, f"the whole frame (LTX-2 cannot split a {h}x{w} latent into {rows}x{cols} tiles)"
    th, tw = hs[rank // cols], ws[rank % cols]
    return th * tw / (h * w), f"tile {rank} of {rows}x{cols}: {th}x{tw} of the {h}x{w} latent"


def _sp_buffers(gpus: int, width: int) -> int:
    return SP_BUFFERS * (sp_token_cap(gpus) // gpus) * width * BF16


def _ranks(e: Effective, shapes: RunShapes, tiles: int = 1) -> tuple[RankPlan, ...]:
    """Each rank's stages in a run over `e.gpus` GPUs (see the module's docstring for the facts)."""
    n = e.gpus
    gemma = -(-gemma_params() * BF16 // n)
    text = _text_encoder()
    text_act = text.peak_bytes - gemma_params() * BF16
    dit_weights = dit_weight_bytes(e)
    clean = -(-dit_weights // n)
    buffers = _sp_buffers(n, shapes.dit_width)
    carried = sp_tokens(shapes, n)  # the batch's tokens, padded to a multiple of n
    act = carried // n * shapes.dit_width * BF16 * DIT_ACT * (2 if e.cuda_graphs else 1)
    dit_resident = dit_weights + clean + buffers
    up = _upsampler(shapes)
    up_weights = upsampler_params() * BF16 + VIDEO_ENCODER_PARAMS * BF16
    one, vae_weights = _decode(e, shapes, tiles), VAE_PARAMS * BF16  # the decode as on one GPU
    ranks = []
    for rank in range(n):
        share, where = _rank_tile(shapes, n, rank)
        decode = vae_weights + int((one.peak_bytes - vae_weights) * share)
        stages = (
            StagePeak("text encoder", gemma + text_act,
                      f"Gemma 3 12B spread over the {n} GPUs by rank 0 (Accelerate device_map=auto): "
                      f"{gemma / GIB:.1f} GiB of its weights here + activations of {S.TEXT_TOKENS} tokens"),
            StagePeak("DiT denoising", gemma + dit_resident + act,
                      f"full DiT replica {dit_weights / GIB:.1f} GiB ({e.quantization}) + 1/{n} clean-weights clone "
                      f"{clean / GIB:.1f} GiB + all2all buffers {buffers / GIB:.2f} GiB + activations "
                      f"{act / GIB:.1f} GiB ({carried // n} of {carried} tokens) + "
                      f"Gemma's share {gemma / GIB:.1f} GiB (kept)"),
            StagePeak("latent upsampler", gemma + dit_resident + up.peak_bytes,
                      f"{up.peak_bytes / GIB:.2f} GiB as on one GPU + the kept DiT, clone, buffers and Gemma share "
                      f"{(gemma + dit_resident) / GIB:.1f} GiB"),
            StagePeak("DiffVAE decode", gemma + dit_resident + up_weights + decode,
                      f"{e.decode}, {where}: {decode / GIB:.2f} GiB + the kept models "
                      f"{(gemma + dit_resident + up_weights) / GIB:.1f} GiB"),
        )
        ranks.append(RankPlan(rank, e.devices[rank] if rank < len(e.devices) else rank, stages))
    return tuple(ranks)


# fixes: what to change in the profile -> (changed options, other shapes, decode tiles); each is
# planned again, so a fix the plan would not run (or already runs) lowers nothing and is not offered
FIXES = (
    ("transformer.quantization = fp8-cast", lambda s: ({"transformer.quantization": "fp8-cast"}, s, 1)),
    ("offload.mode = cpu (gpu_slots 2)", lambda s: ({"offload.mode": "cpu", "offload.gpu_slots": 2}, s, 1)),
    ("diffvae.mode = chunked_eager", lambda s: ({"diffvae.mode": "chunked_eager"}, s, 1)),
    ("tiled decode, 2x2 spatial tiles (LTX-2's decode tiling)", lambda s: ({}, s, 4)),
    ("batch 1", lambda s: ({}, replace(s, batch=1), 1)),
)


MIN_LOWER = GIB // 10  # a fix that lowers the peak by less is not offered: it would print the same peak


def plan_memory(plan: Plan, shapes: RunShapes, free_bytes: int | None) -> MemoryPlan:
    """The per-stage peaks of what `plan` runs at `shapes` (per rank with several GPUs: `stages` are
    the peak rank's), and the fixes that lower the peak, best first."""
    e = Effective.of(plan)
    ranks = _ranks(e, shapes) if e.gpus > 1 else ()
    stages = _fullest(ranks).stages if ranks else _stages(e, shapes)
    peak = max(s.peak_bytes for s in stages)
    fixes = []
    for change, fix in FIXES:
        values, s, tiles = fix(shapes)
        new = _peak(plan, values, s, tiles)
        if new <= peak - MIN_LOWER:
            fixes.append((change, new))
    fixes.sort(key=lambda f: f[1])
    if free_bytes is not None and peak > free_bytes and fixes and fixes[0][1] > free_bytes:
        fixes.insert(0, _combined(plan, shapes, free_bytes))
    return MemoryPlan(shapes, stages, free_bytes, tuple(fixes), ranks, no_gpu=not plan.capability.gpus)


_NOT_RUN = 1 << 62  # the "peak" of a fix the plan would not run: never lower, never offered


def _peak(plan: Plan, values: dict, shapes: RunShapes, tiles: int) -> int:
    """The peak with `values` changed in the profile, planned again on the same machine (a change
    the new plan cannot run, e.g. offload on several GPUs, lowers nothing)."""
    changed = resolve(plan.profile.replace(**values), plan.capability, plan.tuned, plan.length) if values else plan
    if any(changed[k].status is Status.ERROR and plan[k].status is not Status.ERROR for k in values):
        return _NOT_RUN
    return max(x.peak_bytes for x in _stages(Effective.of(changed), shapes, tiles))


def _combined(plan: Plan, shapes: RunShapes, free_bytes: int) -> tuple[str, int]:
    """No single fix is enough: fixes applied together, each time the one that lowers the peak
    most, until the run fits (or no fix helps any more)."""
    values: dict = {}
    state, taken = (shapes, 1), []
    peak = _peak(plan, values, *state)
    while peak > free_bytes:
        best = None
        for change, fix in FIXES:
            if change in taken:
                continue
            more, s, tiles = fix(state[0])
            option = ({**values, **more}, s, max(tiles, state[1]))
            new = _peak(plan, *option)
            if new < peak and (best is None or new < best[2]):
                best = (change, option, new)
        if best is None:
            break
        taken.append(best[0])
        values, state, peak = best[1][0], best[1][1:], best[2]
    return " + ".join(taken), peak
