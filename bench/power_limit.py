"""The power limit at the DiT's 24576 tokens (CUDA): its fp8 self-attention (cuDNN, 32 x 128) and its
FF GEMM pair (fp8, 4096 -> 16384 -> 4096), each alone for `--seconds`, then interleaved, with the SM
clock, power and temperature read every 50 ms (`backends.machine.nvml`) and the energy each call
draws (NVML's energy counter over the phase's second half). Prints each phase's first calls against
its steady state (the median of its second half): a phase that settles slower at the power limit is
bound by energy, and two phases that take the sum of their times interleaved share one energy
budget; there the joules a call draws, not its time alone, say which kernel is the cheaper. Where
FlashAttention 3 is importable (`flash_attn_interface`, or the forward-only `fa3_fwd_interface`),
its fp8 forward runs the same self-attention and the video-text cross-attention (24576 x 1024) beside
cuDNN's, each with what the block would add around it: v's quantization (cuDNN's call does the same)
and the row quantization of FA3's bf16 output for `to_out` (cuDNN writes those fp8 rows itself).

    python bench/power_limit.py [--seconds 3]
"""
import argparse
import importlib
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the repository's kernels, not bench/kernels.py
from backends.machine.nvml import NvmlSession  # noqa: E402
from backends.runtime import cudnn_fp8_attention as C  # noqa: E402
from kernels import fp8_qkv  # noqa: E402
from kernels.int8_gemm import quantize_rows  # noqa: E402
from kernels.scale_cast import to_e4m3  # noqa: E402

TOKENS, TEXT, HEADS, HEAD_DIM, DIM, FF = 24576, 1024, 32, 128, 4096, 16384


def sample(session: NvmlSession, samples: list, stop: threading.Event) -> None:
    """(time, SM MHz, W, C) of GPU 0 every 50 ms until `stop`."""
    while not stop.is_set():
        d = session.device(0)
        samples.append((time.perf_counter(), d.get("sm_clock"), d.get("power_draw"), d.get("temperature")))
        time.sleep(0.05)


def phase(name: str, fn, seconds: float, samples: list, session: NvmlSession) -> None:
    fn()
    torch.cuda.synchronize()
    t0, times, half = time.perf_counter(), [], None
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
        if half is None and time.perf_counter() - t0 >= seconds / 2:
            half = (len(times), session.energy_j(0))
    end = session.energy_j(0)
    joules = ("-" if half is None or half[1] is None or end is None or len(times) == half[0]
              else f"{(end - half[1]) / (len(times) - half[0]):7.3f}")
    read = [s for s in samples if t0 <= s[0] <= time.perf_counter()]
    late = read[len(read) // 2:] or read
    clocks = [s[1] for s in read if s[1] is not None]
    print(f"{name:<30} n={len(times):4d} first5 {statistics.mean(times[:5]):8.3f} ms  "
          f"steady(median of 2nd half) {statistics.median(times[len(times) // 2:]):8.3f} ms  J/call {joules}  "
          f"SM MHz {min(clocks, default=0)}-{max(clocks, default=0)} "
          f"(2nd half mean {statistics.mean(s[1] or 0 for s in late):.0f})  "
          f"W mean {statistics.mean(s[2] or 0 for s in late):.0f}  temp {late[-1][3]} C", flush=True)
    time.sleep(2.0)  # between phases: a little cooling, as the block's own phases have none


def flash_attention_3():
    """FlashAttention 3's interface module, or None where neither package is importable."""
    for name in ("flash_attn_interface", "fa3_fwd_interface"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("power_limit: needs a CUDA GPU (torch sees none here)")
    session = NvmlSession()
    info = session.system()
    if not info["available"]:
        sys.exit(f"power_limit: NVML is not usable here ({info['reason']}); it reads the clock and power")
    samples, stop = [], threading.Event()
    threading.Thread(target=sample, args=(session, samples, stop), daemon=True).start()

    dev = torch.device("cuda")
    q, k, v = (torch.randn(1, TOKENS, HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16) for _ in range(3))
    kt, vt = (torch.randn(1, TEXT, HEADS, HEAD_DIM, device=dev, dtype=torch.bfloat16) for _ in range(2))
    qk = torch.tensor([8 / 448, 8 / 448], device=dev)  # static q/k scales, as QKBound gives them
    q8, k8, kt8 = (to_e4m3(t, qk[0]) for t in (q, k, kt))
    x8, h8 = (torch.randn(TOKENS, n, device=dev).to(torch.float8_e4m3fn) for n in (DIM, FF))
    w1, w2 = (torch.randn(o, i, device=dev).to(torch.float8_e4m3fn) for o, i in ((FF, DIM), (DIM, FF)))
    rows, s1, s2 = torch.ones(TOKENS, 1, device=dev), torch.ones(1, FF, device=dev), torch.ones(1, DIM, device=dev)

    def attention():
        C.sdpa_fp8_rows(q8, k8, v, None, qk)

    def ff():
        torch._scaled_mm(x8, w1.t(), rows, s1, out_dtype=torch.bfloat16, use_fast_accum=True)
        torch._scaled_mm(h8, w2.t(), rows, s2, out_dtype=torch.bfloat16, use_fast_accum=True)

    def both():
        attention()
        ff()

    def text():
        C.sdpa_fp8_rows(q8, kt8, vt, None, qk)

    phases = [("attention alone", attention), ("FF GEMM pair alone", ff), ("attention + FF pair", both),
              ("text cross-attention", text)]
    fa3 = flash_attention_3()
    if fa3 is None:
        print("FlashAttention 3: neither flash_attn_interface nor fa3_fwd_interface is importable; cuDNN only")
    else:
        descale = torch.full((1, HEADS), 8 / 448, device=dev)

        def fa3_call(keys, values):
            # what the block would run: v quantized as cuDNN's call does it, and FA3's bf16 O to the fp8
            # rows to_out takes (cuDNN writes those itself)
            _, _, v8q, scalars, _ = fp8_qkv.quantize_qkv(q8, keys, values, C.P_SCALE, C.O_HEADROOM, 0, qk)
            dv = fp8_qkv.scalar(scalars, fp8_qkv.V).reshape(1, 1).expand(1, HEADS)
            out = fa3.flash_attn_func(q8, keys, v8q, q_descale=descale, k_descale=descale, v_descale=dv)
            quantize_rows((out[0] if isinstance(out, tuple) else out).view(TOKENS, DIM), torch.float8_e4m3fn)

        def fa3_attention():
            fa3_call(k8, v)

        def fa3_both():
            fa3_attention()
            ff()

        def fa3_text():
            fa3_call(kt8, vt)

        phases += [("FA3 fp8 attention alone", fa3_attention), ("FA3 fp8 attention + FF pair", fa3_both),
                   ("FA3 fp8 text cross-attention", fa3_text)]
    for name, fn in phases + [("attention alone again", attention)]:
        try:
            phase(name, fn, args.seconds, samples, session)
        except (RuntimeError, TypeError, ValueError) as exc:  # e.g. a FA3 build without fp8 or this head_dim
            print(f"{name:<30} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
