"""The ltx-pipelines (v1.2.0) command line and environment equivalent to a profile.

Options LTX-2 has no flag for are listed as comments, so nothing is dropped silently.
"""

from __future__ import annotations

from backends.config.options import Compile, OffloadMode, Profile, Quantization

LTX_QUANTIZATIONS = {Quantization.FP8_CAST, Quantization.FP8_SCALED_MM, Quantization.NVFP4_CAST,
                     Quantization.NVFP4_PREQUANT}
PIPELINE = "ltx_pipelines.distilled"


def _compile_flag(c: Compile) -> str:
    default = Compile(enabled=True)
    pairs = [f"{key}={str(getattr(c, key)).lower()}" for key in ("mode", "backend", "fullgraph", "dynamic", "capture")
             if getattr(c, key) != getattr(default, key)]
    return " ".join(["--compile", *pairs])


def ltx_args(profile: Profile, label: str = "profile") -> str:
    """A shell snippet: environment, the pipeline command with flags, and comments for the rest."""
    p = profile
    multi = p.parallel.gpus > 1
    env, flags, notes = [], [], []
    if p.memory.expandable_segments:
        env.append("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    if multi:
        devices = p.parallel.devices or tuple(range(p.parallel.gpus))
        env.append("export CUDA_VISIBLE_DEVICES=" + ",".join(map(str, devices)))
    elif p.parallel.devices:
        env.append(f"export CUDA_VISIBLE_DEVICES={p.parallel.devices[0]}")
    q = p.transformer.quantization
    if multi:
        if q is not Quantization.FP8_CAST or p.offload.mode is not OffloadMode.NONE:
            notes.append(f"transformer.quantization = {q}, offload.mode = {p.offload.mode}: the multi-GPU CLI "
                         "ignores --quantization and --offload (always fp8-cast, no offload)")
    else:
        if p.offload.mode is not OffloadMode.NONE:
            flags.append(f"--offload {p.offload.mode}")
        if q in LTX_QUANTIZATIONS:
            flags.append(f"--quantization {q}")
        elif q is not Quantization.NONE:
            notes.append(f"transformer.quantization = {q}: no ltx-pipelines flag (ltx-tui's runtime applies it)")
    if p.compile.enabled:
        flags.append(_compile_flag(p.compile))
    flags.append(f"--diffvae-optimization {p.diffvae.mode}")
    flags.append(f"--max-batch-size {p.memory.max_batch_size}")
    no_flag = [("diffvae.na_backend", p.diffvae.na_backend), ("diffvae.natten_kernel", p.diffvae.natten_kernel),
               ("transformer.attention", p.transformer.attention),
               ("transformer.sparse_attention", p.transformer.sparse_attention),
               ("transformer.sla_topk", p.transformer.sla_topk), ("transformer.fast_norm", p.transformer.fast_norm)]
    if p.offload.mode is not OffloadMode.NONE:
        no_flag += [("offload.gpu_slots", p.offload.gpu_slots), ("offload.prefetch", p.offload.prefetch)]
    notes += [f"{key} = {str(value).lower() if isinstance(value, bool) else value}: no ltx-pipelines flag"
              for key, value in no_flag]
    module = f"{PIPELINE}_mgpu" if multi else PIPELINE
    lines = [f"# ltx-pipelines v1.2.0 equivalent of {label} (use your pipeline module in place of {PIPELINE})"]
    lines += env
    lines.append(f"python -m {module} \\")
    lines += [f"    {f} \\" for f in flags[:-1]] + [f"    {flags[-1]}"]
    lines += [f"# {n}" for n in notes]
    return "\n".join(lines) + "\n"
