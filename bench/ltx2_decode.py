"""LTX-2's real DiffusionVideoDecoder end to end: LTX-2's own NA paths vs profiles applied by ltx-tui.

Full-size `DiffusionVideoDecoder()` (default config, 104.8 M parameters), bf16, random weights
(the zero-initialised AdaLN tables given weight), on one CUDA device. For each latent, in one
run: LTX-2's `chunked_eager` as its pipeline installs it (`apply_diffvae_mode`; without natten
that is its TritonNaAttention, compile off) is the reference; then LTX-2's EagerSdpaAttention
and each profile ltx-tui's runtime applies (`apply_profile`). One warm-up decode (compiles),
then the median of --repeat timed decodes; peak = torch.cuda.max_memory_allocated during one
decode; max diff against LTX-2's output in the same layout (chunked or combined; same noise),
speed-up against LTX-2's chunked_eager.

    LTX2_CORE_SRC=.../ltx-core/src python bench/ltx2_decode.py [--latents 16x16x24,16x32x48] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.config.options import Profile  # noqa: E402
from backends.runtime import apply as runtime_apply  # noqa: E402
from backends.runtime import ltx2  # noqa: E402
from backends.runtime.apply import apply_profile  # noqa: E402

GIB = 1024**3
PROFILES = {
    "ltx-tui chunked_eager triton": {"diffvae.mode": "chunked_eager", "diffvae.na_backend": "triton"},
    "ltx-tui chunked_compile triton": {"diffvae.mode": "chunked_compile", "diffvae.na_backend": "triton"},
    "ltx-tui combined_compile triton": {"diffvae.mode": "combined_compile", "diffvae.na_backend": "triton"},
}

# --ablation: what each part of ltx-tui's chunked_compile (runtime.ltx2.ChunkedCompile) is worth
ABLATION = {
    "chunked_compile: slabs only": ltx2.ChunkedCompile(det_stages=False, inject=False, static_shapes=False),
    "chunked_compile: + det stages": ltx2.ChunkedCompile(inject=False, static_shapes=False),
    "chunked_compile: + det, static": ltx2.ChunkedCompile(inject=False),
    "chunked_compile: LTX-2's slab body": ltx2.ChunkedCompile(fused_qk=False),
    "chunked_compile: LTX-2's MLP tile": ltx2.ChunkedCompile(mlp_tile=None, fused_mlp=False),
    "chunked_compile: LTX-2's stage-5 MLP": ltx2.ChunkedCompile(fused_mlp=False),
    "chunked_compile: LTX-2's det RoPE": ltx2.ChunkedCompile(fused_det=False),
}


def ablated(recipe: ltx2.ChunkedCompile):
    """Install chunked_compile through apply_profile with `recipe` in place of the default."""
    def install(decoder):
        layout = runtime_apply.apply_decoder_layout
        runtime_apply.apply_decoder_layout = functools.partial(layout, chunked=recipe)
        try:
            apply_profile(decoder, Profile().replace(**PROFILES["ltx-tui chunked_compile triton"]), device="cuda")
        finally:
            runtime_apply.apply_decoder_layout = layout
        return decoder
    return install


def ltx2_own(decoder, kind: str):
    """LTX-2's own installers: its chunked_eager mode (Triton fallback here), its eager SDPA NA, or
    its TritonNaAttention in the combined layout the decoder is built with."""
    from ltx_core.model.video_vae.transformer.apply import apply_diffvae_config, apply_diffvae_mode
    from ltx_core.model.video_vae.transformer.config import DiffVAEMode, NAttentionKind
    from ltx_core.model.video_vae.transformer.fallback_na import TritonNaAttention

    if kind == "triton":
        apply_diffvae_mode(decoder, DiffVAEMode.CHUNKED_EAGER)
    elif kind == "combined":
        for m in decoder.modules():
            if hasattr(m, "kernel_size") and hasattr(m, "attention_function"):
                m.attention_function = TritonNaAttention()
    else:
        import dataclasses
        apply_diffvae_config(decoder, dataclasses.replace(DiffVAEMode.CHUNKED_EAGER.resolve(),
                                                          attention=NAttentionKind.EAGER_SDPA, natten_backend=None))
    return decoder


def decode(decoder, latent):
    with torch.inference_mode():
        out = decoder(latent, generator=torch.Generator("cuda").manual_seed(7))
    torch.cuda.synchronize()
    return out


def measure(decoder, latent, repeat: int):
    t0 = time.perf_counter()
    out = decode(decoder, latent)  # warm-up: autotune and compile
    warm = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        decode(decoder, latent)
        times.append(time.perf_counter() - t0)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    decode(decoder, latent)
    peak = torch.cuda.max_memory_allocated()
    return out, statistics.median(times), peak, peak - base, warm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latents", default="16x16x24,16x32x48", help="F x H x W of each latent (128 channels)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated variant names to run (default: all)")
    parser.add_argument("--no-eager", action="store_true", help="skip LTX-2's eager SDPA row (slow)")
    parser.add_argument("--ablation", action="store_true", help="also time chunked_compile with parts left out")
    parser.add_argument("--breakdown", action="store_true", help="print the top CUDA kernels of each variant")
    args = parser.parse_args()
    core, why = ltx2.import_ltx_core()
    if core is None:
        sys.exit(f"bench/ltx2_decode.py: {why}")
    from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder

    torch.manual_seed(0)
    base = ltx2.wake_zero_tables(DiffusionVideoDecoder().eval()).to("cuda", torch.bfloat16)
    print(f"DiffusionVideoDecoder(): {sum(p.numel() for p in base.parameters()) / 1e6:.1f} M parameters, bf16, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    variants = {"LTX-2 chunked_eager (TritonNaAttention)": lambda d: ltx2_own(d, "triton"),
                "LTX-2 chunked_eager (EagerSdpaAttention)": lambda d: ltx2_own(d, "eager"),
                "LTX-2 combined, eager (TritonNaAttention)": lambda d: ltx2_own(d, "combined")}
    variants.update({name: (lambda values: lambda d: apply_profile(d, Profile().replace(**values), device="cuda") and d)(v)
                     for name, v in PROFILES.items()})
    if args.ablation:
        variants.update({name: ablated(recipe) for name, recipe in ABLATION.items()})
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    print(f"{'latent':<14} {'variant':<42} {'s':>7} {'peak GiB':>9} {'act GiB':>8} {'max diff':>9} "
          f"{'speed-up':>8} {'warm-up s':>9}")
    for spec in args.latents.split(","):
        f, h, w = (int(x) for x in spec.split("x"))
        latent = torch.randn(1, 128, f, h, w, generator=torch.Generator().manual_seed(3)).to("cuda", torch.bfloat16)
        refs: dict[str, torch.Tensor] = {}  # the LTX-2 output of each layout
        ref_s = None
        for name, install in variants.items():
            if only and name not in only and "TritonNaAttention" not in name:
                continue
            if args.no_eager and "EagerSdpa" in name:
                continue
            decoder = install(copy.deepcopy(base))
            try:
                out, seconds, peak, act, warm = measure(decoder, latent, args.repeat)
            except torch.OutOfMemoryError:
                print(f"{spec:<14} {name:<42} out of memory")
                continue
            except Exception as e:  # noqa: BLE001 - a failing variant is a result; the others still run
                print(f"{spec:<14} {name:<42} failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
                continue
            if args.breakdown and not name.startswith("LTX-2"):
                from torch.profiler import ProfilerActivity, profile

                t0 = time.perf_counter()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    decode(decoder, latent)
                wall = time.perf_counter() - t0
                print(f"{name}: {wall:.3f} s wall, profiled (its GPU time: 'Self CUDA time total' below)")
                print(prof.key_averages().table(sort_by="device_time_total", row_limit=40, max_name_column_width=90))
            layout = "combined" if "combined" in name else "chunked"
            refs.setdefault(layout, out.float())
            ref_s = ref_s or seconds
            diff = (out.float() - refs[layout]).abs().max().item()
            print(f"{spec:<14} {name:<42} {seconds:7.3f} {peak / GIB:9.2f} {act / GIB:8.2f} {diff:9.2e} "
                  f"{ref_s / seconds:7.2f}x {warm:9.1f}", flush=True)
            del decoder, out
            gc.collect()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
