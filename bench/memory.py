"""Predicted vs measured GPU memory per stage of an LTX-2 v1.2.0 run (backends.config.memory).

On one CUDA device, with LTX-2's real modules at full size and random weights: the DiT
(`LTXModel()`, 48 blocks, 18.8 B parameters, bf16, made on the meta device and filled on the
GPU) runs one forward at the run's tokens with 1024 text tokens; the DiffVAE decoder
(`DiffusionVideoDecoder()`) decodes the run's latent; both laid out by `apply_profile` with
each profile. Measured = `torch.cuda.max_memory_allocated` of the stage (weights included),
against the plan's prediction for the stage. The text encoder needs Gemma's checkpoint and
`transformers`: not measured here.

    LTX2_CORE_SRC=.../src python bench/memory.py [--runs 768x512x121,1024x576x121,1536x1024x121]
        [--profiles default,fp8] [--stages dit,decode] [--dry-run]
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.config import ltx2_shapes as S  # noqa: E402
from backends.config.ltx2_shapes import RunShapes  # noqa: E402
from backends.config.memory import GIB, plan_memory  # noqa: E402
from backends.config.options import Profile  # noqa: E402
from backends.config.plan import resolve  # noqa: E402
from backends.machine.capability import probe  # noqa: E402
from backends.machine.presets import preset  # noqa: E402

PROFILES = {
    "default": {},
    "fp8": {"transformer.quantization": "fp8-cast", "diffvae.mode": "combined_compile", "diffvae.na_backend": "triton"},
    "chunked_compile": {"diffvae.mode": "chunked_compile", "diffvae.na_backend": "triton"},
    "offload": {"offload.mode": "cpu", "offload.gpu_slots": 2},
}
STAGE = {"dit": "DiT denoising", "decode": "DiffVAE decode"}


def run_shapes(text: str) -> RunShapes:
    w, h, f = (int(x) for x in text.split("x"))
    return RunShapes(w, h, f)


def measure_dit(profile: Profile, shapes: RunShapes) -> int:
    import torch
    from ltx_core.model.transformer.model import LTXModel

    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile

    with torch.device("meta"):
        model = LTXModel().to(torch.bfloat16)
    device = "cpu" if profile.offload.mode.value != "none" else "cuda"
    model = model.to_empty(device=device)
    with torch.no_grad():
        g = torch.Generator(device).manual_seed(0)
        for p in model.parameters():
            p.normal_(0, 0.02, generator=g)
        for b in model.buffers():
            b.zero_()
    model = ltx2.wake_zero_tables(model.eval())
    # audio: ~25 latent tokens per second of a 24 fps clip (126 for 121 frames), LTX-2's default widths
    video, audio, _ = ltx2.transformer_inputs(tokens=shapes.dit_tokens, audio_tokens=126, context=S.TEXT_TOKENS,
                                              device="cuda", dtype=torch.bfloat16, channels=128,
                                              context_dim=S.DIT_HEADS * S.DIT_HEAD_DIM, audio_channels=128,
                                              audio_context_dim=2048)
    apply_profile(model, profile, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        model(video, audio, None)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del model, video, audio
    return peak


def measure_decode(profile: Profile, shapes: RunShapes) -> int:
    import torch
    from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder

    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile

    torch.manual_seed(0)
    decoder = ltx2.wake_zero_tables(DiffusionVideoDecoder().eval()).to("cuda", torch.bfloat16)
    apply_profile(decoder, profile, device="cuda")
    latent = torch.randn(1, 128, *shapes.latent, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        decoder(latent, generator=torch.Generator("cuda").manual_seed(1))  # warm-up (compiles)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = decoder(latent, generator=torch.Generator("cuda").manual_seed(1))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - out.numel() * out.element_size()  # the output is the caller's
    del decoder, out
    return peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="768x512x121,1024x576x121,1536x1024x121")
    parser.add_argument("--profiles", default="default,fp8")
    parser.add_argument("--stages", default="dit,decode")
    parser.add_argument("--dry-run", action="store_true", help="print the predictions only (no GPU)")
    args = parser.parse_args()
    if not args.dry_run:
        from backends.runtime import ltx2

        core, why = ltx2.import_ltx_core()
        if core is None:
            sys.exit(f"bench/memory.py: {why}")
    print(f"{'stage':<16} {'run':<16} {'profile':<16} {'predicted GiB':>13} {'measured GiB':>12} {'error %':>8}")
    here = preset("h200") if args.dry_run else probe()  # the predictions are for this machine's plan
    for name in args.profiles.split(","):
        profile = Profile().replace(**PROFILES[name])
        for spec in args.runs.split(","):
            shapes = run_shapes(spec)
            plan = {s.stage: s for s in plan_memory(resolve(profile, here), shapes, None).stages}
            for key in args.stages.split(","):
                predicted = plan[STAGE[key]].peak_bytes
                measured = None
                if not args.dry_run:
                    import torch

                    try:
                        measured = (measure_dit if key == "dit" else measure_decode)(profile, shapes)
                    except torch.OutOfMemoryError:
                        print(f"{STAGE[key]:<16} {shapes.label:<16} {name:<16} {predicted / GIB:13.2f} "
                              f"{'OOM':>12}")
                        continue
                    finally:
                        gc.collect()
                        torch.cuda.empty_cache()
                shown = f"{measured / GIB:12.2f} {100 * (predicted - measured) / measured:+8.1f}" if measured else \
                    f"{'-':>12} {'-':>8}"
                print(f"{STAGE[key]:<16} {shapes.label:<16} {name:<16} {predicted / GIB:13.2f} {shown}", flush=True)


if __name__ == "__main__":
    main()
