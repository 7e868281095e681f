"""LTX-2's real DiT `LTXModel()`, one forward: LTX-2 as built vs profiles applied by ltx-tui.

LTX-2 v1.2.0's full audio-video `LTXModel()` (its default constructor: 48 blocks, 32 heads x 128
video, 32 x 64 audio, 18.8 B parameters; `--layers N` builds fewer blocks), random weights made
on the device in bf16 from one seed (LTX-2's own initialisers, then its uninitialised AdaLN
tables given small random values: `runtime.ltx2.wake_zero_tables`). One forward at N video
tokens + 126 audio tokens + 1024 text tokens without a context mask, as LTX-2 v1.2.0's pipelines
call the DiT (ltx_pipelines/utils/helpers.py builds every Modality with `context_mask=None`; with
`--text-padding N` the last N text tokens are masked and the masked attention path runs),
for each token count of `--tokens` (6144 = 768x512x121, 24576 = 1536x1024x121, 1536 = distilled's
stage 1 at 768x512x121).

Each variant runs in its own process on the same weights (same seed; a weight fingerprint is
compared) and the same inputs: first LTX-2 as built (its AUTOMATIC attention, bf16, eager),
whose first forward at each token count is the reference, kept in a temporary file; then the
others. Per variant and token count: `--warmup` forwards (compiles), then the median of
`--repeat` timed forwards (s), `vs LTX-2` = LTX-2's s / this s (same run), peak GiB =
`torch.cuda.max_memory_allocated` during the timed forwards (weights included), rel L2 =
||out - ref|| / ||ref|| over the video and audio outputs against LTX-2's bf16 eager forward,
first s = the first forward (compile included); 2nd s = the second (with compile.capture, the
one that captures the block loop); b2b s = a forward's share of `--repeat` forwards issued back to
back with one sync at the end, as a pipeline's steps run (s syncs after each forward). One process meets the token counts in the order
given, as a two-stage run does (distilled at 1536x1024x121: stage 1 at 6144 tokens, stage 2 at
24576): a compiled variant recompiles at the second count (torch.compile's automatic dynamic
shapes); `--per-tokens` gives every (variant, token count) its own process instead.

Variants (`--variants`, comma-separated; default: the first six):
  ltx2                   LTX-2 as built
  default                ltx-tui's default profile (`apply_profile(model, Profile())`)
  compile                ltx-tui, compile.enabled = true
  fp8-scaled-mm          ltx-tui, transformer.quantization = "fp8-scaled-mm"
  fp8-scaled-mm+compile  both
  fp8-attn+fp8-scaled-mm, fp8-attn+fp8-scaled-mm+compile
                         the same with transformer.attention = "sdpa_cudnn_fp8" (cuDNN's fp8 attention)
  fast-norm, fp8-scaled-mm+fast-norm, fp8-attn+fp8-scaled-mm+fast-norm
                         default / fp8-scaled-mm / sdpa_cudnn_fp8 + fp8-scaled-mm, eager, with
                         transformer.fast_norm = true
                         (`kernels.adaln` in the blocks' ada_zero / post_sa slots, and one AdaLN row:
                         `:per-token` leaves that out)
  fp8-attn+fp8-scaled-mm+graphs
                         and compile.mode = "reduce-overhead" (Inductor's CUDA graphs, one per block)
  compile+capture, fp8-scaled-mm+capture, fp8-attn+fp8-scaled-mm+capture
                         compile.capture = true: the 48-block loop as one CUDA graph per input shape
                         (`backends.runtime.block_graph`), on top of compile / fp8-scaled-mm + compile /
                         sdpa_cudnn_fp8 + fp8-scaled-mm + compile
  fp8-attn+fp8-scaled-mm+fast-norm+compile, fp8-attn+fp8-scaled-mm+fast-norm+capture
                         sdpa_cudnn_fp8 + fp8-scaled-mm + compile (+ capture) with transformer.fast_norm =
                         true (compiled: its norms write the fp8 linears' rows)
  eager-capture, fast-norm+eager-capture, fp8-scaled-mm+eager-capture,
  fp8-attn+fp8-scaled-mm+eager-capture, fp8-attn+fp8-scaled-mm+fast-norm+eager-capture
                         compile.capture = true with compile off: the loop of eager blocks as one
                         CUDA graph per input shape (no compile time)
  ltx2-fp8-cast          LTX-2's own fp8-cast, as its loader applies it to a bf16 checkpoint: its
                         TRANSFORMER_LINEAR_DOWNCAST_MAP (weights and biases cast to float8_e4m3fn,
                         no scale) and its UPCAST_DURING_INFERENCE module op (upcast in forward)
  fp8-cast               ltx-tui, transformer.quantization = "fp8-cast" (per-channel scales)
  int8-w8a8              ltx-tui, transformer.quantization = "int8-w8a8"
Ablations, `VARIANT:NAME` (repeatable, e.g. `fp8-attn+fp8-scaled-mm+capture:per-token`), change
one thing of the profile's runtime in that variant's process:
  promoted       the fp8 GEMMs without fast accumulation
  unshared       without `runtime.shared_rows` (each fp8 linear quantizes its input; to_q, to_k and
                 to_v of one input share one quantization otherwise)
  unfused        without the FeedForward's GELU fused into the fp8 row quantization
  lt-ff          the video FeedForwards in two cuBLASLt calls (`runtime.fused_ff`, off by default: its
                 first forward costs ~2 min; compiled blocks replayed in CUDA graphs on Hopper with
                 nvmath-python) instead of the row-scaled path
  unfolded       without `runtime.shared_rows` folding rows: cuDNN's fp8 O dequantized and quantized again
                 for to_out, fast_norm's norms writing bf16 rows that the next linear quantizes
  amax-qk        the fp8 attention's q and k scaled by their amax (a reduction each) instead of the
                 static bound of LTX-2's q/k RMSNorm (`dense_attention.QKBound`)
  v-e4m3         the video self-attention's v in e4m3 straight from its GEMM by a bounded scale
                 (`runtime.v_e4m3`, off by default until measured) instead of bf16, its amax and a cast
  per-token      without `runtime.timestep_rows` (timesteps equal across the tokens embedded and read
                 per token, as LTX-2 is called)
  multi-kernel   Inductor's `triton.multi_kernel = 1` (persistent reductions up to 16x longer rows,
                 each timed against the looped one at its first call)
  autotune       Inductor's `max_autotune_gemm` (Triton GEMM templates timed against cuBLAS, the
                 element-wise work after a GEMM fused into the template's epilogue where it wins)
  coord          Inductor's `coordinate_descent_tuning` (each fused kernel's launch shape tuned)
  combo          Inductor's `combo_kernels` (independent element-wise kernels, e.g. the audio and
                 video branches', horizontally fused into one launch)
`--profile P.toml` (repeatable) adds a row per profile file. `auto` values follow this machine's
tune cache (`ltx-tui --tune`), as `apply_profile` resolves them; the legend says what each got.

`--breakdown NAME` (instead of the table): for that variant at each token count, after the
warm-ups, the forward's wall time and the host's issue time (unprofiled: when forward() returns);
a torch.profiler trace of the device alone: kernel launches, GPU busy time against the span and
the wall (launch-boundness); then a trace with the host's ops and ranges naming each module and
LTX-2's block functions: kernel time grouped into GEMMs (by role and M x K -> N; by shape alone
inside compiled blocks; a captured loop's kernels, replayed from a CUDA graph, link to no op and
are grouped by their names alone), attention (video self, text cross, audio, audio/video cross),
element-wise (RMSNorm, RoPE, AdaLN modulation, gelu, adds; Inductor's fused kernels by the ops
they fuse), quantization (activations; fp8-cast's weight upcast), copies, other; and the top 15
kernels. On the CPU it groups the ops' self CPU time.

    LTX2_CORE_SRC=.../ltx-core/src python bench/ltx2_dit.py [--tokens 6144,24576] [--layers 48]
        [--variants ltx2,default,...] [--profile P.toml ...] [--repeat 3] [--warmup 2] [--per-tokens]
    LTX2_CORE_SRC=... python bench/ltx2_dit.py --breakdown ltx2 --tokens 6144
    toy run on the CPU: ... --device cpu --size tiny --layers 1 --tokens 64 --text-tokens 16 --audio-tokens 10
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 1024**3
# key -> (row name, what to apply: None = nothing, a dict = Profile().replace(**dict), or a marker)
VARIANTS: dict[str, tuple[str, object]] = {
    "ltx2": ("LTX-2 as built", None),
    "default": ("ltx-tui default profile", {}),
    "compile": ("ltx-tui compile", {"compile.enabled": True}),
    "fp8-scaled-mm": ("ltx-tui fp8-scaled-mm", {"transformer.quantization": "fp8-scaled-mm"}),
    "fp8-scaled-mm+compile": ("ltx-tui fp8-scaled-mm + compile",
                              {"transformer.quantization": "fp8-scaled-mm", "compile.enabled": True}),
    "fp8-attn+fp8-scaled-mm": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm",
                               {"transformer.attention": "sdpa_cudnn_fp8", "transformer.quantization": "fp8-scaled-mm"}),
    "fast-norm": ("ltx-tui fast_norm", {"transformer.fast_norm": True}),
    "fp8-scaled-mm+fast-norm": ("ltx-tui fp8-scaled-mm + fast_norm",
                                {"transformer.quantization": "fp8-scaled-mm", "transformer.fast_norm": True}),
    "fp8-attn+fp8-scaled-mm+fast-norm": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + fast_norm",
                                         {"transformer.attention": "sdpa_cudnn_fp8",
                                          "transformer.quantization": "fp8-scaled-mm", "transformer.fast_norm": True}),
    "fp8-attn+fp8-scaled-mm+compile": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + compile",
                                       {"transformer.attention": "sdpa_cudnn_fp8",
                                        "transformer.quantization": "fp8-scaled-mm", "compile.enabled": True}),
    "fp8-attn+fp8-scaled-mm+graphs": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + compile reduce-overhead",
                                      {"transformer.attention": "sdpa_cudnn_fp8",
                                       "transformer.quantization": "fp8-scaled-mm", "compile.enabled": True,
                                       "compile.mode": "reduce-overhead"}),
    "compile+capture": ("ltx-tui compile + capture", {"compile.enabled": True, "compile.capture": True}),
    "fp8-scaled-mm+capture": ("ltx-tui fp8-scaled-mm + compile + capture",
                              {"transformer.quantization": "fp8-scaled-mm", "compile.enabled": True,
                               "compile.capture": True}),
    "fp8-attn+fp8-scaled-mm+capture": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + compile + capture",
                                       {"transformer.attention": "sdpa_cudnn_fp8",
                                        "transformer.quantization": "fp8-scaled-mm", "compile.enabled": True,
                                        "compile.capture": True}),
    "fp8-attn+fp8-scaled-mm+fast-norm+compile": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + fast_norm + compile",
                                                 {"transformer.attention": "sdpa_cudnn_fp8",
                                                  "transformer.quantization": "fp8-scaled-mm",
                                                  "transformer.fast_norm": True, "compile.enabled": True}),
    "fp8-attn+fp8-scaled-mm+fast-norm+capture": ("ltx-tui sdpa_cudnn_fp8 + fp8-scaled-mm + fast_norm + compile + capture",
                                                 {"transformer.attention": "sdpa_cudnn_fp8",
                                                  "transformer.quantization": "fp8-scaled-mm",
                                                  "transformer.fast_norm": True, "compile.enabled": True,
                                                  "compile.capture": True}),
    "ltx2-fp8-cast": ("LTX-2 fp8-cast (its own ops)", "ltx2-fp8-cast"),
    "fp8-cast": ("ltx-tui fp8-cast", {"transformer.quantization": "fp8-cast"}),
    "int8-w8a8": ("ltx-tui int8-w8a8", {"transformer.quantization": "int8-w8a8"}),
}
# compile.capture with compile off, on top of these eager variants: `eager-capture`, `BASE+eager-capture`
for _base in ("default", "fast-norm", "fp8-scaled-mm", "fp8-attn+fp8-scaled-mm", "fp8-attn+fp8-scaled-mm+fast-norm"):
    _name, _values = VARIANTS[_base]
    VARIANTS["eager-capture" if _base == "default" else f"{_base}+eager-capture"] = (
        f"{_name} + capture (eager blocks)", {**_values, "compile.enabled": False, "compile.capture": True})
DEFAULT_VARIANTS = "ltx2,default,compile,fp8-scaled-mm,fp8-scaled-mm+compile,ltx2-fp8-cast"
PROFILE_PREFIX = "profile:"
# `VARIANT:name` (repeatable): an ablation set in the child before the profile is applied,
# name -> (what the row adds to its name, module, dotted attribute, value)
ABLATIONS: dict[str, tuple[str, str, str, object]] = {
    "promoted": ("fp32-promoted accumulation", "backends.runtime.quant", "FP8ScaledMMLinear.fast_accum", False),
    "cublas-few-rows": ("few-row GEMMs on cuBLAS", "backends.runtime.quant", "FP8ScaledMMLinear.few_rows", 0),
    "unshared": ("a quantization per linear", "backends.runtime.shared_rows", "ENABLED", False),
    "unfused": ("GELU not fused", "backends.runtime.quant", "GeluQuantized.enabled", False),
    "lt-ff": ("FeedForward in cuBLASLt", "backends.runtime.fused_ff", "FusedFeedForward.enabled", True),
    "unfolded": ("rows not folded", "backends.runtime.shared_rows", "FOLD", False),
    "amax-qk": ("q/k scales by amax", "backends.runtime.dense_attention", "STATIC_QK", False),
    "v-e4m3": ("v in e4m3 from its GEMM", "backends.runtime.v_e4m3", "ENABLED", True),
    "adds-apart": ("residual adds apart", "backends.runtime.shared_rows", "ADDS", False),
    "cudnn-few-q": ("few-query calls on cuDNN", "backends.runtime.dense_attention", "FEW_QUERIES", 10**9),
    "per-token": ("AdaLN per token", "backends.runtime.timestep_rows", "ENABLED", False),
    "multi-kernel": ("Inductor multi-kernel reductions", "torch._inductor.config", "triton.multi_kernel", 1),
    "autotune": ("Inductor GEMM autotuning", "torch._inductor.config", "max_autotune_gemm", True),
    "coord": ("Inductor coordinate-descent tuning", "torch._inductor.config", "coordinate_descent_tuning", True),
    "combo": ("Inductor combo kernels", "torch._inductor.config", "combo_kernels", True),
}


def split_key(key: str) -> tuple[str, list[str]]:
    """(variant, ablations) of `VARIANT[:ablation...]` (a profile key has none)."""
    if key.startswith(PROFILE_PREFIX):
        return key, []
    base, *ablations = key.split(":")
    return base, ablations


AS_BUILT = ("ltx2", "ltx2-fp8-cast")  # LTX-2's own: no ltx-tui runtime to ablate


def unknown_key(key: str) -> bool:
    base, ablations = split_key(key)
    return not key.startswith(PROFILE_PREFIX) and (
        base not in VARIANTS or any(a not in ABLATIONS for a in ablations) or (base in AS_BUILT and ablations))


def variant_name(key: str) -> str:
    if key.startswith(PROFILE_PREFIX):
        return f"profile {Path(key[len(PROFILE_PREFIX):]).name}"
    base, ablations = split_key(key)
    return ", ".join([VARIANTS[base][0]] + [ABLATIONS[a][0] for a in ablations])


def set_ablation(name: str) -> None:
    import functools
    import importlib

    _, module, attribute, value = ABLATIONS[name]
    *path, last = attribute.split(".")
    setattr(functools.reduce(getattr, path, importlib.import_module(module)), last, value)


# --- the child: one variant in its own process ------------------------------------------------

def emit(**row) -> None:
    print(json.dumps(row), flush=True)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(args, device, dtype):
    """LTX-2's LTXModel on `device` in `dtype`, weights from `args.seed`: the default constructor
    (`--size full`, `--layers` blocks) or the project's tiny audio-video config (`--size tiny`)."""
    import torch

    from backends.runtime import ltx2

    if args.size == "tiny":
        return ltx2.tiny_transformer(seed=args.seed, layers=args.layers).to(device=device, dtype=dtype)
    from ltx_core.model.transformer.model import LTXModel

    torch.manual_seed(args.seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # made on the device, in its dtype: 18.8 B parameters never touch the host
    try:
        with torch.device(device):
            model = LTXModel(num_layers=args.layers)
    finally:
        torch.set_default_dtype(default)
    return ltx2.wake_zero_tables(model.eval())


def fingerprint(model) -> float:
    """A number that differs when the weights do (same seed, same code: same weights)."""
    import torch

    with torch.no_grad():
        sums = [p.sum(dtype=torch.float32) * ((i % 7) + 1) for i, p in enumerate(model.parameters())]
        return float(torch.stack(sums).double().sum().item())


def ltx2_fp8_cast(model) -> None:
    """LTX-2's fp8-cast on a built bf16 model, with LTX-2's own pieces, as its loader applies them to
    a bf16 checkpoint (`fp8_cast.build_policy` without prequant scales): the state dict through its
    TRANSFORMER_LINEAR_DOWNCAST_MAP, its UPCAST_DURING_INFERENCE module op, then the downcast tensors
    assigned as its loader does (`load_state_dict(strict=False, assign=True)`)."""
    import torch
    from ltx_core.quantization import TRANSFORMER_LINEAR_DOWNCAST_MAP, UPCAST_DURING_INFERENCE

    state = model.state_dict()
    cast = {}
    for key, value in state.items():
        for result in TRANSFORMER_LINEAR_DOWNCAST_MAP.apply_to_key_value(key, value):
            if result.new_value is not value:
                cast[result.new_key] = result.new_value
    del state
    if not UPCAST_DURING_INFERENCE.matcher(model):
        raise RuntimeError("LTX-2's UPCAST_DURING_INFERENCE does not match this model")
    UPCAST_DURING_INFERENCE.mutator(model)
    missing = [k for k, v in model.state_dict().items() if v.dtype == torch.float8_e4m3fn and k not in cast]
    if missing:
        raise RuntimeError(f"fp8 parameters without a downcast value: {missing[:3]}")
    model.load_state_dict(cast, strict=False, assign=True)


def apply_variant(model, key: str, device):
    """Apply variant `key` to `model` in place; returns (report or None, legend text, compiled?)."""
    from ltx_core.model.transformer.attention import attention_label

    report, compiled = None, False
    if key == "ltx2":
        what = "nothing applied: LTX-2's AUTOMATIC attention, eager"
    elif key == "ltx2-fp8-cast":
        ltx2_fp8_cast(model)
        n = sum(type(m).__name__ == "Fp8CastLinear" for m in model.modules())
        what = f"LTX-2's TRANSFORMER_LINEAR_DOWNCAST_MAP + UPCAST_DURING_INFERENCE: {n} Fp8CastLinear"
    else:
        from backends.config import profile as profile_file
        from backends.config.options import Profile, toml_value
        from backends.runtime.apply import apply_profile

        if key.startswith(PROFILE_PREFIX):
            profile = profile_file.load(key[len(PROFILE_PREFIX):])
        else:
            profile = Profile().replace(**VARIANTS[split_key(key)[0]][1])
        for name in split_key(key)[1]:
            set_ablation(name)
        report = apply_profile(model, profile, device=device)
        shown = ("transformer.attention", "transformer.quantization", "compile.enabled", "compile.mode",
                 "offload.mode")
        what = ", ".join(f"{k.removeprefix('transformer.')}="
                         f"{'unused' if report.plan[k].effective is None else toml_value(report.plan[k].effective)}"
                         for k in shown)
        compiled = report.change("compile.enabled").action == "compiled"
        if report.warnings:
            what += "; warnings: " + " | ".join(w[:160] for w in report.warnings)
    attn = model.transformer_blocks[0].attn1
    what += (f"; attention: {attention_label(attn.attention_function)}, masked: "
             f"{attention_label(attn.masked_attention_function)}")
    return report, what, compiled


def input_dims(model) -> dict:
    """The widths LTX-2's forward takes (read off the model before a variant replaces its linears)."""
    block = model.transformer_blocks[0]
    return {"channels": model.patchify_proj.in_features, "context_dim": block.attn2.to_k.in_features,
            "audio_channels": model.audio_patchify_proj.in_features,
            "audio_context_dim": block.audio_attn2.to_k.in_features}


def make_inputs(args, dims: dict, tokens: int, device, dtype):
    from backends.runtime import ltx2

    return ltx2.transformer_inputs(tokens=tokens, audio_tokens=args.audio_tokens, context=args.text_tokens,
                                   padded=args.text_padding,
                                   seed=args.seed + 1, device=device, dtype=dtype, **dims)


def rel_l2(out, ref) -> float | None:
    """||out - ref|| / ||ref|| over every output present in both (video, audio)."""
    import torch

    num = den = 0.0
    for o, r in zip(out, ref):
        if o is None or r is None:
            continue
        r = r.to(o.device, torch.float32)
        num += float((o.float() - r).square().sum())
        den += float(r.square().sum())
    return math.sqrt(num / den) if den else None


def child(args) -> int:
    import torch

    from backends.runtime import ltx2

    core, why = ltx2.import_ltx_core()
    if core is None:
        emit(kind="error", variant=args.child, error=why)
        return 1
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    t0 = time.perf_counter()
    model = build(args, device, dtype)
    sync(device)
    build_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    dims = input_dims(model)
    meta = dict(kind="meta", variant=args.child, params=params, layers=len(model.transformer_blocks),
                fingerprint=fingerprint(model), build_s=round(build_s, 1), torch=torch.__version__,
                device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", dtype=args.dtype)
    try:
        t0 = time.perf_counter()
        report, what, compiled = apply_variant(model, args.child, device)
        meta["apply_s"] = round(time.perf_counter() - t0, 1)
    except Exception as e:  # noqa: BLE001 - a variant that cannot run here is a result
        emit(**meta, applied=None)
        emit(kind="error", variant=args.child, error=f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")
        return 0
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    emit(**meta, applied=what)
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.breakdown_child:
        for n in tokens:
            breakdown(args, model, dims, n, device, dtype, compiled)
        return 0
    refs = {} if args.write_ref or not args.ref or not os.path.exists(args.ref) else torch.load(args.ref)
    for n in tokens:
        try:
            emit(kind="row", variant=args.child, tokens=n, **measure(args, model, dims, n, device, dtype, refs))
        except torch.OutOfMemoryError:
            emit(kind="error", variant=args.child, tokens=n, error="out of memory")
        except Exception as e:  # noqa: BLE001
            emit(kind="error", variant=args.child, tokens=n,
                 error=f"{type(e).__name__}: {' '.join(str(e).split())[:400]}")
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.write_ref:
        torch.save(refs, args.ref)
    health = report.compile_health() if report is not None else None
    emit(kind="end", variant=args.child, compile=str(health) if health is not None else None)
    return 0


def forward(model, inputs):
    import torch

    with torch.inference_mode():
        return model(*inputs)


def measure(args, model, dims: dict, tokens: int, device, dtype, refs: dict) -> dict:
    import torch

    inputs = make_inputs(args, dims, tokens, device, dtype)
    sync(device)
    t0 = time.perf_counter()
    out = forward(model, inputs)
    sync(device)
    first = time.perf_counter() - t0
    if args.write_ref:  # LTX-2 as built: its first forward is the reference
        refs[tokens] = tuple(None if t is None else t.detach().cpu() for t in out)
    second = None
    for i in range(args.warmup - 1):
        t0 = time.perf_counter()
        out = forward(model, inputs)
        if i == 0:  # with compile.capture, the forward that captures the block loop
            sync(device)
            second = time.perf_counter() - t0
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.repeat):
        del out
        t0 = time.perf_counter()
        out = forward(model, inputs)
        sync(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None
    err = rel_l2(out, refs[tokens]) if tokens in refs else None
    del out
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        out = forward(model, inputs)
    sync(device)
    b2b = (time.perf_counter() - t0) / args.repeat
    outs = [t for t in out if t is not None]
    return {"s": statistics.median(times), "times": [round(t, 4) for t in times], "peak_gib": peak,
            "rel_l2": err, "first_s": first, "second_s": second, "b2b_s": b2b, "finite": all(bool(t.isfinite().all()) for t in outs),
            "rms": [float(t.float().square().mean().sqrt()) for t in outs]}


# --- --breakdown: where one forward's time goes -------------------------------------------------

LABEL_MOD, LABEL_FN = "mod:", "fn:"
QUANT_CLASSES = {"FP8ScaledMMLinear", "Int8Linear", "FP8CastLinear", "Fp8CastLinear"}
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::linear", "aten::matmul", "aten::bmm",
            "aten::baddbmm", "aten::_int_mm", "aten::_addmm_activation", "ltx_tui::fp8_few_rows_mm"}
GEMM_KERNEL = re.compile(r"gemm|nvjet|xmma|s16816|s1688|cublas|splitkreduce|_scaled_mm|triton_tem_fused_\w*mm|"
                         r"int8_gemm|_int8_mm|matmul|_few_rows_")
ATTN_KERNEL = re.compile(r"flash|fmha|sdpa|attention|attn_fwd")
ATTN_OP = re.compile(r"scaled_dot_product|flash_attn|flash_attention|efficient_attention|cudnn_attention|fmha|sdpa_fp8")
NORM_WORDS = ("rms_norm", "layer_norm", "rsqrt", "var_mean", "_mean_", "mean_")
COPY_OPS = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous", "aten::cat", "aten::stack",
            "aten::fill_", "aten::zero_", "aten::zeros", "aten::empty_like", "aten::index", "aten::expand",
            "aten::repeat"}
OUTSIDE = "outside the blocks (patchify, AdaLN/timestep MLPs, proj_out)"
UNLINKED = "no op linked (a CUDA graph's replay): shape unknown"
VIEW_OPS = re.compile(r"aten::(view|_unsafe_view|as_strided|transpose|t|reshape|slice|select|squeeze|unsqueeze|"
                      r"expand|permute|detach_?|alias|lift_fresh|empty|empty_strided|resize_|unbind|split|chunk|"
                      r"narrow|view_as|flatten|unflatten|is_nonzero|item|_local_scalar_dense|size|stride)$")
ATTN_ROLES = {"attn1": "video self-attn", "attn2": "video text cross-attn", "audio_attn1": "audio self-attn",
              "audio_attn2": "audio text cross-attn", "audio_to_video_attn": "a2v cross-attn (q video, kv audio)",
              "video_to_audio_attn": "v2a cross-attn (q audio, kv video)"}


def _label_model(model, compiled: bool):
    """Profiler ranges naming the module (`mod:path|Class`, block index as *) and LTX-2's per-block
    functions (`fn:...`) each op runs under. Inside compiled blocks nothing is labelled (the ranges
    would sit in Dynamo's trace); the preprocessing and output stages run eagerly and are. Returns
    the function that takes every range away again."""
    import torch

    stack, handles, replaced = [], [], []

    def ranged(label):
        def pre(module, args):
            rf = torch.profiler.record_function(label)
            rf.__enter__()
            stack.append(rf)

        def post(module, args, output):
            stack.pop().__exit__(None, None, None)
        return pre, post

    def wrap(owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        replaced.append((owner, attr, owner.__dict__.get(attr, replaced)))

        def run(*a, **k):
            with torch.profiler.record_function(label):
                return fn(*a, **k)
        setattr(owner, attr, run)

    def restore() -> None:
        for h in handles:
            h.remove()
        for owner, attr, old in reversed(replaced):
            if old is replaced:  # it was the class's method
                delattr(owner, attr)
            else:
                setattr(owner, attr, old)

    for name, module in model.named_modules():
        if not name or isinstance(module, torch.nn.ModuleList):
            continue
        parts = name.split(".")
        in_block = parts[0] == "transformer_blocks" and len(parts) > 2
        if compiled and in_block:
            continue
        path = ".".join("*" if (i == 1 and parts[0] == "transformer_blocks") else p for i, p in enumerate(parts))
        pre, post = ranged(f"{LABEL_MOD}{path}|{type(module).__name__}")
        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    for pre_name in ("video_args_preprocessor", "audio_args_preprocessor"):
        pre = getattr(model, pre_name, None)
        if pre is not None:
            wrap(pre, "prepare", f"{LABEL_FN}preprocess")
    wrap(model, "_process_output", f"{LABEL_FN}output")
    if not compiled:
        for block in model.transformer_blocks:
            for attr in ("ada_zero_function", "post_sa_function", "get_ada_values"):
                wrap(block, attr, f"{LABEL_FN}{attr}")
        for module in model.modules():
            if hasattr(module, "preattention_function"):
                wrap(module, "preattention_function", f"{LABEL_FN}preattention")
    return restore


def _chain(event):
    while event is not None:
        yield event
        event = event.cpu_parent


def _mkn(op) -> tuple[int, int, int] | None:
    shapes = [s for s in (op.input_shapes or []) if isinstance(s, (list, tuple)) and len(s) >= 2]
    if len(shapes) < 2:
        return None
    if op.name in ("aten::linear", "ltx_tui::fp8_few_rows_mm"):  # x (.., K), w (N, K)
        x, w = shapes[0], shapes[1]
        return math.prod(x[:-1]), x[-1], w[0]
    a, b = (shapes[1], shapes[2]) if op.name in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3 else shapes[:2]
    return math.prod(a[:-1]), a[-1], b[-1]


def _gemm_role(mod_path: str | None, mkn, dims: dict, in_block: bool, batched: bool) -> str:
    """What a GEMM computes: from the Linear's module path where the trace names it (eager), else
    from its shape (M x K -> N; in compiled blocks)."""
    shape = f" {mkn[0]}x{mkn[1]}->{mkn[2]}" if mkn else ""
    if batched:
        return "batched matmul (bmm)" + shape
    if mod_path is not None:
        parts = mod_path.split(".")
        if parts[0] != "transformer_blocks" or len(parts) < 3:
            return OUTSIDE
        head, leaf = parts[2], parts[3] if len(parts) > 3 else ""
        if head in ("ff", "audio_ff"):
            which = "in" if parts[4:5] == ["0"] else "out"
            return f"{'video' if head == 'ff' else 'audio'} FF {which}" + shape
        if head in ATTN_ROLES:
            return f"{ATTN_ROLES[head]} {'qkv' if leaf in ('to_q', 'to_k', 'to_v') else leaf}" + shape
        return head + shape
    if not mkn:
        return "in the blocks, shape unknown" if in_block else "shape unknown"
    m, k, n = mkn
    dv, da = dims["dv"], dims["da"]
    if m == dims["nv"]:
        role = {(dv, dv): "video q/k/v/out (self) + text-cross q/out", (dv, 4 * dv): "video FF in",
                (4 * dv, dv): "video FF out", (dv, da): "v2a k/v + a2v q", (da, dv): "a2v out"}.get(
            (k, n), "in the blocks, other" if in_block else OUTSIDE)
    elif m == dims["nt"]:
        role = "text k/v (cross-attn)"
    elif m == dims["na"]:
        role = "audio tokens (self/text/av attention, FF)"
    else:
        role = "in the blocks, other" if in_block else OUTSIDE
    return role if role == OUTSIDE else role + shape


def _attention_kind(ops, dims: dict) -> str:
    for op in ops:
        if not ATTN_OP.search(op.name.lower()):
            continue
        shapes = [s for s in (op.input_shapes or []) if isinstance(s, (list, tuple)) and len(s) == 4]
        if len(shapes) < 2:
            continue
        q, k = shapes[0], shapes[1]
        seq = 1 if ("flash_attn" in op.name or "sdpa_fp8" in op.name) else 2  # (B, N, H, D) vs SDPA's (B, H, N, D)
        nq, nk = q[seq], k[seq]
        heads, dim = (q[2], q[3]) if seq == 1 else (q[1], q[3])
        kinds = {(dims["nv"], dims["nv"]): "video self", (dims["nv"], dims["nt"]): "video text cross",
                 (dims["na"], dims["na"]): "audio self", (dims["na"], dims["nt"]): "audio text cross",
                 (dims["nv"], dims["na"]): "a2v cross (q video)", (dims["na"], dims["nv"]): "v2a cross (q audio)"}
        return f"{kinds.get((nq, nk), 'other')} ({nq} q x {nk} kv, {heads}x{dim})"
    return "shape unknown"


def classify(name: str, event, dims: dict) -> tuple[str, str]:
    """(category, detail) of a kernel (or, on the CPU, an op) launched under `event`."""
    low = name.lower()
    chain = list(_chain(event)) if event is not None else []
    ops = [e for e in chain if "::" in e.name and not e.name.startswith((LABEL_MOD, LABEL_FN))]
    mods = [e.name[len(LABEL_MOD):].split("|") for e in chain if e.name.startswith(LABEL_MOD)]
    fns = {e.name[len(LABEL_FN):] for e in chain if e.name.startswith(LABEL_FN)}
    op_names = [o.name for o in ops]
    inductor = low.startswith("triton_")
    # Inductor's pointwise and reduction kernels are named after every op they fused, a GEMM's or an
    # attention's neighbours included (the q/k norm before SDPA, the quantization before _scaled_mm):
    # never a GEMM or an attention themselves (its matmul templates are `triton_tem_`).
    fused = re.match(r"triton_(poi|red|per)_", low) is not None
    if name.startswith("views and allocations"):
        return "other", name
    if "_scale_cast" in low or low.startswith(("_amax3", "_cast3")) or (any("sdpa_fp8" in n for n in op_names)
                                and any("vector_norm" in n for n in op_names)):
        return "quantization", "fp8 attention's q/k/v quantization (amax, cast) and output dequantization"
    if low.startswith("_add_ada_zero"):
        return "element-wise", "residual add + AdaLN norm(s) + fp8 rows (kernels.adaln, one pass)"
    if low.startswith(("_ada_zero", "_post_sa")):
        return "element-wise", "AdaLN norm / post_sa (kernels.adaln, one pass; the fp8 rows too where folded)"
    if low == "_qk" or any(n == "ltx_tui::dit_qk" for n in op_names):
        return "element-wise", "q/k RMSNorm + RoPE (kernels.dit_qk, one pass; e4m3 before the fp8 attention)"
    if not fused and (ATTN_KERNEL.search(low) or any(ATTN_OP.search(n.lower()) for n in op_names)):
        return "attention", _attention_kind(ops, dims) if event is not None else UNLINKED
    gemm = None if fused else next((o for o in ops if o.name in GEMM_OPS), None)
    if event is None and not fused and GEMM_KERNEL.search(low):
        return "GEMM", UNLINKED
    if gemm is not None or (not fused and GEMM_KERNEL.search(low)):
        mkn = _mkn(gemm) if gemm is not None else None
        path = next((m[0] for m in mods if m[1] in ("Linear", *QUANT_CLASSES)), None)
        in_block = any(m[0].startswith("transformer_blocks.") for m in mods)
        batched = gemm is not None and gemm.name in ("aten::bmm", "aten::baddbmm")
        return "GEMM", _gemm_role(path, mkn, dims, in_block, batched)
    cls = mods[0][1] if mods else None
    if cls in QUANT_CLASSES or "quantize" in low or "amax" in low or "float8" in low or "fp8" in low \
            or any("quantize" in n for n in op_names):
        return "quantization", "fp8 weight upcast (fp8-cast)" if cls in ("FP8CastLinear", "Fp8CastLinear") \
            else "activation quantization (amax, scale, cast" + ("; Inductor: with the norm/GELU before it)"
                                                                  if fused else ")")
    if "memcpy" in low or "memset" in low:
        return "copies", name.split()[0] if " " in name else name
    if "preprocess" in fns:
        return "element-wise", "preprocessing (timestep embedding, RoPE tables, masks; once)"
    if "output" in fns:
        return "element-wise", "output (norm_out + modulation; once)"
    if any(w in n for n in op_names for w in ("rms_norm", "layer_norm")) or cls in ("RMSNorm", "LayerNorm") \
            or (inductor and any(w in low for w in NORM_WORDS)):
        return "element-wise", "RMSNorm / LayerNorm" + (" (Inductor: with what it fused)" if inductor else "")
    if "preattention" in fns:
        return "element-wise", "RoPE"
    if "gelu" in low or "tanh" in low or any("gelu" in n for n in op_names):
        return "element-wise", "gelu (tanh)"
    if fns & {"ada_zero_function", "post_sa_function", "get_ada_values"}:
        return "element-wise", "AdaLN modulation (tables, scale/shift, gates)"
    if op_names and op_names[0] in COPY_OPS:
        return "copies", op_names[0]
    if inductor:
        return "element-wise", "fused by Inductor (adds, gates, modulation, RoPE, ...)"
    if op_names and re.match(r"aten::(add|mul|sub|div|addcmul|neg|where|silu|sigmoid|exp|cos|sin|pow|unsqueeze)",
                             op_names[0]):
        return "element-wise", "residual adds, gates, other"
    if "elementwise" in low or "reduce" in low:
        return "element-wise", "residual adds, gates, other"
    if event is None:
        return "other", "not linked to a CPU op"
    return "other", op_names[0] if op_names else name[:60]


DETAIL_ROWS = 16


def _units(events, cuda: bool) -> list:
    """(kernel name, microseconds, the CPU op or range it was launched under, or None) for each
    kernel, memcpy and memset of the trace; on the CPU (op name, self CPU time, op) for each op."""
    from torch.autograd import DeviceType

    def label(e):
        return e.name.startswith((LABEL_MOD, LABEL_FN))

    if not cuda:
        return [(e.name if not VIEW_OPS.match(e.name) else "views and allocations (no kernel)",
                 e.self_cpu_time_total, e)
                for e in events if e.device_type == DeviceType.CPU and "::" in e.name and not label(e)
                and e.self_cpu_time_total > 0]
    device = _on_device(events)
    kernels = [(k.name, k.duration, e) for e in events if e.device_type == DeviceType.CPU for k in e.kernels
               if not k.name.startswith((LABEL_MOD, LABEL_FN))]
    if device:  # linked as torch's own parser links them: the device event's linked id is its op's id
        front = {}
        for e in events:
            if e.device_type == DeviceType.CPU and not getattr(e, "linked_correlation_id", 0):
                front.setdefault(e.id, e)
        units = [(e.name, e.time_range.end - e.time_range.start, front.get(getattr(e, "linked_correlation_id", -1)))
                 for e in device]
        linked = sum(u[1] for u in units if u[2] is not None)
        # A CUDA graph's replayed kernels link to no op (and torch attributes them to none either): they
        # stay, classified by their names. torch's own attribution only where it covers more time.
        if linked >= 0.99 * sum(k[1] for k in kernels):  # the same durations, summed in another order
            return units
    return kernels  # torch's own attribution (each op's `kernels`), where the linking above failed


def _on_device(events) -> list:
    """The kernels, memcpys and memsets of a trace (not the ranges it mirrors on the device)."""
    from torch.autograd import DeviceType

    return [e for e in events if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
            and not e.name.startswith((LABEL_MOD, LABEL_FN))]


def _busy_ms(intervals: list[tuple[float, float]]) -> float:
    busy, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if e <= end:
            continue
        busy += e - max(s, end)
        end = e
    return busy / 1000


def _trace(model, inputs, device, host: bool = True):
    """The events of one profiled forward; `host=False`: the device's activity only (the host runs
    as unprofiled, but for the profiler's own small cost)."""
    from torch.profiler import ProfilerActivity, profile

    activities = ([ProfilerActivity.CPU] if host else []) + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=host) as prof:
        forward(model, inputs)
        sync(device)
    return prof.events()


def breakdown(args, model, dims: dict, tokens: int, device, dtype, compiled: bool) -> None:
    """Print where one forward's time goes (see the module's docstring)."""
    import torch

    cuda = device.type == "cuda"
    inputs = make_inputs(args, dims, tokens, device, dtype)
    for _ in range(max(args.warmup, 1)):
        forward(model, inputs)
    sync(device)
    issue, wall = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        out = forward(model, inputs)
        t1 = time.perf_counter()
        sync(device)
        issue.append(t1 - t0)
        wall.append(time.perf_counter() - t0)
        del out
    # trace 1, the device's activity only: the GPU's timeline as the model runs (launches, busy, gaps)
    timeline, where = (_on_device(_trace(model, inputs, device, host=False)) if cuda else []), "device-only trace"
    # trace 2, with the host's ops and ranges naming modules and LTX-2's block functions: what each kernel is
    restore = _label_model(model, compiled)
    try:
        forward(model, inputs)  # whatever the ranges make Dynamo look at again happens outside the trace
        sync(device)
        events = _trace(model, inputs, device)
    finally:
        restore()
    if cuda and not timeline:
        timeline, where = _on_device(events), "labelled trace (its host is slower)"
    shape = {"nv": tokens, "na": args.audio_tokens, "nt": args.text_tokens,
             "dv": model.inner_dim, "da": model.audio_inner_dim}
    units = _units(events, cuda)
    total = sum(u[1] for u in units) / 1000 or 1e-9
    layers = len(model.transformer_blocks)
    print(f"breakdown: {variant_name(args.child)}, {tokens} video + {args.audio_tokens} audio + {args.text_tokens} "
          f"text tokens, {layers} layers, {args.dtype}, {torch.cuda.get_device_name(device) if cuda else 'cpu'}, "
          f"torch {torch.__version__}")
    if cuda:
        print(f"forward, unprofiled (median of 3): wall {statistics.median(wall) * 1000:.1f} ms; the host returns "
              f"from forward() after {statistics.median(issue) * 1000:.1f} ms (its Python and launches; for the rest "
              f"of the wall it waits on the GPU)")
    else:
        print(f"forward, unprofiled (median of 3): wall {statistics.median(wall) * 1000:.1f} ms")
    if cuda and timeline:
        spans = [(e.time_range.start, e.time_range.end) for e in timeline]
        span = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1000
        busy, kernel_sum = _busy_ms(spans), sum(e - s for s, e in spans) / 1000
        n = sum(not re.match(r"mem(cpy|set)", e.name.lower()) for e in timeline)
        print(f"profiled forward ({where}): {n} kernel launches ({n / layers:.0f} per block) + "
              f"{len(timeline) - n} memcpy/memset; device time {kernel_sum:.1f} ms (sum), GPU busy {busy:.1f} ms "
              f"of a {span:.1f} ms span ({100 * busy / span:.0f}%; the gaps are the GPU waiting on the host); "
              f"busy / unprofiled wall = {100 * busy / (statistics.median(wall) * 1000):.0f}%")
    elif cuda:
        print(f"profiled forward: {len(units)} kernels ({len(units) / layers:.0f} per block); no device timeline "
              f"in the trace")
    else:
        print(f"profiled forward: CPU op self time {total:.1f} ms ({len(units)} ops, views and allocations in "
              f"'other')")
    groups: dict[str, Counter] = defaultdict(Counter)
    counts: Counter = Counter()
    by_name: dict[str, Counter] = defaultdict(Counter)
    calls: Counter = Counter()
    for name, us, e in units:
        cat = classify(name, e, shape)
        groups[cat[0]][cat[1]] += us / 1000
        counts[cat] += 1
        by_name[name][cat] += us / 1000
        calls[name] += 1
    what = "kernels" if cuda else "ops"
    print(f"\n{'category (labelled trace)':<72} {'ms':>9} {'%':>6} {what:>8}")
    for group in sorted(groups, key=lambda g: -sum(groups[g].values())):
        ms = sum(groups[group].values())
        n = sum(c for (g, _), c in counts.items() if g == group)
        print(f"{group:<72} {ms:9.2f} {100 * ms / total:5.1f}% {n:8d}")
        details = sorted(groups[group].items(), key=lambda kv: -kv[1])
        for detail, dms in details[:DETAIL_ROWS]:
            print(f"  {detail[:70]:<70} {dms:9.2f} {100 * dms / total:5.1f}% {counts[(group, detail)]:8d}")
        if len(details) > DETAIL_ROWS:
            rest = details[DETAIL_ROWS:]
            ms, n = sum(d[1] for d in rest), sum(counts[(group, d[0])] for d in rest)
            print(f"  {f'{len(rest)} more':<70} {ms:9.2f} {100 * ms / total:5.1f}% {n:8d}")
    print(f"{'total':<72} {total:9.2f}")
    print(f"\n{'top 15 ' + what:<72} {'ms':>9} {'%':>6} {'calls':>8}  category")
    for name, cats in sorted(by_name.items(), key=lambda kv: -sum(kv[1].values()))[:15]:
        ms = sum(cats.values())
        cat = cats.most_common(1)[0][0]
        print(f"  {name[:70]:<70} {ms:9.2f} {100 * ms / total:5.1f}% {calls[name]:8d}  {cat[0]}: {cat[1][:60]}")
    if cuda and timeline and args.block_kernels:
        print_block(timeline)
    print(flush=True)


def _period(names: list[str]) -> int:
    """The length of the run of kernel names that repeats from the middle of the forward (one block)."""
    mid = len(names) // 2
    for p in range(8, len(names) // 3):
        if names[mid:mid + p] == names[mid + p:mid + 2 * p]:
            return p
    return 0


def print_block(timeline) -> None:
    """One block's kernels from the middle of the device timeline, in launch order."""
    seq = sorted(timeline, key=lambda e: e.time_range.start)
    names = [e.name for e in seq]
    p = _period(names)
    if not p:
        print("\nblock kernels: no repeating block found in the timeline")
        return
    mid = len(seq) // 2
    block = seq[mid:mid + p]
    busy = sum(e.time_range.end - e.time_range.start for e in block)
    span = block[-1].time_range.end - block[0].time_range.start
    print(f"\none block's kernels (from the middle of the forward: {p} kernels, {busy / 1000:.3f} ms busy in a "
          f"{span / 1000:.3f} ms span)\n{'#':>3} {'us':>8} {'gap us':>7}  kernel")
    prev = None
    for i, e in enumerate(block):
        gap = "" if prev is None else f"{e.time_range.start - prev:7.1f}"
        print(f"{i:3d} {e.time_range.end - e.time_range.start:8.1f} {gap:>7}  {e.name[:100]}")
        prev = e.time_range.end
    print_gaps(seq)


def print_gaps(seq) -> None:
    """The forward's largest idle gaps (the GPU waiting on the host), with the kernels either side."""
    gaps, end = [], seq[0].time_range.end
    for i in range(1, len(seq)):
        gap = seq[i].time_range.start - end
        if gap > 0:
            gaps.append((gap, i))
        end = max(end, seq[i].time_range.end)
    total = sum(g for g, _ in gaps)
    print(f"\nidle gaps: {total / 1000:.2f} ms in {len(gaps)} (over 20 us: "
          f"{sum(g for g, _ in gaps if g > 20) / 1000:.2f} ms in {sum(g > 20 for g, _ in gaps)}); the largest:")
    for gap, i in sorted(gaps, reverse=True)[:12]:
        print(f"  {gap:8.1f} us before kernel {i}/{len(seq)}: {seq[i - 1].name[:45]} -> {seq[i].name[:45]}")


# --- the parent: one child per variant, the table ---------------------------------------------

def child_argv(args, key: str, ref: str | None, write_ref: bool, breakdown_child: bool = False,
               tokens: str | None = None) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", key, "--tokens", tokens or args.tokens,
            "--layers", str(args.layers), "--size", args.size, "--device", args.device, "--dtype", args.dtype,
            "--seed", str(args.seed), "--repeat", str(args.repeat), "--warmup", str(args.warmup),
            "--audio-tokens", str(args.audio_tokens), "--text-tokens", str(args.text_tokens),
            "--text-padding", str(args.text_padding)]
    if args.block_kernels:
        argv.append("--block-kernels")
    if ref:
        argv += ["--ref", ref]
    if write_ref:
        argv.append("--write-ref")
    if breakdown_child:
        argv.append("--breakdown-child")
    return argv


def run_child(argv: list[str], on_line, echo: bool = False) -> tuple[int, str]:
    """Run a child; each JSON line it prints goes to `on_line` as it comes, any other line to stdout
    when `echo`. Returns (exit code, the tail of its stderr)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        for line in proc.stdout:
            if line.startswith('{"kind"'):
                on_line(json.loads(line))
            elif echo:
                print(line, end="", flush=True)
        code = proc.wait()
        err.seek(0)
        return code, err.read()[-3000:]


def fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="6144,24576", help="video token counts, comma-separated")
    parser.add_argument("--layers", type=int, default=48, help="transformer blocks (LTXModel's default: 48)")
    parser.add_argument("--size", choices=("full", "tiny"), default="full",
                        help="full: LTXModel's default widths; tiny: 2 heads x 32 (CPU checks)")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--profile", action="append", default=[], metavar="P.toml", help="add a row per profile file")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--audio-tokens", type=int, default=126)
    parser.add_argument("--text-tokens", type=int, default=1024)
    parser.add_argument("--text-padding", type=int, default=0,
                        help="padded text tokens: a context mask, so the masked attention runs (default 0: no mask, "
                             "as LTX-2's pipelines call the DiT)")
    parser.add_argument("--per-tokens", action="store_true",
                        help="a process per (variant, token count), not one per variant")
    parser.add_argument("--breakdown", metavar="VARIANT", help="profile one forward of this variant instead")
    parser.add_argument("--block-kernels", action="store_true",
                        help="with --breakdown: list one block's kernels in launch order (duration, gap before), "
                             "then the forward's largest idle gaps")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ref", help=argparse.SUPPRESS)
    parser.add_argument("--write-ref", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--breakdown-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    keys = [k.strip() for k in args.variants.split(",") if k.strip()]
    unknown = [k for k in keys + ([args.breakdown] if args.breakdown else []) if unknown_key(k)]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; expected one of {', '.join(VARIANTS)}, each but "
                     f"{' and '.join(AS_BUILT)} optionally with :ablation suffixes ({', '.join(ABLATIONS)}), or "
                     f"profile:P.toml")
    for path in args.profile:
        if not os.path.isfile(path):
            parser.error(f"--profile {path}: no such file")
    if args.breakdown:
        def said(row: dict) -> None:
            if row["kind"] == "meta" and row.get("applied"):
                print(f"{variant_name(args.breakdown)}: {row['applied']}")
            elif row["kind"] == "error":
                print(f"{variant_name(args.breakdown)}: {row['error']}")

        code, err = run_child(child_argv(args, args.breakdown, None, False, breakdown_child=True), said, echo=True)
        if code:
            print(err, file=sys.stderr)
        return code
    keys = ["ltx2"] + [k for k in keys if k != "ltx2"] + [PROFILE_PREFIX + str(Path(p).resolve()) for p in args.profile]
    rows: list[dict] = []
    metas: dict[str, dict] = {}
    ends: dict[str, dict] = {}
    errors: list[dict] = []
    ref_s: dict[int, float] = {}
    header = f"{'tokens':>6}  {'variant':<34} {'s':>7} {'vs LTX-2':>8} {'peak GiB':>8} {'rel L2':>9} {'first s':>8} {'2nd s':>6} {'b2b s':>6}"

    def show(row: dict) -> None:
        name = variant_name(row["variant"])
        if row.get("error"):
            print(f"{row.get('tokens', ''):>6}  {name:<34} {row['error']}", flush=True)
            return
        ratio = ref_s[row["tokens"]] / row["s"] if row["tokens"] in ref_s else None
        print(f"{row['tokens']:>6}  {name:<34} {row['s']:7.3f} {fmt(ratio, '7.2f')}x {fmt(row['peak_gib'], '8.2f'):>8} "
              f"{fmt(row['rel_l2'], '9.2e'):>9} {row['first_s']:8.1f} {fmt(row.get('second_s'), '6.3f'):>6} {fmt(row.get('b2b_s'), '6.3f'):>6}"
              + ("" if row["finite"] else "  non-finite output!"), flush=True)

    def on_line(row: dict) -> None:
        kind = row.pop("kind")
        if kind == "meta":
            if not metas:
                params = f"{row['params'] / 1e9:.2f} B" if row["params"] >= 1e8 else f"{row['params'] / 1e6:.2f} M"
                print(f"LTX-2 LTXModel(num_layers={row['layers']}) ({args.size}): {params} parameters, "
                      f"{row['dtype']}, random weights (seed {args.seed}), built in {row['build_s']} s on "
                      f"{row['device']}, torch {row['torch']}; one forward at N video + {args.audio_tokens} audio + "
                      f"{args.text_tokens} text tokens ({f'{args.text_padding} padded, masked' if args.text_padding else 'no mask'}); median of {args.repeat} after {args.warmup} warm-up(s); "
                      f"{'a process per variant and token count' if args.per_tokens else 'a process per variant'}; "
                      f"vs LTX-2 = LTX-2's s / s; peak = max allocated during the timed forwards; rel L2 against "
                      f"LTX-2's bf16 eager forward (video + audio)")
                print(header, flush=True)
            metas[row["variant"]] = row
        elif kind == "row":
            if row["variant"] == "ltx2":
                ref_s[row["tokens"]] = row["s"]
            rows.append(row)
            show(row)
        elif kind == "error":
            errors.append(row)
            show(row)
        elif kind == "end":
            ends[row["variant"]] = row

    runs = [(key, n) for n in args.tokens.split(",") for key in keys] if args.per_tokens else \
        [(key, None) for key in keys]
    with tempfile.TemporaryDirectory(prefix="ltx2-dit-") as tmp:
        ref = os.path.join(tmp, "ref.pt")
        for key, n in runs:
            code, err = run_child(child_argv(args, key, ref, write_ref=key == "ltx2", tokens=n), on_line)
            if code:
                print(f"{'':>6}  {variant_name(key):<34} child failed (exit {code}):\n{err}", file=sys.stderr,
                      flush=True)
                if key == "ltx2":
                    return 1
    prints = [m["fingerprint"] for m in metas.values()]
    if prints and max(prints) - min(prints) > 1e-6 * max(abs(x) for x in prints):
        print("WARNING: the variants' processes built different weights: " +
              ", ".join(f"{k} {m['fingerprint']:.6g}" for k, m in metas.items()))
    tokens = [int(t) for t in args.tokens.split(",")]
    if len(tokens) > 1:
        print("\nby token count:")
        print(header)
        for n in tokens:
            for key in keys:
                for row in rows + errors:
                    if row["variant"] == key and row.get("tokens") == n:
                        show(row)
    print("\nvariants:")
    for key in keys:
        meta, end = metas.get(key, {}), ends.get(key, {})
        applied = meta.get("applied") or next((e["error"] for e in errors if e["variant"] == key and "tokens" not in e),
                                              "did not run")
        extra = f"; compile: {end['compile']}" if end.get("compile") else ""
        if key == "ltx2":
            extra += "; output RMS (video, audio): " + ", ".join(
                f"{r['tokens']} tokens " + " / ".join(f"{x:.3g}" for x in r["rms"])
                for r in rows if r["variant"] == key)
        apply_s = f" (applied in {meta['apply_s']} s)" if meta.get("apply_s") is not None else ""
        print(f"  {variant_name(key)}{apply_s}: {applied}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
