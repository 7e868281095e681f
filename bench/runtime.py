"""Quantized linears and offload streaming on a CUDA device, every figure from one run.

Part 1, linears at LTX-2 transformer sizes (weights 4096x4096 and 4096x16384, 8192 and 32768
tokens): bf16 `F.linear` against ltx-tui's fp8-scaled-mm and int8-w8a8 linears, activation
quantization included (and the bare GEMMs, for reference). Targets at 8192x4096x16384:
fp8-scaled-mm >= 1.6x and int8-w8a8 >= 1.5x faster than bf16.

Part 2, offload cpu (gpu_slots 2, prefetch 2) on a stack of MLP blocks (4096 -> 16384 ->
4096, bf16): forward time against max(resident forward, host->device copy of the streamed
weights from pinned memory). Target: <= 1.1x, i.e. transfers hidden.

    python bench/runtime.py [--blocks 8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.runtime.modules import BlockStack  # noqa: E402
from backends.runtime.offload import BlockStreamer  # noqa: E402
from backends.runtime.quant import FP8ScaledMMLinear, Int8Linear  # noqa: E402
from kernels.int8_gemm import int8_linear, quantize_rows  # noqa: E402

SIZES = [(8192, 4096, 4096), (8192, 4096, 16384), (32768, 4096, 4096), (32768, 4096, 16384)]


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def rel_err(out, ref) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def linears() -> list[str]:
    rows = []
    for m, k, n in SIZES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        w = lin.weight
        fp8, int8 = FP8ScaledMMLinear(lin), Int8Linear(lin)
        ref = F.linear(x, w)
        t_bf16 = bench(lambda: F.linear(x, w))
        t_fp8 = bench(lambda: fp8(x))
        t_int8 = bench(lambda: int8(x))
        xq8, xs8 = quantize_rows(x, torch.float8_e4m3fn)
        xqi, xsi = quantize_rows(x, torch.int8)
        t_fp8_mm = bench(lambda: torch._scaled_mm(xq8, fp8.weight.t(), scale_a=xs8[:, None],
                                                  scale_b=fp8.weight_scale[None, :], out_dtype=torch.bfloat16))
        t_int8_mm = bench(lambda: int8_linear(xqi, xsi, int8.weight, int8.weight_scale))
        t_quant = bench(lambda: quantize_rows(x, torch.int8))
        tf = 2 * m * k * n / 1e9
        size = f"{m}x{k}x{n}"
        rows.append(f"{size:<18} {'bf16 F.linear':<26} {t_bf16:8.3f} {tf / t_bf16:7.0f} {'1.00x':>7} {'-':>9}")
        rows.append(f"{size:<18} {'fp8-scaled-mm linear':<26} {t_fp8:8.3f} {tf / t_fp8:7.0f} "
                    f"{t_bf16 / t_fp8:6.2f}x {rel_err(fp8(x), ref):9.2e}")
        rows.append(f"{size:<18} {'int8-w8a8 linear':<26} {t_int8:8.3f} {tf / t_int8:7.0f} "
                    f"{t_bf16 / t_int8:6.2f}x {rel_err(int8(x), ref):9.2e}")
        rows.append(f"{size:<18} {'  fp8 _scaled_mm only':<26} {t_fp8_mm:8.3f} {tf / t_fp8_mm:7.0f} "
                    f"{t_bf16 / t_fp8_mm:6.2f}x {'-':>9}")
        rows.append(f"{size:<18} {'  int8 GEMM only':<26} {t_int8_mm:8.3f} {tf / t_int8_mm:7.0f} "
                    f"{t_bf16 / t_int8_mm:6.2f}x {'-':>9}")
        rows.append(f"{size:<18} {'  row quantization only':<26} {t_quant:8.3f} {'-':>7} {'-':>7} {'-':>9}")
        for r in rows[-6:]:
            print(r, flush=True)
        del x, lin, fp8, int8, ref
        torch.cuda.empty_cache()
    return rows


def stack(depth: int) -> BlockStack:
    torch.manual_seed(0)
    return BlockStack([torch.nn.Sequential(torch.nn.Linear(4096, 16384, bias=False), torch.nn.GELU(),
                                           torch.nn.Linear(16384, 4096, bias=False)) for _ in range(depth)]
                      ).to(torch.bfloat16)


def _forward_stats(model, x) -> tuple[float, int, torch.Tensor]:
    """(median ms, peak bytes allocated during a forward, output)."""
    with torch.no_grad():
        t = bench(lambda: model(x))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = model(x)
        torch.cuda.synchronize()
    return t, torch.cuda.max_memory_allocated(), out


def offload(depth: int) -> list[str]:
    rows = []
    inputs = {tokens: torch.randn(tokens, 4096, device="cuda", dtype=torch.bfloat16) for tokens in (8192, 32768)}
    resident = stack(depth).cuda()
    res = {tokens: _forward_stats(resident, x) for tokens, x in inputs.items()}
    del resident
    torch.cuda.empty_cache()
    streamed = stack(depth)
    streamer = BlockStreamer(streamed.transformer_blocks, "cuda", gpu_slots=2, prefetch=2)
    # Host -> device copy of every streamed block from pinned memory, back to back on one stream.
    dst = torch.empty(streamer.slot_bytes, dtype=torch.uint8, device="cuda")

    def copy_all():
        for h in streamer.hosts:
            dst[:h.numel()].copy_(h, non_blocking=True)
    t_copy = bench(copy_all)
    del dst
    torch.cuda.empty_cache()
    gbs = streamer.streamed_bytes / t_copy / 1e6
    rows.append(f"offload: {depth} blocks, {streamer.streamed_bytes / 2**30:.2f} GiB streamed; pinned H2D copy "
                f"{t_copy:.2f} ms ({gbs:.1f} GB/s); gpu_slots 2 of {streamer.slot_bytes / 2**20:.0f} MiB, "
                f"prefetch {streamer.prefetch}")
    print(rows[-1], flush=True)
    for tokens, x in inputs.items():
        t_res, peak_res, ref = res[tokens]
        t_off, peak_off, out = _forward_stats(streamed, x)
        floor = max(t_res, t_copy)
        rows.append(f"tokens {tokens:>6}: resident {t_res:8.2f} ms  offload cpu {t_off:8.2f} ms  copy {t_copy:8.2f} ms"
                    f"  offload/max(resident, copy) = {t_off / floor:.3f} (target <= 1.1)  identical: "
                    f"{torch.equal(out, ref)}  peak GPU memory {peak_res / 2**30:.2f} -> {peak_off / 2**30:.2f} GiB")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--skip-linears", action="store_true")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    header = f"{'M x K x N':<18} {'linear':<26} {'ms':>8} {'TFLOP/s':>7} {'speedup':>7} {'rel err':>9}"
    rows = [] if args.skip_linears else linears()
    off = offload(args.blocks)
    print("\n" + header)
    print("\n".join(rows))
    print("\n".join(off))


if __name__ == "__main__":
    main()
