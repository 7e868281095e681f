"""Timing one candidate at an LTX-2 run's shapes (runs in the worker: `python -m backends.tune`).

Each option is timed where its value acts, through the runtime's own callables:
- diffvae.na_backend: `NAFunction(value)` (the LTX-2 protocol callable the runtime installs) on
  q, k, v of every DiffVAE stage (`RunShapes.na_stages`), times the stage's calls per decode
  summed: ms = the decode's NA time. Accuracy: each stage's window on a crop against the fp32
  brute-force reference.
- transformer.attention: `DenseFunction(value)` on the DiT's video self-attention (tokens x 32
  heads x 128), times 48 layers: ms = one denoising step's self-attention. Accuracy: a crop of
  the tokens against fp32 SDPA math.
- transformer.quantization: one LTX-2 block's video linears (to_q/k/v/out 4096x4096, ff 4096 ->
  16384 -> 4096) at the run's tokens, quantized by the runtime (`quantize_linears`), times 48
  layers. Accuracy: relative error against the unquantized linears.
- compile.enabled, compile.mode: two real LTX-2 video transformer blocks at full width (LTXModel,
  random weights), eager or compiled per block by `apply_profile`, forward at the run's tokens
  with 1024 text tokens. compile.enabled's ms is one DiT forward's 48 blocks (the pair's x 24),
  its first call the pair's (identical blocks share one compiled graph). Accuracy: relative
  error against the same model as built.
- diffvae.mode: LTX-2's full-size DiffusionVideoDecoder() laid out by `apply_profile`, decoding
  the run's latent. Accuracy: relative error against LTX-2's own chunked_eager decode (with its
  own fallback NA: TritonNaAttention on CUDA, EagerSdpaAttention on the CPU).
Times: CUDA: median of `triton.testing.do_bench`; CPU: median of timed calls. A compiled
candidate whose graphs ran eagerly (`runtime.compile_watch`) fails instead of being timed. For
the options whose first call compiles (compile.enabled, diffvae.mode) the first call's seconds
come too (the warm-up: compile included); `first_only` times just that call (the tune's second
process, which finds the compile cache warm).
"""

from __future__ import annotations

import statistics
import time
import types
from typing import Callable

import torch

from backends.config import ltx2_shapes as S
from backends.config import values
from backends.config.ltx2_shapes import RunShapes

CROP = 16  # the largest crop side (and x 64 the token crop) checked against a brute-force reference


SLOW_MS = 50.0  # a call this slow is timed 3 times (do_bench would spend seconds on its estimate)


def bench(fn: Callable[[], object], device: str, warm: bool = False) -> float:
    """Median milliseconds of `fn()` (after a warm-up call, unless `warm`: it has run already)."""
    if not warm:
        fn()
    if device.startswith("cuda"):
        from triton.testing import do_bench

        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            if times[0] < SLOW_MS:
                return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        return statistics.median(times)
    times: list[float] = []
    deadline = time.perf_counter() + 1.0
    while len(times) < 3 or (len(times) < 20 and time.perf_counter() < deadline):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def first_call(fn: Callable[[], object], device: str) -> tuple[float, object]:
    """(seconds of `fn()`, finished on the device: a first call, compile included; its result)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _rand(shape, device, dtype, g) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item()


def na_backend(value: str, shapes: RunShapes, device: str, dtype: torch.dtype) -> tuple[float, float]:
    from backends.runtime.attention import NAFunction
    from kernels.na3d_reference import na3d_reference

    fn = NAFunction(value)
    g = torch.Generator(device).manual_seed(0)
    total, worst = 0.0, 0.0
    with torch.inference_mode():
        for stage in shapes.na_stages():
            attn = types.SimpleNamespace(kernel_size=stage.kernel)
            shape = (shapes.batch, *stage.thw, stage.heads, S.VAE_HEAD_DIM)
            q, k, v = (_rand(shape, device, dtype, g) for _ in range(3))
            total += bench(lambda: fn(attn, q, k, v), device) * stage.calls
            crop = tuple(slice(0, max(min(n, CROP), kk)) for n, kk in zip(stage.thw, stage.kernel))
            qc, kc, vc = (t[:, crop[0], crop[1], crop[2], :2].contiguous() for t in (q, k, v))
            out = fn(attn, qc, kc, vc)
            ref = na3d_reference(*(t.float() for t in (qc, kc, vc)), stage.kernel, scale=1.0)
            worst = max(worst, (out.float() - ref).abs().max().item())
    return total, worst


def attention(value: str, shapes: RunShapes, device: str, dtype: torch.dtype) -> tuple[float, float]:
    from backends.runtime.dense_attention import FP8, FP8_MIN_TOKENS, DenseFunction

    fn = DenseFunction(value)
    g = torch.Generator(device).manual_seed(0)
    shape = (shapes.batch, shapes.dit_tokens, shapes.dit_width)
    q, k, v = (_rand(shape, device, dtype, g) * (S.DIT_HEAD_DIM ** -0.25) for _ in range(3))
    with torch.inference_mode():
        ms = bench(lambda: fn(q, k, v, S.DIT_HEADS), device) * S.DIT_LAYERS
        n = min(shapes.dit_tokens, CROP * 64 if value != FP8 else FP8_MIN_TOKENS)  # fp8 at its size
        qc, kc, vc = (t[:1, :n] for t in (q, k, v))
        out = fn(qc, kc, vc, S.DIT_HEADS)
        ref = DenseFunction("sdpa_math")(*(t.float() for t in (qc, kc, vc)), S.DIT_HEADS)
    return ms, (out.float() - ref).abs().max().item()


def _block_linears(width: int, device: str, dtype: torch.dtype) -> torch.nn.ModuleDict:
    """One LTX-2 transformer block's video linears, named as LTX-2 names them."""
    torch.manual_seed(0)
    ff = width * S.DIT_FF_MULT
    with torch.device(device):
        layers = {"attn1.to_q": (width, width), "attn1.to_k": (width, width), "attn1.to_v": (width, width),
                  "attn1.to_out.0": (width, width), "ff.net.0.proj": (width, ff), "ff.net.2": (ff, width)}
        return torch.nn.ModuleDict({n.replace(".", "_"): torch.nn.Linear(*io) for n, io in layers.items()}).to(dtype)


def quantization(value: str, shapes: RunShapes, device: str, dtype: torch.dtype) -> tuple[float, float]:
    from backends.runtime.quant import quantize_linears

    linears = _block_linears(shapes.dit_width, device, dtype)
    g = torch.Generator(device).manual_seed(0)
    inputs = {n: _rand((shapes.batch * shapes.dit_tokens, m.in_features), device, dtype, g)
              for n, m in linears.items()}
    with torch.inference_mode():
        want = {n: m(inputs[n]) for n, m in linears.items()}
        if value != "none":
            quantize_linears(linears, value)
        ms = bench(lambda: [m(inputs[n]) for n, m in linears.items()], device) * S.DIT_LAYERS
        err = max(_rel(m(inputs[n]), want[n]) for n, m in linears.items())
    return ms, err


def _ltx_core() -> None:
    from backends.runtime import ltx2

    core, why = ltx2.import_ltx_core()
    if core is None:
        raise RuntimeError(why)


PAIR = 2  # the DiT blocks a compile candidate builds
# What the DiT and decoder candidates import (2 s and more each): a spare worker imports them while
# the worker before it measures, so no candidate waits for them.
PRELOAD = ("ltx_core.model.transformer.model", "ltx_core.model.video_vae.diffusion_video_decoder",
           "ltx_core.model.video_vae.transformer.apply", "torch._inductor.compile_fx")


def preload() -> None:
    """Import PRELOAD where it can be (what cannot is left to the candidate, which says why)."""
    import importlib

    from backends.runtime import ltx2

    if ltx2.import_ltx_core()[0] is None:
        return
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (the candidate that needs it reports the error)
            pass


def _dit_pair(values: dict, shapes: RunShapes, device: str, dtype: torch.dtype, first_only: bool = False
              ) -> tuple[float | None, float | None, float]:
    """(ms of the pair's forward, its error against the pair as built, a whole DiT's first forward in
    seconds) with the profile `values` applied to two full-width LTX-2 blocks. The first forward is the
    pair's first call (the compile: LTX-2's 48 blocks are alike and share its graph) plus the other
    46 blocks at the pair's steady time; the pair runs once as built before it, in both modes, so
    neither first call pays CUDA's own first use."""
    _ltx_core()
    from ltx_core.model.transformer.model import LTXModel, LTXModelType

    from backends.config.options import Profile
    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile

    torch.manual_seed(0)
    with torch.device(device):
        model = LTXModel(model_type=LTXModelType.VideoOnly, num_layers=PAIR, num_attention_heads=S.DIT_HEADS,
                         attention_head_dim=S.DIT_HEAD_DIM, cross_attention_dim=S.DIT_HEADS * S.DIT_HEAD_DIM)
    model = ltx2.wake_zero_tables(model.eval()).to(device=device, dtype=dtype)  # buffers made on the CPU too
    inputs = ltx2.transformer_inputs(tokens=shapes.dit_tokens, context=S.TEXT_TOKENS, device=device, dtype=dtype,
                                     channels=128, context_dim=S.DIT_HEADS * S.DIT_HEAD_DIM, with_audio=False,
                                     padded=0)  # no text mask: LTX-2's pipelines pass context_mask=None
    rest = S.DIT_LAYERS / PAIR - 1  # the other blocks of a whole DiT, in pairs
    with torch.inference_mode():
        want = model(*inputs)[0].clone()
        report = apply_profile(model, Profile().replace(**values), device=device)
        warm, out = first_call(lambda: model(*inputs), device)
        if first_only:
            return None, None, warm + rest * first_call(lambda: model(*inputs), device)[0]
        err = _rel(out[0], want)  # before a later call can reuse a CUDA graph's output
        ms = bench(lambda: model(*inputs), device, warm=True)
    _all_compiled(report)
    return ms, err, warm + rest * ms / 1000


def compile_mode(value: str, shapes: RunShapes, device: str, dtype: torch.dtype) -> tuple[float, float]:
    ms, err, _ = _dit_pair({"compile.enabled": True, "compile.mode": value}, shapes, device, dtype)
    return ms, err


def compile_enabled(value: str, shapes: RunShapes, device: str, dtype: torch.dtype, first_only: bool = False
                    ) -> tuple[float | None, float | None, float]:
    ms, err, warm = _dit_pair({"compile.enabled": value}, shapes, device, dtype, first_only)
    return (None if ms is None else ms * S.DIT_LAYERS / PAIR), err, warm


class FellBack(RuntimeError):
    """A compiled candidate ran (part) eagerly: its time is not the compiled time."""


def _all_compiled(report) -> None:
    health = report.compile_health()
    if health is not None and not health.compiled:
        raise FellBack(f"not timed as compiled: {health}")


def diffvae_mode(value: str, shapes: RunShapes, device: str, dtype: torch.dtype, na_backend: str = "auto",
                 first_only: bool = False) -> tuple[float | None, float | None, float]:
    import copy
    import dataclasses

    _ltx_core()
    from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder
    from ltx_core.model.video_vae.transformer.apply import apply_diffvae_config
    from ltx_core.model.video_vae.transformer.config import DiffVAEMode, NAttentionKind

    from backends.config.options import Profile
    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile

    torch.manual_seed(0)
    with torch.device(device):
        base = DiffusionVideoDecoder(head_dim=S.VAE_HEAD_DIM, stage_channels=(*S.VAE_STAGE_CHANNELS, S.VAE_STAGE5[0]),
                                     stage_depths=(*S.VAE_STAGE_DEPTHS, S.VAE_STAGE5[1]))
    base = ltx2.wake_zero_tables(base.eval()).to(device=device, dtype=dtype)  # its timestep table is made on the CPU
    g = torch.Generator(device).manual_seed(0)
    latent = _rand((shapes.batch, 128, *shapes.latent), device, dtype, g)

    def decode(decoder):
        with torch.inference_mode():
            return decoder(latent, generator=torch.Generator(device).manual_seed(1))

    # the reference: LTX-2's own chunked_eager with its own fallback NA (Triton on CUDA)
    kind = NAttentionKind.TRITON if device.startswith("cuda") else NAttentionKind.EAGER_SDPA
    recipe = dataclasses.replace(DiffVAEMode.CHUNKED_EAGER.resolve(), attention=kind, natten_backend=None)
    # run in both modes: neither first call below then pays CUDA's and cuDNN's first use of these shapes
    want = decode(apply_diffvae_config(copy.deepcopy(base), recipe))
    ours = base
    report = apply_profile(ours, Profile().replace(**{"diffvae.mode": value, "diffvae.na_backend": na_backend}),
                           device=device)
    warm, out = first_call(lambda: decode(ours), device)
    if first_only:
        return None, None, warm
    err = _rel(out, want)
    del out, want
    ms = bench(lambda: decode(ours), device, warm=True)  # its first call was the warm-up
    _all_compiled(report)
    return ms, err, warm


MEASURE = {"diffvae.na_backend": na_backend, "transformer.attention": attention,
           "transformer.quantization": quantization, "compile.enabled": compile_enabled, "compile.mode": compile_mode,
           "diffvae.mode": diffvae_mode}


def bound(option: str, value: str, dtype: torch.dtype) -> float:
    """The accuracy bound of `option` = `value` (its descriptor's, as the smoke checks use it):
    max abs error for attention (unit-variance inputs), relative error elsewhere."""
    return values.value(option, value).bound.at(dtype == torch.float32)
