"""The power limit at the DiT's 24576 tokens (CUDA): its fp8 self-attention (cuDNN, 32 x 128) and its
FF GEMM pair (fp8, 4096 -> 16384 -> 4096), each alone for `--seconds`, then interleaved, with the SM
clock, power and temperature read every 50 ms (`backends.machine.nvml`). Prints each phase's first
calls against its steady state (the median of its second half): a phase that settles slower at the
power limit is bound by energy, and two phases that take the sum of their times interleaved share
one energy budget.

    python bench/power_limit.py [--seconds 3]
"""
import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the repository's kernels, not bench/kernels.py
from backends.machine.nvml import NvmlSession  # noqa: E402
from backends.runtime import cudnn_fp8_attention as C  # noqa: E402
from kernels.scale_cast import to_e4m3  # noqa: E402

TOKENS, HEADS, HEAD_DIM, DIM, FF = 24576, 32, 128, 4096, 16384


def sample(session: NvmlSession, samples: list, stop: threading.Event) -> None:
    """(time, SM MHz, W, C) of GPU 0 every 50 ms until `stop`."""
    while not stop.is_set():
        d = session.device(0)
        samples.append((time.perf_counter(), d.get("sm_clock"), d.get("power_draw"), d.get("temperature")))
        time.sleep(0.05)


def phase(name: str, fn, seconds: float, samples: list) -> None:
    fn()
    torch.cuda.synchronize()
    t0, times = time.perf_counter(), []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    read = [s for s in samples if t0 <= s[0] <= time.perf_counter()]
    late = read[len(read) // 2:] or read
    clocks = [s[1] for s in read if s[1] is not None]
    print(f"{name:<22} n={len(times):4d} first5 {statistics.mean(times[:5]):8.3f} ms  "
          f"steady(median of 2nd half) {statistics.median(times[len(times) // 2:]):8.3f} ms  "
          f"SM MHz {min(clocks, default=0)}-{max(clocks, default=0)} "
          f"(2nd half mean {statistics.mean(s[1] or 0 for s in late):.0f})  "
          f"W mean {statistics.mean(s[2] or 0 for s in late):.0f}  temp {late[-1][3]} C", flush=True)
    time.sleep(2.0)  # between phases: a little cooling, as the block's own phases have none


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
    qk = torch.tensor([8 / 448, 8 / 448], device=dev)  # static q/k scales, as QKBound gives them
    q8, k8 = to_e4m3(q, qk[0]), to_e4m3(k, qk[1])
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

    for name, fn in (("attention alone", attention), ("FF GEMM pair alone", ff), ("attention + FF pair", both),
                     ("attention alone again", attention)):
        phase(name, fn, args.seconds, samples)
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
