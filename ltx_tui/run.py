"""`ltx-tui run` and `ltx-tui runs`: launch an LTX-2 pipeline with a profile; read the run ledger.

Never imports textual. Exit codes of `run`: 0 the run finished with the profile applied; 1 the
module failed, the plan cannot run here, or no LTXModel got the plan ("profile not applied");
2 usage, profile, a flag that disagrees with the profile, LTX-2 of another version or structure;
3 internal error; 130 ctrl-c, 143 SIGTERM, 129 SIGHUP (the run is recorded as interrupted); the
module's own exit code when it exits non-zero itself (argparse errors: 2). `runs`: 0, 2 for a ledger or run id that cannot be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import signal
import sys

from backends.machine import runs as ledger_mod
from backends.machine.text import printable, printable_lines
from backends.machine.textfile import FileProblem
from ltx_tui.usage import error_json, profile_fields, refuse_empty

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

RUN_EPILOG = """Everything after `--` is the pipeline module and its own arguments, as for
`python -m ltx_pipelines.<module>`. The profile is authoritative: --quantization, --compile,
--offload, --diffvae-optimization and --max-batch-size may be given only when they agree with it.
LTX-2's multi-GPU modules (distilled_mgpu, ti2vid_two_stages_mgpu, ti2vid_two_stages_hq_mgpu) get
the plan in every rank and each rank records itself; there --quantization, --offload, --lora and
--max-batch-size are refused (LTX-2 would drop them without a word).

exit codes:
  0  the run finished and the profile was applied to every LTXModel built
  1  the module failed, the plan cannot run here, or no LTXModel got the plan
  2  usage, profile, a flag that disagrees with the profile, LTX-2 not v1.2.0 as released
  3  internal error;  130 / 143 / 129  ctrl-c / SIGTERM / SIGHUP (recorded as interrupted);
     otherwise the module's own exit code
"""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ltx-tui run", usage="ltx-tui run [--profile FILE | --as-built] [--ledger FILE] "
                                "[--dry-run] [--json] -- ltx_pipelines.<module> ARGS...", description="Run an LTX-2 v1.2.0 pipeline module with a "
                                "profile applied to every model it builds, and record the run.",
                                epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", metavar="FILE", help="TOML profile (default: the default profile)")
    p.add_argument("--ledger", metavar="FILE", help="append the run record here (default: "
                   "the user data directory's ltx-tui/runs.jsonl)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, the flags' verdicts and the LTX-2 "
                   "command, load nothing, and exit")
    p.add_argument("--json", action="store_true", help="print the run record (or the dry run) as JSON on stdout")
    p.add_argument("--as-built", action="store_true", help="no profile: run the module as LTX-2's own flags build "
                   "it, only measured and recorded (a baseline to compare a profile's run with)")
    return p


def _runs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ltx-tui runs", description="List the runs of the ledger, or compare two.")
    p.add_argument("--ledger", metavar="FILE", help="the ledger (default: the user data directory's)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--last", type=int, metavar="N", help="only the N newest runs")
    p.add_argument("--show", metavar="RUN", help="one run, stage by stage (id, id prefix, or -1 for the newest)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two runs side by side per stage")
    return p


def _say(text: str) -> None:
    """`text` on stderr, its lines kept and every other control character escaped."""
    print(printable_lines(text), file=sys.stderr, flush=True)


def _built_line(built) -> str:
    from backends.launch.hooks import describe

    return describe(built)


def run_main(argv: list[str]) -> int:
    if "--" in argv:
        split = argv.index("--")
        own, rest = argv[:split], argv[split + 1:]
    else:
        own, rest = argv, []
    parser = _run_parser()
    if not rest:  # the module without `--`: argparse said only "unrecognized arguments"
        helps = ("-h", "--help")
        first = next((i for i, a in enumerate(own) if a.startswith("ltx_pipelines.")), len(own))
        # a --help after the module is the module's: left out of the parse (it printed run's own help)
        mine = own[:first] + [a for a in own[first:] if a not in helps]
        _, extra = parser.parse_known_args(mine)
        if extra and extra[0].startswith("ltx_pipelines."):  # ltx-tui's own options first, the module's after
            start = len(mine) - len(extra)
            taken = own[:start] if mine[start:] == extra else None
            extra = own[start:] if taken is not None else extra
            parser.error("put `--` before the pipeline module and its arguments"
                         + (": " + shlex.join(["ltx-tui", "run", *taken, "--", *extra]) if taken is not None else
                            " (ltx-tui run's own options before it)"))
    args = parser.parse_args(own)
    refuse_empty(parser, args, ("ledger", "profile"))
    if not rest:
        parser.error("give the pipeline module after `--`, e.g. "
                     "ltx-tui run --profile P.toml -- ltx_pipelines.distilled --distilled-checkpoint-path ...")
    from backends.launch import run as launcher

    helps = {"-h", "--help"} & set(rest[1:])  # the module's own help: nothing to record
    why = None if helps else ledger_mod.unwritable(args.ledger)
    if why:  # before the module runs (a dry run says so too): its record would be lost after it
        _say(f"ltx-tui run: the run {'would not be' if args.dry_run else 'could not be'} recorded: {printable(why)}; "
             "give --ledger a file that can be written, or leave it out for the default")
        if args.json:
            print(error_json("ledger", why, {"file": str(args.ledger or ledger_mod.default_ledger())}))
        return EXIT_USAGE
    try:
        prep = launcher.prepare(args.profile, rest[0], rest[1:], as_built=args.as_built, dry_run=args.dry_run)
    except launcher.LaunchError as e:
        _say(f"ltx-tui run: {e}")
        if args.json:  # as `--check --json`'s: a script reads one object on stdout either way
            kind = "profile" if e.profile_error else "plan" if e.code == EXIT_FAILED else "launch"
            fields = profile_fields(e.profile_error) if e.profile_error else {}
            print(error_json(kind, str(e), fields, code=e.code))  # its lines as they are: JSON escapes them
        return e.code
    if args.dry_run:
        world = launcher.world_refusal(prep)  # the run refuses its flags first, then its ranks
        code = EXIT_USAGE if prep.policy.conflicts else world.code if world else EXIT_OK
        if args.json:
            print(json.dumps({"module": prep.module, "profile": prep.profile_path, "sha256": prep.profile_sha256,
                              "versions": prep.versions, "command": prep.command(),
                              "ltx_argv": list(prep.policy.ltx_argv),
                              "verdicts": [dataclasses.asdict(v) for v in prep.policy.verdicts],
                              "ltx2_does": list(prep.policy.ltx2_does),
                              "dit_steps": [s.text for s in prep.plan.steps if s.kind in prep.policy.dit_steps],
                              "decoder_steps": [s.text for s in prep.plan.steps
                                                if s.kind in prep.policy.decoder_steps],
                              "multi_gpu": prep.multi_gpu, "world_size": prep.world_size,
                              "barrier_timeout_s": launcher.barrier_timeout(prep),
                              "notes": list(prep.policy.notes + prep.notes),
                              "not_refused": prep.plan.not_refused, "exit_code": code}, indent=1))
        else:
            sys.stdout.write(launcher.describe(prep))
        if prep.policy.conflicts:
            _say(f"ltx-tui run: {launcher.conflict_message(prep.policy, prep.profile_path, prep.profile, prep.plan)}")
        elif world:
            _say(f"ltx-tui run: {world}")
        return code
    for w in prep.env_warnings:
        _say(f"ltx-tui run: warning: {w}")
    for n in prep.notes:
        _say(f"ltx-tui run: {n}")
    if prep.multi_gpu and launcher.barrier_timeout(prep) is not None:
        _say(f"ltx-tui run: every rank raises its all2all barrier timeout to {launcher.barrier_timeout(prep):g} s "
             "before the first step (ltx-tui compiles the DiT) and puts it back after the run")
    _say(f"ltx-tui run: {prep.command()}")
    from ltx_tui.errlog import log_internal_error

    stopped: list[int] = []

    def stop(signum, frame):  # SIGTERM / SIGHUP: unwind like ctrl-c, so the run is recorded as interrupted
        stopped.append(signum)
        raise KeyboardInterrupt
    saved = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        outcome = launcher.launch(prep, ["ltx-tui", "run", *argv], on_built=lambda b: _say(_built_line(b)),
                                  log_error=log_internal_error, ledger=args.ledger)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    if stopped:
        outcome.code = 128 + stopped[0]
    if outcome.multi_gpu:
        return _ranks_done(outcome, args)
    if not outcome.ran:  # the module's --help: nothing to record
        return outcome.code
    _record(outcome, args)
    return outcome.code


def _record(outcome, args, no_rank: bool = False) -> None:
    """Append the outcome's record to the ledger, show it, say its error and where it went (`no_rank`:
    a multi-GPU module's exit before any rank recorded a run, shown as the ranks' JSON list is)."""
    record = outcome.record
    what = "the module's exit as run" if no_rank else "as run"
    try:
        where = f"recorded {what} {record.id} in {ledger_mod.append(record, args.ledger)}"
    except OSError as e:
        where = f"not recorded: the ledger {args.ledger or ledger_mod.default_ledger()} cannot be written ({e})"
    where = f"no rank recorded a run; {where}" if no_rank else where
    if args.json:
        print(json.dumps([record.to_dict()] if no_rank else record.to_dict(), indent=1, default=str))
    else:
        sys.stdout.write(show(record))
    _say_error(outcome)
    _say(f"ltx-tui run: {where}")


def _say_error(outcome) -> None:
    r = outcome.record
    if r.error:
        _say(f"ltx-tui run: {r.status}: {r.error}" + (f" (traceback in {outcome.log})" if outcome.log else ""))


def _ranks_done(outcome, args) -> int:
    """A multi-GPU run: each rank appended its own record; show them, say what is missing. A module that
    failed with no rank's record (it exited before its fleet ran a job) is recorded from here, as one GPU's."""
    ranks = outcome.rank_records
    if not ranks and outcome.code != EXIT_OK:
        _record(outcome, args, no_rank=True)
        return outcome.code
    if args.json and (ranks or outcome.ran):
        print(json.dumps([r.to_dict() for r in ranks], indent=1, default=str))
    elif not args.json:
        for r in ranks:
            sys.stdout.write(show(r))
    _say_error(outcome)
    if ranks:
        _say(f"ltx-tui run: {len(ranks)} rank(s) recorded as runs {', '.join(r.id for r in ranks)} in "
             f"{args.ledger or ledger_mod.default_ledger()}")
    if outcome.missing_ranks:
        _say(f"ltx-tui run: rank(s) {', '.join(map(str, outcome.missing_ranks))} wrote no record")
    return outcome.code


# --- the ledger as text -----------------------------------------------------------------------

def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def listing(records) -> str:
    records = [ledger_mod.displayed(r) for r in records]
    lines = [f"{'id':<25} {'started':<20} {'module':<34} {'rank':>4} {'status':<11} {'stages s':>9} {'peak GiB':>9} "
             f"{'exit':>4}"]
    for r in reversed(records):
        lines.append(f"{r.id:<25} {r.started[:19]:<20} {r.module[:34]:<34} {_rank(r):>4} {r.status:<11} "
                     f"{r.gpu_seconds:>9.2f} {_f(r.peak_gib):>9} {r.exit:>4}")
    return "\n".join(lines) + "\n"


def _rank(r) -> str:
    return "-" if r.rank is None else str(r.rank)


def _of_ranks(r) -> str:
    """' (rank R of N)' for a rank's record of a multi-GPU run, else ''."""
    if r.rank is None:
        return ""
    world = r.plan.get("mgpu", {}).get("world_size") if isinstance(r.plan.get("mgpu"), dict) else None
    return f" (rank {r.rank}" + (f" of {world}" if world else "") + ")"


def _profile(r) -> str:
    """The run's profile path, or what running without one means."""
    return printable(r.profile.get("path") or "none (LTX-2 as built, its own flags)")


def _argv(r, cut: int | None = 60) -> str:
    """LTX-2's argv as a shell would take it back (quoted), cut at `cut` characters with an ellipsis."""
    text = printable(shlex.join(r.ltx_argv))
    return (text[:cut - 1] + "…" if cut and len(text) > cut else text) or "(none)"


def show(r) -> str:
    """One run stage by stage: seconds, steps, peak allocated/reserved, the memory plan's prediction."""
    r = ledger_mod.displayed(r)
    lines = [f"run {r.id}: {r.module}{_of_ranks(r)} {r.status} (exit {r.exit}), {r.wall_s:.1f} s wall, "
             f"profile {_profile(r)}"]
    lines.append(f"  ltx argv: {_argv(r, cut=None)}")
    if r.error:
        lines.append("  error: " + r.error.replace("\n", "\n         "))
    lines.append(f"  {'stage':<20} {'s':>9} {'load s':>7} {'compute':>8} {'steps':>5} {'s/step':>7} {'peak GiB':>8} "
                 f"{'rsvd GiB':>8} {'plan GiB':>8} {'error':>7}")
    for s in r.stages:
        steps = len(s.step_seconds)
        per = sorted(s.step_seconds)[steps // 2] if steps else None
        err = s.error_pct
        lines.append(f"  {s.name:<20} {s.seconds:>9.3f} {s.load_s + s.apply_s:>7.2f} {s.compute_s:>8.3f} "
                     f"{steps or '':>5} {_f(per, '.3f'):>7} {_f(s.peak_allocated_gib):>8} {_f(s.peak_reserved_gib):>8} "
                     f"{_f(s.predicted_gib):>8} {'' if err is None else f'{err:+.1f}%':>7}")
    lines.append(f"  {'total (stages)':<20} {r.gpu_seconds:>9.3f} {'':>7} {r.compute_s:>8.3f} {'':>5} {'':>7} "
                 f"{_f(r.peak_gib):>8}")
    lines.append("  (s/step: the median step; compute: the stage without model loading and plan applying)")
    notes = dict.fromkeys(s.predicted_stage for s in r.stages
                          if s.predicted_gib is None and (s.predicted_stage or "").startswith("no prediction"))
    lines += [f"  plan GiB: {n}" for n in notes]
    for m in r.models:
        lines.append(f"  model {m.model:<24} built in {m.stage:<16} load {m.load_s:7.2f} s  apply {m.apply_s:6.2f} s  "
                     + ("kept from an earlier stage" if m.kept else "plan applied" if m.applied else "as LTX-2 built it")
                     + (f"; compile and capture (from its apply to the run's end, every model): {m.compile}"
                        if m.compile else ""))
    mgpu = r.plan.get("mgpu")
    if isinstance(mgpu, dict):
        lines += [f"  note: {n}" for n in mgpu.get("notes", ()) if isinstance(n, str)]
    return "\n".join(lines) + "\n"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def compare(a, b) -> str:
    """Two runs side by side per stage (matched by stage name), B's speed-up over A."""
    a, b = ledger_mod.displayed(a), ledger_mod.displayed(b)
    lines = [f"A = {a.id} ({a.module}{_of_ranks(a)}, profile {_profile(a)}, ltx argv: {_argv(a)})",
             f"B = {b.id} ({b.module}{_of_ranks(b)}, profile {_profile(b)}, ltx argv: {_argv(b)})",
             f"  {'stage':<20} {'A s':>9} {'B s':>9} {'A/B':>7} {'A comp':>8} {'B comp':>8} {'A/B':>7} "
             f"{'A peak':>8} {'B peak':>8} {'B plan':>8}"]
    names = [s.name for s in a.stages] + [s.name for s in b.stages if s.name not in {x.name for x in a.stages}]
    sa, sb = {s.name: s for s in a.stages}, {s.name: s for s in b.stages}
    for name in names:
        x, y = sa.get(name), sb.get(name)
        lines.append(f"  {name:<20} {_f(x.seconds if x else None, '.3f'):>9} {_f(y.seconds if y else None, '.3f'):>9} "
                     f"{_ratio(x and x.seconds, y and y.seconds):>7} {_f(x.compute_s if x else None, '.3f'):>8} "
                     f"{_f(y.compute_s if y else None, '.3f'):>8} {_ratio(x and x.compute_s, y and y.compute_s):>7} "
                     f"{_f(x.peak_allocated_gib if x else None):>8} {_f(y.peak_allocated_gib if y else None):>8} "
                     f"{_f(y.predicted_gib if y else None):>8}")
    lines.append(f"  {'total (stages)':<20} {a.gpu_seconds:>9.3f} {b.gpu_seconds:>9.3f} "
                 f"{_ratio(a.gpu_seconds, b.gpu_seconds):>7} {a.compute_s:>8.3f} {b.compute_s:>8.3f} "
                 f"{_ratio(a.compute_s, b.compute_s):>7} {_f(a.peak_gib):>8} {_f(b.peak_gib):>8}")
    return "\n".join(lines) + "\n"


def runs_main(argv: list[str]) -> int:
    parser = _runs_parser()
    args = parser.parse_args(argv)
    refuse_empty(parser, args, ("ledger",))
    if args.last is not None and args.last < 1:
        parser.error("--last must be >= 1")
    def refuse(kind: str, message: str, fields: dict) -> int:
        _say(f"ltx-tui runs: {message}")
        if args.json:
            print(error_json(kind, printable(message), fields))
        return EXIT_USAGE

    path = str(args.ledger or ledger_mod.default_ledger())
    try:
        ledger = ledger_mod.load(args.ledger)
    except FileProblem as e:
        return refuse("ledger", f"{path}: {e}", {"file": path, "problem": str(e)})
    if ledger.skipped and not ledger.records:  # a file, but not a ledger (/etc/passwd exited 0 as an empty one)
        return refuse("ledger", str(ledger.empty_reason()), {"file": path, "problem": "no run record"})
    if ledger.partial:
        limit = ledger_mod.size_text(ledger_mod.LEDGER_LIMIT)
        _say(f"ltx-tui runs: {path} is larger than {limit}: only its newest {limit} were read ({len(ledger.records)} run(s)); older runs are not listed")
    if ledger.skipped:
        _say(f"ltx-tui runs: {ledger.skipped} line(s) of {ledger.path} are not run records and were skipped")
    try:
        if args.compare:
            a, b = (ledger.find(k) for k in args.compare)
            if a.id == b.id:
                _say(f"ltx-tui runs: {args.compare[0]} and {args.compare[1]} are the same run ({printable(a.id)}): "
                     "it is compared with itself")
            if args.json:
                print(json.dumps({"a": a.to_dict(), "b": b.to_dict()}, indent=1, default=str))
            else:
                sys.stdout.write(compare(a, b))
            return EXIT_OK
        if args.show:
            r = ledger.find(args.show)
            sys.stdout.write(json.dumps(r.to_dict(), indent=1, default=str) + "\n" if args.json else show(r))
            return EXIT_OK
    except KeyError as e:
        return refuse("run", e.args[0], {"file": path})
    records = ledger.records[-args.last:] if args.last else ledger.records
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=1, default=str))
    elif not records:
        _say("ltx-tui runs: " + (ledger.empty_reason() or f"no runs in {ledger.path} yet (`ltx-tui run --profile "
                                 "P.toml -- ltx_pipelines.distilled ...` records one)"))
    else:
        sys.stdout.write(listing(records))
    return EXIT_OK
