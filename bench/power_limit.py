"""The power limit at the DiT's 24576 tokens (CUDA): its fp8 self-attention (cuDNN, 32 x 128) and its
FF GEMM pair (fp8, 4096 -> 16384 -> 4096), each alone for `--seconds`, then interleaved, with the SM
clock, power and temperature sampled by NVML every 50 ms. Prints each phase's first calls against its
steady state (the median of its second half): a phase that settles slower at the power limit is bound
by energy, and two phases that take the sum of their times interleaved share one energy budget.

    python bench/power_limit.py [--seconds 3]
"""
import argparse
import sys
import threading
import time
from pathlib import Path

import pynvml
import torch

sys.path[0] = str(Path(__file__).resolve().parent.parent)  # the repository's kernels, not bench/kernels.py
from backends.runtime import cudnn_fp8_attention as C  # noqa: E402
from kernels.scale_cast import to_e4m3  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seconds", type=float, default=3.0)
args = parser.parse_args()
if not torch.cuda.is_available():
    sys.exit("power_limit: needs a CUDA GPU (torch sees none here)")
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as e:
    sys.exit(f"power_limit: NVML is not usable here ({e}); it samples the clock and power")
hd = pynvml.nvmlDeviceGetHandleByIndex(0)
samples = []; stop = False
def sampler():
    while not stop:
        samples.append((time.perf_counter(), pynvml.nvmlDeviceGetClockInfo(hd, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(hd) / 1000, pynvml.nvmlDeviceGetTemperature(hd, 0)))
        time.sleep(0.05)
threading.Thread(target=sampler, daemon=True).start()
dev = torch.device("cuda")
S, H, D = 24576, 32, 128
q = torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16)
sc = torch.tensor([4 * 2 / 448, 4 * 2 / 448], device=dev)
q8, k8 = to_e4m3(q, sc[0]), to_e4m3(k, sc[1])
attn = lambda: C.sdpa_fp8_rows(q8, k8, v, None, sc)
a8 = torch.randn(S, 4096, device=dev).to(torch.float8_e4m3fn)
w1 = torch.randn(16384, 4096, device=dev).to(torch.float8_e4m3fn)
w2 = torch.randn(4096, 16384, device=dev).to(torch.float8_e4m3fn)
h8 = torch.randn(S, 16384, device=dev).to(torch.float8_e4m3fn)
sa = torch.ones(S, 1, device=dev); sb1 = torch.ones(1, 16384, device=dev); sb2 = torch.ones(1, 4096, device=dev)
def ff():
    torch._scaled_mm(a8, w1.t(), sa, sb1, out_dtype=torch.bfloat16, use_fast_accum=True)
    torch._scaled_mm(h8, w2.t(), sa, sb2, out_dtype=torch.bfloat16, use_fast_accum=True)
def phase(name, fn, seconds=args.seconds):
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter(); times = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize(); times.append(e0.elapsed_time(e1))
    t1 = time.perf_counter()
    s = [x for x in samples if t0 <= x[0] <= t1]
    n = len(times); first = sum(times[:5]) / 5; last = sorted(times[n // 2:])[len(times[n // 2:]) // 2]
    print(f"{name:<22} n={n:4d} first5 {first:8.3f} ms  steady(median of 2nd half) {last:8.3f} ms  "
          f"SM MHz {min(x[1] for x in s)}-{max(x[1] for x in s)} (2nd half mean {sum(x[1] for x in s[len(s)//2:]) / max(1, len(s[len(s)//2:])):.0f})  "
          f"W mean {sum(x[2] for x in s[len(s)//2:]) / max(1, len(s[len(s)//2:])):.0f}  temp {s[-1][3]} C", flush=True)
    time.sleep(2.0)
phase("attention alone", attn)
phase("FF GEMM pair alone", ff)
phase("attention + FF pair", lambda: (attn(), ff()))
phase("attention alone again", attn)
stop = True
