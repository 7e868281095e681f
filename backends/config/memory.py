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

Block parameter formulas (d = 4096 video width, a = 2048 audio width; weights + biases + the
q/k RMS norms; `ltx_core/model/transformer/transformer.py` and `attention.py`): video self- and
cross-attention 4d^2 + 6d each; feed-forward (4x) 8d^2 + 5d; audio self- and cross-attention
4a^2 + 6a each; audio feed-forward 8a^2 + 5a; audio-to-video attention (q from video, k/v
audio, out to video) 2da + 2a^2 + (3a + d) + 2a; video-to-audio 2a^2 + 2da + 4a + 2a; AdaLN
tables 6d + 6a + 5a + 5d. Total 386,074,624 per block, as LTX-2's own LTXModel counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from backends.config import ltx2_shapes as S
from backends.config.ltx2_shapes import RunShapes
from backends.config.plan import Plan, resolve
from backends.config.values import value

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


@dataclass(frozen=True)
class MemoryPlan:
    shapes: RunShapes
    stages: tuple[StagePeak, ...]
    free_bytes: int | None
    fixes: tuple[tuple[str, int], ...] = field(default=())

    @property
    def peak(self) -> StagePeak:
        return max(self.stages, key=lambda s: s.peak_bytes)

    @property
    def fits(self) -> bool | None:
        return None if self.free_bytes is None else self.peak.peak_bytes <= self.free_bytes

    def verdict(self) -> str:
        peak = self.peak
        if self.free_bytes is None:
            return f"peak {peak.peak_bytes / GIB:.1f} GiB in {peak.stage} (free GPU memory unknown)"
        spare = self.free_bytes - peak.peak_bytes
        if spare >= 0:
            return f"fits with {spare / GIB:.1f} GiB to spare (peak {peak.stage}, {peak.peak_bytes / GIB:.1f} GiB)"
        return f"does not fit: {peak.stage} needs {-spare / GIB:.1f} GiB more ({peak.peak_bytes / GIB:.1f} GiB)"

    def to_dict(self) -> dict:
        return {"stages": [{"stage": s.stage, "peak_bytes": s.peak_bytes, "detail": s.detail} for s in self.stages],
                "peak_bytes": self.peak.peak_bytes, "peak_stage": self.peak.stage, "free_bytes": self.free_bytes,
                "fits": self.fits, "verdict": self.verdict(),
                "fixes": [{"change": c, "peak_bytes": b} for c, b in self.fixes]}


def _text_encoder() -> StagePeak:
    params = gemma_params()
    act = S.TEXT_TOKENS * GEMMA["hidden"] * BF16 * 16
    return StagePeak("text encoder", params * BF16 + act,
                     f"Gemma 3 12B language model {params / 1e9:.2f} B params bf16 + activations of "
                     f"{S.TEXT_TOKENS} tokens")


@dataclass(frozen=True)
class Effective:
    """What the memory plan counts: the values a plan runs, not those its profile asks for (a
    multi-GPU plan runs fp8-cast whatever the profile says; offload drops CUDA graphs)."""

    quantization: str = "none"
    offload: str = "none"
    gpu_slots: int = 2
    cuda_graphs: bool = False
    decode: str = "chunked_eager"

    @classmethod
    def of(cls, plan: Plan) -> Effective:
        def eff(key: str):  # an option the plan cannot run counts as asked (the plan says it is an error)
            d = plan[key]
            return d.effective if d.effective is not None else d.requested
        compile_step = plan.step("compile")
        return cls(eff("transformer.quantization"), eff("offload.mode"), plan.profile.offload.gpu_slots,
                   bool(compile_step and compile_step.args["cudagraphs"]), eff("diffvae.mode"))


def dit_weight_bytes(e: Effective) -> int:
    """The DiT's weights on the GPU (quantization; with offload only the resident blocks)."""
    total, linears = block_params()
    per_linear = value("transformer.quantization", e.quantization).weight_bytes
    block_bytes = int(linears * per_linear + (total - linears) * BF16)
    resident = min(e.gpu_slots, S.DIT_LAYERS) if e.offload != "none" else S.DIT_LAYERS
    return resident * block_bytes + DIT_OUTSIDE_BLOCKS * BF16


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
    return StagePeak("DiT denoising", weights + act,
                     f"weights {weights / GIB:.1f} GiB ({e.quantization}; {where}) + activations {act / GIB:.1f} GiB "
                     f"({tokens} tokens x {shapes.dit_width}{', x2 for the CUDA-graph pool' if e.cuda_graphs else ''})")


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


def _stages(e: Effective, shapes: RunShapes, tiles: int = 1) -> tuple[StagePeak, ...]:
    return _text_encoder(), _dit(e, shapes), _upsampler(shapes), _decode(e, shapes, tiles)


# fixes: what to change in the profile -> (changed options, other shapes, decode tiles); each is
# planned again, so a fix the plan would not run (or already runs) lowers nothing and is not offered
FIXES = (
    ("transformer.quantization = fp8-cast", lambda s: ({"transformer.quantization": "fp8-cast"}, s, 1)),
    ("offload.mode = cpu (gpu_slots 2)", lambda s: ({"offload.mode": "cpu", "offload.gpu_slots": 2}, s, 1)),
    ("diffvae.mode = chunked_eager", lambda s: ({"diffvae.mode": "chunked_eager"}, s, 1)),
    ("tiled decode, 2x2 spatial tiles (LTX-2's decode tiling)", lambda s: ({}, s, 4)),
    ("batch 1", lambda s: ({}, replace(s, batch=1), 1)),
)


def plan_memory(plan: Plan, shapes: RunShapes, free_bytes: int | None) -> MemoryPlan:
    """The per-stage peaks of what `plan` runs at `shapes`, and the fixes that lower the peak, best first."""
    stages = _stages(Effective.of(plan), shapes)
    peak = max(s.peak_bytes for s in stages)
    fixes = []
    for change, fix in FIXES:
        values, s, tiles = fix(shapes)
        new = _peak(plan, values, s, tiles)
        if new < peak:
            fixes.append((change, new))
    fixes.sort(key=lambda f: f[1])
    if free_bytes is not None and peak > free_bytes and fixes and fixes[0][1] > free_bytes:
        fixes.insert(0, _combined(plan, shapes, free_bytes))
    return MemoryPlan(shapes, stages, free_bytes, tuple(fixes))


def _peak(plan: Plan, values: dict, shapes: RunShapes, tiles: int) -> int:
    """The peak with `values` changed in the profile, planned again on the same machine."""
    changed = resolve(plan.profile.replace(**values), plan.capability, plan.tuned) if values else plan
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
