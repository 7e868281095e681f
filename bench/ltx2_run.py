"""A whole LTX-2 run, LTX-2's own flags vs an ltx-tui profile, through `ltx-tui run` and one ledger.

    LTX2_CORE_SRC=... LTX2_PIPELINES_SRC=... python bench/ltx2_run.py --ckpt DIR [--size full]
        [--dit-blocks N] [--module distilled] [--resolution 768x512] [--frames 121]
        [--ltx2 "" --ltx2 "--compile" ...] [--profile P.toml ...] [--ledger FILE]

Writes random checkpoints of LTX-2 v1.2.0's configs into DIR unless they are there
(`tests/ltx2_checkpoints.py`), then runs the pipeline module once per `--ltx2` flag set
(`ltx-tui run --as-built`: LTX-2 as those flags build it, measured only) and once per
`--profile` (`ltx-tui run --profile`), each in a fresh process, all into one ledger. Each run set
has its own Inductor/Triton cache directory: the first run pays its compile cold, `--repeat 2`
runs it again in a new process with that cache warm (as a user's second generation would). Prints each run stage by stage,
then the fastest LTX-2 run beside each profile run (`ltx-tui runs --compare`), total stage
seconds and compute seconds (without model loading), peak memory and the memory plan's
prediction. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def checkpoints(args):
    import ltx2_checkpoints as lc

    names = lc._names(args.size)
    ck = lc.Checkpoints(root=Path(args.ckpt).resolve(), size=args.size,
                        **{k: Path(args.ckpt).resolve() / v for k, v in names.items()})
    if all(p.exists() for p in (ck.checkpoint, ck.gemma_root, ck.spatial_upsampler, ck.distilled_lora)):
        print(f"checkpoints: {ck.root} (already written)", flush=True)
        return ck
    t = time.perf_counter()
    ck = lc.write_checkpoints(args.ckpt, args.size, dit_blocks=args.dit_blocks)
    sizes = ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in ck.sizes().items())
    print(f"checkpoints: wrote {ck.root} in {time.perf_counter() - t:.0f} s ({sizes})", flush=True)
    return ck


def run(label: str, command: list[str], env: dict, cache: str) -> int:
    print(f"\n=== {label}: {shlex.join(command)}", flush=True)
    t = time.perf_counter()
    code = subprocess.call(command, env=dict(env, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=f"{cache}/triton"))
    print(f"=== {label}: exit {code} after {time.perf_counter() - t:.0f} s", flush=True)
    return code


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="folder of the random checkpoints (written when missing)")
    p.add_argument("--size", default="full", choices=("tiny", "full"))
    p.add_argument("--dit-blocks", type=int, help="DiT blocks of a full-size checkpoint (default 48)")
    p.add_argument("--module", default="distilled")
    p.add_argument("--resolution", default="768x512")
    p.add_argument("--frames", type=int, default=121)
    p.add_argument("--ltx2", action="append", default=[], metavar="FLAGS",
                   help="LTX-2's own flags for an as-built run ('' for none); repeatable")
    p.add_argument("--profile", action="append", default=[], help="an ltx-tui profile to run; repeatable")
    p.add_argument("--repeat", type=int, default=1, help="runs of each set, the later ones with warm compile caches")
    p.add_argument("--ledger", default=None, help="the ledger (default: a new file in a temporary folder)")
    p.add_argument("--output-dir", default=None, help="where the videos go (default: a temporary folder)")
    args = p.parse_args()

    from backends.launch.gate import import_ltx_pipelines

    module, why = import_ltx_pipelines()  # ltx_core on sys.path for the checkpoint writer
    if module is None:
        sys.exit(f"bench/ltx2_run.py: {why}")
    import ltx2_checkpoints as lc
    from backends.machine import runs
    from ltx_tui.run import compare, show

    ck = checkpoints(args)
    width, height = (int(x) for x in args.resolution.lower().split("x"))
    out = Path(args.output_dir or tempfile.mkdtemp(prefix="ltx2-run-"))
    ledger = Path(args.ledger or out / "runs.jsonl")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    base = [sys.executable, "-m", "ltx_tui.cli", "run", "--ledger", str(ledger)]
    sets = [(f"LTX-2 {flags or '(defaults)'}", ["--as-built"], shlex.split(flags)) for flags in (args.ltx2 or [""])]
    sets += [(f"ltx-tui {prof}", ["--profile", prof], []) for prof in args.profile]
    plan = []
    first = len(runs.load(ledger).records)
    for label, own, extra in sets:
        cache = tempfile.mkdtemp(prefix="inductor-")
        for n in range(args.repeat):
            tag = f"{label} [{'cold' if n == 0 else 'warm'} compile caches]" if args.repeat > 1 else label
            plan.append((tag, own, extra))
            module_args = lc.pipeline_args(ck, args.module, width=width, height=height, frames=args.frames,
                                           output=out / f"run{len(plan)}.mp4") + extra
            run(tag, [*base, *own, "--", f"ltx_pipelines.{args.module}", *module_args], env, cache)
    records = runs.load(ledger).records[first:]
    labels = {r.id: label for (label, _, _), r in zip(plan, records)} if len(records) == len(plan) else {}
    for r in records:
        print(f"\n{labels.get(r.id, r.id)}\n{show(r)}")
    baselines = [r for r in records if r.plan.get("as_built") and r.status == "ok"]
    profiles = [r for r in records if not r.plan.get("as_built") and r.status == "ok"]
    if baselines and profiles:
        best = min(baselines, key=lambda r: r.gpu_seconds)
        print(f"fastest as built: {labels.get(best.id, best.id)} ({best.gpu_seconds:.1f} s of stages)")
        for r in profiles:
            print(f"\n{labels.get(best.id, 'A')} (A) vs {labels.get(r.id, 'B')} (B)\n{compare(best, r)}")
    print(f"ledger: {ledger}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
