"""3D neighborhood attention forward at the LTX-2 DiffVAE shapes (ratios to a same-run yardstick).

Runs the yardstick (dense SDPA on (8, 32, 8192, 64) bf16) first, then every available
backend on each shape, and prints one row per (shape, backend): median ms, useful TFLOP/s,
time / yardstick, max abs error against an fp32 reference (the tiled eager kernel on fp32
copies of the inputs), and that error beyond what rounding the reference to bf16 costs.
Needs a CUDA device.

    python bench/na3d.py [--shapes s1,s2,s3,s5] [--backends triton,eager_sdpa,natten] [--sweep]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernels.na3d_eager import na3d_eager  # noqa: E402
from kernels.na3d_triton import CONFIGS, na3d_triton, useful_flops  # noqa: E402

# id: ((T, H, W), heads, kernel)
SHAPES = {
    "s1": ((18, 34, 60), 32, (3, 7, 7)),
    "s2": ((18, 68, 120), 16, (3, 7, 7)),
    "s3": ((35, 68, 120), 8, (3, 5, 5)),
    "s5": ((48, 128, 128), 4, (3, 7, 7)),
}
# NATTEN hopper-fna time / yardstick and the target for ours: anchor figures measured by the
# project on an H200, 2026-11-30 (bench/RESULTS.md, "Anchored figures").
HOPPER_RATIO = {"s1": 0.372, "s2": 0.697, "s3": 0.671, "s5": 0.950}
TARGET_RATIO = {"s1": 0.186, "s2": 0.349, "s3": 0.325, "s5": 0.475}
HEAD_DIM = 64


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def yardstick() -> float:
    q, k, v = (torch.randn(8, 32, 8192, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return bench(lambda: F.scaled_dot_product_attention(q, k, v))


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max |out - ref|, max of that error beyond what rounding ref to out's dtype costs).

    A bf16 output cannot hold ref to better than half a bf16 ulp (7.8e-3 for |ref| in [2, 4)),
    so the second figure is the kernel's own error.
    """
    diff = (out.float() - ref).abs()
    floor = (ref.to(out.dtype).float() - ref).abs()
    return diff.max().item(), (diff - floor).max().item()


def natten_fn():
    try:
        import natten
    except ImportError:
        return None
    if not natten.HAS_LIBNATTEN:
        return None
    return lambda q, k, v, ks: natten.na3d(q, k, v, ks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--backends", default="triton,eager_sdpa,natten")
    ap.add_argument("--sweep", action="store_true", help="also time every Triton tile config on each shape")
    args = ap.parse_args()
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, torch {torch.__version__}, triton {triton.__version__}")
    ys = yardstick()
    print(f"yardstick: dense SDPA (8, 32, 8192, 64) bf16 = {ys:.3f} ms "
          f"({4 * 8 * 32 * 8192 * 8192 * 64 / ys / 1e9:.0f} TFLOP/s)")
    backends = {
        "triton": lambda q, k, v, ks: na3d_triton(q, k, v, ks),
        "eager_sdpa": lambda q, k, v, ks: na3d_eager(q, k, v, ks),
        "natten": natten_fn(),
    }
    wanted = [b for b in args.backends.split(",") if b]
    header = (f"{'shape':<5} {'backend':<30} {'ms':>9} {'TFLOP/s':>8} {'t/yard':>7} {'target':>7} "
              f"{'max err':>9} {'excess':>9}")
    rows = []
    for sid in args.shapes.split(","):
        (t, h, w), heads, ks = SHAPES[sid]
        shape = (1, t, h, w, heads, HEAD_DIM)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = na3d_eager(q.float(), k.float(), v.float(), ks)
        flops = useful_flops(shape, ks)
        runs = [(name, backends.get(name)) for name in wanted]
        if args.sweep:
            runs += [(f"triton {c.TT}x{c.TH}x{c.TW} r{c.RH} w{c.num_warps} s{c.num_stages}",
                      (lambda c: lambda q, k, v, ks: na3d_triton(q, k, v, ks, config=c))(c)) for c in CONFIGS]
        for name, fn in runs:
            if fn is None:
                rows.append(f"{sid:<5} {name:<30} {'unavailable':>9}")
                print(rows[-1], flush=True)
                continue
            out = fn(q, k, v, ks)
            err, excess = errors(out, ref)
            ms = bench(lambda: fn(q, k, v, ks))
            target = TARGET_RATIO[sid]
            rows.append(f"{sid:<5} {name:<30} {ms:9.3f} {flops / ms / 1e9:8.1f} {ms / ys:7.3f} {target:7.3f} "
                        f"{err:9.2e} {excess:9.2e}  {HOPPER_RATIO[sid] * ys / ms:5.2f}x hopper-fna")
            print(rows[-1], flush=True)
            del out
        del q, k, v, ref
        torch.cuda.empty_cache()
    print("\n" + header)
    print("\n".join(rows))
    print(f"(yardstick {ys:.3f} ms; target and hopper-fna's t/yard from the anchors in bench/RESULTS.md; "
          "max err = max |out - fp32 ref|; excess = max of that beyond bf16 rounding of the ref)")


if __name__ == "__main__":
    main()
