"""A whole LTX-2 run, LTX-2's own flags vs an ltx-tui profile, through `ltx-tui run` and one ledger.

    LTX2_CORE_SRC=... LTX2_PIPELINES_SRC=... python bench/ltx2_run.py --ckpt DIR [--size full]
        [--dit-blocks N] [--module distilled] [--resolution 768x512] [--frames 121]
        [--ltx2 "" --ltx2 "--compile" ...] [--profile P.toml ...] [--ledger FILE]
        [--gpus N] [--one-gpu-ltx2 FLAGS ...] [--one-gpu-profile P.toml ...] [--all2all]

A multi-GPU module (`--module distilled_mgpu`, `ti2vid_two_stages_mgpu`) runs over the first
`--gpus` GPUs (CUDA_VISIBLE_DEVICES; default all visible) and each run is one record per rank;
its comparisons use rank 0 (the rank that decodes and writes the video). `--one-gpu-ltx2` /
`--one-gpu-profile` add runs of the same module without `_mgpu` on the first GPU alone, each
compared with the fastest multi-GPU profile run. `--all2all` builds ltx-kernels' all2all first
(`bench/build_all2all.py`, from `--kernels-src`) and puts it and `ltx_kernels` on the runs' PYTHONPATH.

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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]


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
    shown = {k: env[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in env}
    print(f"\n=== {label}: {' '.join(f'{k}={v}' for k, v in shown.items())} {shlex.join(command)}", flush=True)
    t = time.perf_counter()
    code = subprocess.call(command, env=dict(env, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=f"{cache}/triton"))
    print(f"=== {label}: exit {code} after {time.perf_counter() - t:.0f} s", flush=True)
    return code


def _run_of(record) -> str:
    """The run a record belongs to (a multi-GPU run has one record per rank)."""
    mgpu = record.plan.get("mgpu")
    return mgpu.get("run", record.id) if isinstance(mgpu, dict) else record.id


def _lead(records: list) -> object:
    """The record that stands for a run: rank 0 of a multi-GPU run."""
    return min(records, key=lambda r: -1 if r.rank is None else r.rank)


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
    p.add_argument("--gpus", type=int, default=None, help="multi-GPU module: use the first N GPUs (default: all)")
    p.add_argument("--one-gpu-ltx2", action="append", default=[], metavar="FLAGS",
                   help="multi-GPU module: LTX-2's own flags for an as-built run of the one-GPU module on GPU 0")
    p.add_argument("--one-gpu-profile", action="append", default=[], metavar="P.toml",
                   help="multi-GPU module: a profile for a run of the one-GPU module on GPU 0")
    p.add_argument("--all2all", action="store_true", help="build ltx-kernels' all2all first (bench/build_all2all.py) "
                   "and put it on the runs' PYTHONPATH")
    p.add_argument("--kernels-src", default=str(ROOT / ".ltx2" / "ltx-kernels-v1.2.0"),
                   help="ltx-kernels v1.2.0 source folder for --all2all")
    args = p.parse_args()
    multi_gpu = args.module.endswith("_mgpu")
    if (args.one_gpu_ltx2 or args.one_gpu_profile) and not multi_gpu:
        p.error("--one-gpu-ltx2 / --one-gpu-profile compare a multi-GPU module (--module ..._mgpu) with one GPU")

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
    if args.all2all:
        import build_all2all

        t = time.perf_counter()
        build_all2all.build(Path(args.kernels_src))
        extra_path = build_all2all.pythonpath(Path(args.kernels_src))
        print(f"all2all: built or up to date in {time.perf_counter() - t:.0f} s; PYTHONPATH += {extra_path}", flush=True)
        env["PYTHONPATH"] = os.pathsep.join(extra_path + [p for p in [env.get("PYTHONPATH")] if p])
    many = dict(env)
    if multi_gpu and args.gpus:
        many["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(args.gpus))
    one = dict(env, CUDA_VISIBLE_DEVICES="0")
    module = args.module
    single = module.removesuffix("_mgpu")
    base = [sys.executable, "-m", "ltx_tui.cli", "run", "--ledger", str(ledger)]
    # (label, ltx-tui's own arguments, LTX-2 flags, module, environment)
    sets = [(f"LTX-2 {flags or '(defaults)'}", ["--as-built"], shlex.split(flags), module, many)
            for flags in (args.ltx2 or [""])]
    sets += [(f"ltx-tui {prof}", ["--profile", prof], [], module, many) for prof in args.profile]
    sets += [(f"one GPU: LTX-2 {single} {flags or '(defaults)'}", ["--as-built"], shlex.split(flags), single, one)
             for flags in args.one_gpu_ltx2]
    sets += [(f"one GPU: ltx-tui {single} {prof}", ["--profile", prof], [], single, one) for prof in args.one_gpu_profile]
    labels: dict[str, str] = {}  # run -> label
    count = len(runs.load(ledger).records)
    for label, own, extra, mod, run_env in sets:
        cache = tempfile.mkdtemp(prefix="inductor-")
        for n in range(args.repeat):
            tag = f"{label} [{'cold' if n == 0 else 'warm'} compile caches]" if args.repeat > 1 else label
            module_args = lc.pipeline_args(ck, mod, width=width, height=height, frames=args.frames,
                                           output=out / f"run{len(labels) + 1}.mp4") + extra
            run(tag, [*base, *own, "--", f"ltx_pipelines.{mod}", *module_args], run_env, cache)
            new = runs.load(ledger).records[count:]
            count += len(new)
            labels.update({_run_of(r): tag for r in new})
    records = [r for r in runs.load(ledger).records if _run_of(r) in labels]
    grouped: dict[str, list] = {}
    for r in records:
        grouped.setdefault(_run_of(r), []).append(r)
    for run_id, rs in grouped.items():
        for r in rs:
            print(f"\n{labels[run_id]}\n{show(r)}")
    leads = {run_id: _lead(rs) for run_id, rs in grouped.items() if all(r.status == "ok" for r in rs)}
    mine = [r for r in leads.values() if r.module == f"ltx_pipelines.{module}"]
    baselines = [r for r in mine if r.plan.get("as_built")]
    profiles = [r for r in mine if not r.plan.get("as_built")]
    if baselines and profiles:
        best = min(baselines, key=lambda r: r.gpu_seconds)
        print(f"fastest as built: {labels[_run_of(best)]} ({best.gpu_seconds:.1f} s of stages)")
        for r in profiles:
            print(f"\n{labels[_run_of(best)]} (A) vs {labels[_run_of(r)]} (B)\n{compare(best, r)}")
    ones = [r for r in leads.values() if multi_gpu and r.module == f"ltx_pipelines.{single}"]
    if ones and (profiles or baselines):
        many_best = min(profiles or baselines, key=lambda r: r.gpu_seconds)
        for r in ones:
            print(f"\n{labels[_run_of(r)]} (A) vs {labels[_run_of(many_best)]} (B)\n{compare(r, many_best)}")
    print(f"ledger: {ledger}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
