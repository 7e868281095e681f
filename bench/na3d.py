"""3D neighborhood attention forward: the LTX-2 DiffVAE shapes and small problems, every path.

Runs the yardstick (dense SDPA on (8, 32, 8192, 64) bf16) first, then on each shape every
backend asked for, and prints one row per (shape, backend): median ms, useful TFLOP/s, time /
yardstick, time / LTX-2's Triton fallback (same run), max abs error against an fp32 reference
(the tiled eager kernel on fp32 copies), and that error beyond what rounding the reference to
bf16 costs. Needs a CUDA device.

Backends: `triton` (kernels.na3d_triton called directly), `api` (the public
`backends.runtime.attention.na3d(..., backend="triton")`), `runtime` (`NAFunction("triton")`, the
callable the runtime installs on LTX-2's modules, called as LTX-2 calls it), `ltx2` (the Triton
fallback shipped with LTX-2: ltx-core from `$LTX2_CORE_SRC` or installed), `eager_sdpa`, `natten`.
Shapes `s*` are LTX-2's decoder at 1088x1920x121; `t*` are small problems (small grids, a causal
time axis, even windows, windows wider than 7). A call under a millisecond is timed in bursts of
back-to-back calls (`bench`), host work included. The last table is the per-call cost of each path
on a tiny problem (host-bound: microseconds per call, back to back).

    python bench/na3d.py [--shapes s1,t1,...] [--backends triton,api,runtime,ltx2,eager_sdpa,natten] [--sweep]
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.runtime import attention  # noqa: E402
from kernels.na3d_eager import na3d_eager  # noqa: E402
from kernels.na3d_triton import CONFIGS, na3d_triton, useful_flops  # noqa: E402

# id: ((T, H, W), heads, kernel, causal)
NO = (False, False, False)
SHAPES = {
    "s1": ((18, 34, 60), 32, (3, 7, 7), NO),
    "s2": ((18, 68, 120), 16, (3, 7, 7), NO),
    "s3": ((35, 68, 120), 8, (3, 5, 5), NO),
    "s5": ((48, 128, 128), 4, (3, 7, 7), NO),
    "t1": ((4, 8, 8), 8, (3, 3, 3), NO),  # a tiny grid
    "t2": ((5, 17, 30), 32, (3, 7, 7), NO),  # s1 at a quarter of the pixels
    "t3": ((8, 16, 16), 16, (3, 7, 7), (True, False, False)),  # causal time axis
    "t4": ((18, 34, 60), 32, (3, 7, 7), (True, False, False)),  # s1 with a causal time axis
    "t5": ((9, 24, 40), 16, (2, 4, 4), NO),  # even windows
    "t6": ((9, 34, 60), 8, (4, 6, 6), NO),  # even windows, larger
    "t7": ((9, 34, 60), 8, (3, 9, 9), NO),  # wider than 7
    "t8": ((9, 34, 60), 8, (3, 11, 13), NO),  # much wider than 7
}
# NATTEN hopper-fna time / yardstick and the target for ours: anchor figures measured by the
# project on an H200, 2026-11-30 (bench/RESULTS.md, "Anchored figures").
HOPPER_RATIO = {"s1": 0.372, "s2": 0.697, "s3": 0.671, "s5": 0.950}
TARGET_RATIO = {"s1": 0.186, "s2": 0.349, "s3": 0.325, "s5": 0.475}
HEAD_DIM = 64
TINY = ((3, 8, 8), 1, (3, 3, 3), NO)  # the per-call cost problem: the kernel itself takes a few us


BURST_MS = 1.0


def bench(fn) -> float:
    """Median ms per call. A call shorter than BURST_MS is timed in bursts of back-to-back calls
    (as the decoder makes them): the GPU stays busy, and a path whose host work outlasts its
    kernel is charged for it."""
    est = triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
    n = max(1, min(100, int(BURST_MS / max(est, 1e-3))))
    if n == 1:
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    return triton.testing.do_bench(lambda: [fn() for _ in range(n)], warmup=25, rep=200, return_mode="median") / n


def per_call_us(fn, calls: int = 2000) -> float:
    """Microseconds per call of `fn()` back to back (host-bound on a tiny problem)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


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
    return lambda q, k, v, ks, c: natten.na3d(q, k, v, ks, is_causal=c, scale=1.0)


def ltx2_fn():
    """LTX-2's own Triton NA fallback (ltx-core), or None where ltx-core is not importable."""
    core, _ = __import__("backends.runtime.ltx2", fromlist=["import_ltx_core"]).import_ltx_core()
    if core is None:
        return None
    from ltx_core.model.video_vae.transformer.fallback_na.triton_na import na3d as ltx2_na3d

    return lambda q, k, v, ks, c: ltx2_na3d(q, k, v, list(ks), is_causal=list(c), scale=1.0)


def runtime_fn():
    """NAFunction("triton") as LTX-2's modules call it: fn(attn, q, k, v), q pre-scaled."""
    fn = attention.NAFunction("triton")

    def run(q, k, v, ks, c):
        return fn(types.SimpleNamespace(kernel_size=ks, is_causal=c), q, k, v)
    return run


def backends() -> dict:
    return {
        "triton": lambda q, k, v, ks, c: na3d_triton(q, k, v, ks, scale=1.0, is_causal=c),
        "api": lambda q, k, v, ks, c: attention.na3d(q, k, v, ks, backend="triton", scale=1.0, is_causal=c),
        "runtime": runtime_fn(),
        "ltx2": ltx2_fn(),
        "eager_sdpa": lambda q, k, v, ks, c: na3d_eager(q, k, v, ks, scale=1.0, is_causal=c),
        "natten": natten_fn(),
    }


def inputs(spec, dtype=torch.bfloat16):
    """(shape, [q, k, v]): q and k carry the softmax scale (every backend runs with scale 1.0, as
    LTX-2 calls them), v is unit normal."""
    (t, h, w), heads, _, _ = spec
    shape = (1, t, h, w, heads, HEAD_DIM)
    return shape, [(torch.randn(shape, device="cuda") * s).to(dtype) for s in (HEAD_DIM ** -0.25,) * 2 + (1.0,)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--backends", default="triton,api,runtime,ltx2,eager_sdpa,natten")
    ap.add_argument("--sweep", action="store_true", help="also time every Triton tile config on each shape")
    args = ap.parse_args()
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, torch {torch.__version__}, triton {triton.__version__}")
    ys = yardstick()  # also brings the GPU's clocks up
    print(f"yardstick: dense SDPA (8, 32, 8192, 64) bf16 = {ys:.3f} ms "
          f"({4 * 8 * 32 * 8192 * 8192 * 64 / ys / 1e9:.0f} TFLOP/s)")
    fns = backends()
    wanted = [b for b in args.backends.split(",") if b]
    unknown = [b for b in wanted if b not in fns] + [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown {', '.join(unknown)}; backends: {', '.join(fns)}; shapes: {', '.join(SHAPES)}")
    header = (f"{'shape':<5} {'backend':<30} {'ms':>9} {'TFLOP/s':>8} {'t/yard':>7} {'x ltx2':>7} "
              f"{'max err':>9} {'excess':>9}")
    rows: list[tuple] = []  # (shape id, backend, ms or None, flops, max err, excess)
    for sid in args.shapes.split(","):
        spec = SHAPES[sid]
        shape, (q, k, v) = inputs(spec)
        _, _, ks, causal = spec
        ref = na3d_eager(q.float(), k.float(), v.float(), ks, scale=1.0, is_causal=causal)
        runs = [(name, fns[name]) for name in wanted]
        if args.sweep:
            runs += [(f"triton {c.TT}x{c.TH}x{c.TW} r{c.RH} w{c.num_warps} s{c.num_stages}",
                      (lambda c: lambda q, k, v, ks, cz: na3d_triton(q, k, v, ks, scale=1.0, is_causal=cz, config=c))(c))
                     for c in CONFIGS]
        print(f"{sid}: (T,H,W) {spec[0]}, heads {spec[1]}, kernel {ks}, causal {causal}", flush=True)
        for name, fn in runs:
            if fn is None:
                rows.append((sid, name, None, 0, 0.0, 0.0))
                continue
            out = fn(q, k, v, ks, causal)
            err, excess = errors(out, ref)
            rows.append((sid, name, bench(lambda: fn(q, k, v, ks, causal)), useful_flops(shape, ks), err, excess))
            print(f"  {name:<30} {rows[-1][2]:9.3f} ms", flush=True)
            del out
        q = k = v = ref = None  # free before the next shape
        torch.cuda.empty_cache()
    ltx2 = {sid: ms for sid, name, ms, *_ in rows if name == "ltx2" and ms}
    print("\n" + header)
    for sid, name, ms, flops, err, excess in rows:
        if ms is None:
            print(f"{sid:<5} {name:<30} {'unavailable':>9}")
            continue
        vs = f"{ms / ltx2[sid]:7.3f}" if sid in ltx2 else f"{'-':>7}"
        hopper = f"  {HOPPER_RATIO[sid] * ys / ms:5.2f}x hopper-fna" if sid in HOPPER_RATIO else ""
        print(f"{sid:<5} {name:<30} {ms:9.3f} {flops / ms / 1e9:8.1f} {ms / ys:7.3f} {vs} "
              f"{err:9.2e} {excess:9.2e}{hopper}")
    print(f"(yardstick {ys:.3f} ms; x ltx2 = time / LTX-2's Triton fallback on the same shape in this run; "
          "targets for s*: t/yard <= " + ", ".join(f"{s} {r}" for s, r in TARGET_RATIO.items())
          + "; max err = max |out - fp32 ref|; excess = beyond bf16 rounding of the ref)")
    overhead(fns, wanted)


def overhead(fns: dict, wanted: list[str]) -> None:
    """The per-call cost of each path on a tiny problem, back to back."""
    q, k, v = inputs(TINY)[1]
    _, _, ks, causal = TINY
    print(f"\nper-call cost on (1, {', '.join(map(str, TINY[0]))}, {TINY[1]}, {HEAD_DIM}) kernel {ks}: "
          "microseconds per call, 2000 calls back to back")
    costs = {}
    for name in wanted:
        fn = fns.get(name)
        if fn is not None and name != "eager_sdpa":
            costs[name] = per_call_us(lambda: fn(q, k, v, ks, causal))
    base = costs.get("triton")
    for name, us in costs.items():
        extra = f"  (+{us - base:.1f} us over the bare kernel call)" if base and name != "triton" else ""
        print(f"  {name:<10} {us:8.1f} us{extra}")


if __name__ == "__main__":
    main()
