"""Compile paid once: the first compiled call in a fresh process, without and with ltx-tui's
persistent torch.compile caches (`backends.runtime.compile_cache`).

    python bench/compile_cache.py [--what decoder,dit] [--resolution 768x512] [--frames 121]

For each model, three fresh processes in a row share one new, empty cache directory: the first
compiles everything (warmup_s), the next two compile from the caches (warmup_cached_s). Each
prints its first call (compile + run) and its second call (steady). The decoder is LTX-2's
full-size DiffusionVideoDecoder() laid out chunked_compile by `apply_profile`; the DiT two full
width LTX-2 transformer blocks compiled per block (compile.mode default). Random weights.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(what: str, width: int, height: int, frames: int) -> dict:
    import torch

    from backends.config import ltx2_shapes as S
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.options import Profile
    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile

    shapes, device, dtype = RunShapes(width, height, frames), "cuda", torch.bfloat16
    core, why = ltx2.import_ltx_core()
    if core is None:
        raise SystemExit(why)
    torch.manual_seed(0)
    if what == "decoder":
        from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder

        with torch.device(device):
            model = DiffusionVideoDecoder(head_dim=S.VAE_HEAD_DIM, stage_channels=(*S.VAE_STAGE_CHANNELS, S.VAE_STAGE5[0]),
                                          stage_depths=(*S.VAE_STAGE_DEPTHS, S.VAE_STAGE5[1]))
        model = ltx2.wake_zero_tables(model.eval()).to(device=device, dtype=dtype)
        latent = torch.randn(1, 128, *shapes.latent, device=device, dtype=dtype)
        profile = Profile().replace(**{"diffvae.mode": "chunked_compile"})

        def call():
            return model(latent, generator=torch.Generator(device).manual_seed(1))
    else:
        from ltx_core.model.transformer.model import LTXModel, LTXModelType

        with torch.device(device):
            model = LTXModel(model_type=LTXModelType.VideoOnly, num_layers=2, num_attention_heads=S.DIT_HEADS,
                             attention_head_dim=S.DIT_HEAD_DIM, cross_attention_dim=S.DIT_HEADS * S.DIT_HEAD_DIM)
        model = ltx2.wake_zero_tables(model.eval()).to(device=device, dtype=dtype)
        inputs = ltx2.transformer_inputs(tokens=shapes.dit_tokens, context=S.TEXT_TOKENS, device=device, dtype=dtype,
                                         channels=128, context_dim=S.DIT_HEADS * S.DIT_HEAD_DIM, with_audio=False)
        profile = Profile().replace(**{"compile.enabled": True})

        def call():
            return model(*inputs)
    report = apply_profile(model, profile, device=device)
    times = []
    with torch.inference_mode():
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    health = report.compile_health()
    return {"what": what, "first_s": round(times[0], 3), "second_s": round(times[1], 3),
            "compile": str(health) if health else None,
            "caches": {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", default="decoder,dit")
    parser.add_argument("--resolution", default="768x512")
    parser.add_argument("--frames", type=int, default=121)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    width, height = (int(x) for x in args.resolution.split("x"))
    if args.child:
        print(json.dumps(child(args.child, width, height, args.frames)), flush=True)
        return 0
    print(f"{'model':<8} {'process':>7} {'cache':<6} {'first call s':>12} {'second call s':>13}  compile")
    for what in args.what.split(","):
        with tempfile.TemporaryDirectory(prefix="ltx-tui-cache-") as home:
            env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
            env["XDG_CACHE_HOME"] = home  # empty: the first process compiles everything
            rows = []
            for i in range(args.processes):
                out = subprocess.run([sys.executable, __file__, "--child", what, "--resolution", args.resolution,
                                      "--frames", str(args.frames)], env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(out.stderr[-2000:], file=sys.stderr)
                    return 1
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(f"{what:<8} {i + 1:>7} {'empty' if i == 0 else 'warm':<6} {row['first_s']:>12.3f} "
                      f"{row['second_s']:>13.3f}  {row['compile']}", flush=True)
            cold, warm = rows[0]["first_s"], min(r["first_s"] for r in rows[1:])
            print(f"{what:<8} warmup_s {cold:.2f}, warmup_cached_s {warm:.2f} ({warm / cold:.0%} of the first process's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
