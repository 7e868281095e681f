"""Start-up cost of `ltx-tui --check --json` against a bare `import torch`.

Runs both commands alternately N times in fresh processes and prints the medians and
their ratio. Target (issue: foundation): the check adds under 30% to a bare torch import.

    python bench/startup.py [--runs 10] [-- extra --check args]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("extra", nargs="*", help="extra arguments for ltx-tui --check")
    args = parser.parse_args()
    exe = shutil.which("ltx-tui")
    check = [exe] if exe else [sys.executable, "-m", "ltx_tui.cli"]
    check += ["--check", "--json", *args.extra]
    torch_cmd = [sys.executable, "-c", "import torch"]
    python_cmd = [sys.executable, "-c", "pass"]
    for cmd in (torch_cmd, check):  # warm the page cache
        wall(cmd)
    samples: dict[str, list[float]] = {"python": [], "import torch": [], "ltx-tui --check --json": []}
    for _ in range(args.runs):
        samples["python"].append(wall(python_cmd))
        samples["import torch"].append(wall(torch_cmd))
        samples["ltx-tui --check --json"].append(wall(check))
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'command':<26} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.runs} runs each, interleaved)")
    for k, v in samples.items():
        print(f"{k:<26} {med[k]:9.3f} {min(v):7.3f} {max(v):7.3f}")
    ratio = med["ltx-tui --check --json"] / med["import torch"]
    print(f"check / import torch = {ratio:.3f}  (adds {100 * (ratio - 1):.1f}%; target < 30%)")


if __name__ == "__main__":
    main()
