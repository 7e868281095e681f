"""Is what `ltx-tui --tune` chose really the fastest? Times every candidate again, fresh, in a
separate run (not stored), and compares each option's cached choice with the fastest value of
this run: the choice passes when it is within 5% of it.

    python bench/tune_verify.py [--resolution 768x512] [--frames 121] [--budget 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.config.ltx2_shapes import RunShapes, parse_resolution  # noqa: E402
from backends.config.options import Profile  # noqa: E402
from backends.machine.capability import probe  # noqa: E402
from backends.machine.tuned import load_tuned  # noqa: E402
from backends.tune.run import tune  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resolution", default="768x512")
    parser.add_argument("--frames", type=int, default=121)
    parser.add_argument("--budget", type=float, default=300.0)
    args = parser.parse_args()
    shapes = RunShapes(*parse_resolution(args.resolution), args.frames)
    cap = probe()
    cached = load_tuned(cap, shapes.label)
    if cached is None:
        sys.exit(f"nothing cached for {shapes.label}: run `ltx-tui --tune --resolution {args.resolution} "
                 f"--frames {args.frames}` first")
    options = tuple(dict.fromkeys(c.option for c in cached.candidates if c.status == "measured"))
    t0 = time.monotonic()
    fresh = tune(Profile(), cap, shapes, options=options, budget=args.budget, fresh=True, store=False)
    print(f"re-timed {shapes.label} fresh in {time.monotonic() - t0:.1f} s (cached run: {cached.written})")
    print(f"{'option':<26} {'value':<22} {'cached ms':>10} {'fresh ms':>10}")
    for c in fresh.candidates:
        if c.status != "measured":
            continue
        old = next((x for x in cached.candidates if (x.option, x.value) == (c.option, c.value)), None)
        print(f"{c.option:<26} {c.value:<22} {old.ms if old and old.ms else float('nan'):10.3f} {c.ms:10.3f}")
    print(f"\n{'option':<26} {'chosen (cached)':<22} {'its fresh ms':>12} {'fastest fresh':>22} {'ratio':>6}  verdict")
    for option, value in cached.chosen().items():
        ranked = fresh.ranked(option)
        mine = next((c for c in ranked if c.value == value), None)
        if not ranked or mine is None:
            print(f"{option:<26} {value:<22} not re-timed")
            continue
        ratio = mine.ms / ranked[0].ms
        print(f"{option:<26} {value:<22} {mine.ms:12.3f} {ranked[0].value + f' {ranked[0].ms:.3f}':>22} "
              f"{ratio:6.3f}  {'ok (within 5%)' if ratio <= 1.05 else 'NOT within 5%'}")


if __name__ == "__main__":
    main()
