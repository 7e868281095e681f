"""Launch to first paint of the app with the GPU panel populated (fake NVML), vs bare Python.

Each run starts a fresh interpreter that opens the app headless and reports once the first
frame is shown and the GPU panel holds its first NVML reading; it also reports whether torch
was imported by then (it must not be: the capability probe starts after the first paint).
Target (issue: the Textual app): under 0.5 s on top of Python start-up.

    python bench/tui_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import sys
sys.path.insert(0, %r)
from fakes import FakeNvml, fake_gpu
from ltx_tui.app import LtxTuiApp

class FirstPaint(LtxTuiApp):
    ready = shown = False
    def on_ready(self):
        self.ready = True
        super().on_ready()
        self.done()
    def _show_gpus(self, info, gpus):
        super()._show_gpus(info, gpus)
        self.shown = bool(gpus)
        self.done()
    def done(self):
        if self.ready and self.shown:
            self.call_after_refresh(self.report)
    def report(self):
        print("painted", "torch" in sys.modules, flush=True)
        self.exit()

FirstPaint(nvml_module=FakeNvml([fake_gpu(0), fake_gpu(1)])).run(headless=True, size=(80, 24))
""" % str(ROOT / "tests")


def first_paint() -> tuple[float, bool]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT)
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    proc.wait(timeout=60)
    if not line.startswith("painted"):
        raise SystemExit(f"the app did not report a first paint: {line!r}")
    return elapsed, line.split()[1] == "True"


def python_start() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    first_paint()  # warm the page cache
    paints, pythons, torch_seen = [], [], []
    for _ in range(args.runs):
        pythons.append(python_start())
        t, torch_loaded = first_paint()
        paints.append(t)
        torch_seen.append(torch_loaded)
    p, b = statistics.median(paints), statistics.median(pythons)
    print(f"python -c pass            median {b:.3f} s")
    print(f"ltx-tui first paint + GPUs median {p:.3f} s (min {min(paints):.3f}, max {max(paints):.3f})")
    print(f"on top of Python start-up: {p - b:.3f} s (target < 0.5 s); torch imported before first paint: "
          f"{any(torch_seen)}")


if __name__ == "__main__":
    main()
