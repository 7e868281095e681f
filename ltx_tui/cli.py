"""Command line of `ltx-tui`. `--check` and `--list-capabilities` never import textual."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from backends.config.ltx2_shapes import DEFAULT_RUN, MAX_FRAMES, MAX_SIDE
from backends.smoke import DEFAULT_TIMEOUT as SMOKE_TIMEOUT
from backends.tune.run import DEFAULT_BUDGET
from ltx_tui.errlog import log_internal_error
from ltx_tui.usage import refuse_empty

EXIT_INTERNAL, EXIT_PIPE = 3, 141

EPILOG = """commands:
  ltx-tui run --profile P.toml [--ledger FILE] [--dry-run] -- ltx_pipelines.<module> ARGS
               run LTX-2's own pipeline module with the profile applied (ltx-tui run --help)
  ltx-tui runs [--last N] [--show RUN] [--compare A B] [--json]
               the run ledger: past runs per stage (ltx-tui runs --help)

exit codes (--check, --explain):
  0  runnable as asked (fallbacks and warnings are reported)
  1  some option cannot run here (--explain KEY: KEY cannot); with --strict also any fallback or warning;
     with --smoke also any smoke check that did not pass (skipped ones do not count); with
     --resolution/--frames/--batch also a run whose predicted memory peak does not fit the GPU's free memory
  2  usage error, a profile / capability file that cannot be read, or an --output FILE that
     cannot be written as asked (an existing file needs --force; never the --profile file)
  3  internal error (one line on stderr, the traceback in the log file it names)
  141  the output pipe was closed (e.g. `| head`); nothing more is written
  130 / 143 / 129  ctrl-c / SIGTERM / SIGHUP (smoke workers are killed first)

exit codes (--tune):
  0  tuned: at least one candidate measured (results cached for `auto`)
  1  no candidate could be measured here (without CUDA: a run larger than 256x224x17)
  2  usage error, a profile that cannot be read, or an --output FILE that cannot be written
  3  internal error;  130 / 143 / 129  ctrl-c / SIGTERM / SIGHUP (the workers are killed)
"""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be > 0 seconds")
    return value


def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:  # not '１２１' or '²' (str.isdigit takes them)
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _refuse_output(args: argparse.Namespace) -> bool:
    """Say why `--output FILE` cannot be written as asked, before any work (the usage error, exit 2)."""
    from backends.machine import textfile
    from backends.machine.text import printable

    out, fix = args.output, None
    try:
        if args.profile and textfile.same_file(out, args.profile):
            problem = f"is the input profile (--profile {args.profile}); it is never replaced, not even with --force"
            fix = "write the output to another file"
            message = f"{out} {problem}: {fix}"
        else:
            textfile.check_output(out, overwrite=args.force)
            return False
    except textfile.OutputExists:
        problem, fix = "exists", "pass --force to replace it"
        message = f"{out} exists; {fix}"
    except textfile.OutputError as e:
        problem, message = e.strerror, str(e)
    except OSError as e:
        problem = f"cannot write ({e.strerror or e})"
        message = f"{out}: {problem}"
    print(f"ltx-tui: output error: {printable(message)}", file=sys.stderr)
    if args.json and args.tune:  # the JSON a script reads says it too, as for any other usage error
        from ltx_tui.tune import usage_json

        print(usage_json(message))
    elif args.json:
        from ltx_tui.usage import error_json

        print(error_json("output", message, {"file": out, "problem": problem, "fix": fix}))
    return True


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors (exit 2) also print the JSON error object on stdout when the
    command line asked for JSON (`json_errors`): a script reading stdout gets its answer."""

    json_errors = False
    tune = False  # --tune --json answers in the tune's own JSON (`ltx_tui.tune.usage_json`)

    def error(self, message: str):
        if self.json_errors and self.tune:
            from ltx_tui.tune import usage_json

            print(usage_json(message), flush=True)
        elif self.json_errors:
            from ltx_tui.usage import error_json

            print(error_json("usage", message), flush=True)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from backends.config.profile import TOOL_VERSION

    parser = _Parser(
        prog="ltx-tui",
        description="Configure and validate LTX-2 performance backends for this GPU box.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="validate headless and exit (no TUI)")
    parser.add_argument("--profile", metavar="FILE", help="TOML profile to validate or edit (default: the default profile)")
    parser.add_argument("--capability", metavar="ID|FILE",
                        help="validate for a preset machine (see --list-capabilities) or a saved capability JSON")
    parser.add_argument("--json", action="store_true", help="with --check: print one JSON object")
    parser.add_argument("--strict", action="store_true", help="with --check: fallbacks and warnings exit 1")
    parser.add_argument("--smoke", action="store_true",
                        help="with --check: also run the smoke checks (each in a subprocess); a failure exits 1")
    parser.add_argument("--timeout", type=_seconds, metavar="S",
                        help=f"with --smoke, and in the app: seconds each smoke check may take (default {SMOKE_TIMEOUT:g})")
    parser.add_argument("--ltx-args", action="store_true",
                        help="with --check: print the ltx-pipelines command line and environment for the profile")
    parser.add_argument("--output", metavar="FILE",
                        help="with --ltx-args: write the command line to FILE instead of stdout; with --tune: write "
                        "the profile with the chosen values pinned. A new file is written whole (atomically); a "
                        "symlink's target is written; a device or FIFO is written to (/dev/stdout prints); a "
                        "directory or socket is refused; never the --profile file")
    parser.add_argument("--force", action="store_true",
                        help="with --output: replace FILE if it is an existing file (atomically, keeping its mode)")
    parser.add_argument("--gpus", type=_positive_int, metavar="N",
                        help="with --check / --explain: check for N GPUs (overrides the profile's parallel.gpus): the "
                        "multi-GPU preflight, and with --resolution/--frames the token cap and the memory per rank")
    parser.add_argument("--explain", metavar="KEY",
                        help="what option KEY does: its values, rules with their verdict here, the runtime step, "
                        "the LTX-2 flag (with --profile / --capability)")
    tune = parser.add_argument_group("tuning (--tune: time each value of the speed options here; `auto` follows)")
    tune.add_argument("--tune", action="store_true",
                      help="time every runnable value of the speed options at an LTX-2 run's shapes, each in a "
                      "subprocess; cache the results (auto then picks the fastest measured) and exit")
    tune.add_argument("--resolution", metavar="WxH", help=f"the run's width x height, multiples of 32 up to "
                      f"{MAX_SIDE} (default {DEFAULT_RUN.width}x{DEFAULT_RUN.height}); with --check: "
                      "plan the run's memory per stage against the GPU's free memory")
    tune.add_argument("--frames", type=_positive_int, metavar="N",
                      help=f"the run's frames, 8k+1 up to {MAX_FRAMES} (default {DEFAULT_RUN.frames})")
    tune.add_argument("--batch", type=_positive_int, metavar="B", help="the run's batch (default 1)")
    tune.add_argument("--budget", type=_seconds, metavar="S",
                      help=f"seconds of measuring (default {DEFAULT_BUDGET:g}); what does not fit is reported as skipped")
    tune.add_argument("--options", metavar="KEYS",
                      help="comma-separated options to tune, or 'all' (default: diffvae.na_backend, "
                      "transformer.attention, transformer.quantization, compile.enabled, diffvae.mode; 'all' adds "
                      "compile.mode)")
    tune.add_argument("--runs", type=_positive_int, metavar="N",
                      help="generations you will run in one process (default: as cached, else 1): auto of "
                      "compile.enabled and diffvae.mode counts a compile's one-off cost over them")
    tune.add_argument("--fresh", action="store_true", help="measure again instead of reusing the cache")
    parser.add_argument("--ledger", metavar="FILE", help="the app's Runs tab reads this run ledger (default: the "
                        "user data directory's ltx-tui/runs.jsonl, where `ltx-tui run` appends)")
    parser.add_argument("--list-capabilities", action="store_true", help="list the capability presets and exit")
    parser.add_argument("--version", action="version", version=f"ltx-tui {TOOL_VERSION}")
    return parser


def _run_shapes(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The run --check plans memory for (default: DEFAULT_RUN)."""
    from backends.config.ltx2_shapes import RunShapes, parse_resolution

    try:
        return RunShapes(*(parse_resolution(args.resolution) if args.resolution else (DEFAULT_RUN.width, DEFAULT_RUN.height)),
                         args.frames or DEFAULT_RUN.frames, args.batch or DEFAULT_RUN.batch)
    except ValueError as e:
        parser.error(str(e))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("run", "runs"):
        from ltx_tui.run import run_main, runs_main

        return (run_main if argv[0] == "run" else runs_main)(argv[1:])
    parser = build_parser()
    # argparse takes an unambiguous prefix of an option: --j is --json, --tu is --tune (--t is ambiguous)
    parser.json_errors = any(len(a) >= 3 and "--json".startswith(a) for a in argv)
    parser.tune = any(len(a) >= 4 and "--tune".startswith(a) for a in argv)
    args = parser.parse_args(argv)
    if args.output and not (args.ltx_args or args.tune):
        parser.error("--output goes with --check --ltx-args or --tune")
    if args.output == "":
        parser.error("--output was given an empty path; name a file (/dev/stdout prints)")
    refuse_empty(parser, args, ("explain", "capability", "ledger", "profile"))
    if args.force and not args.output:
        parser.error("--force goes with --output")
    tune_only = [f"--{n}" for n in ("budget", "options", "runs") if getattr(args, n) is not None] + \
        (["--fresh"] if args.fresh else [])
    if tune_only and not args.tune:
        parser.error(f"{', '.join(tune_only)} go{'es' if len(tune_only) == 1 else ''} with --tune")
    if args.ledger and (args.check or args.tune or args.explain or args.list_capabilities):
        parser.error("--ledger goes with the app (and with `ltx-tui run` / `ltx-tui runs`)")
    shape_flags = [f"--{n}" for n in ("resolution", "frames", "batch") if getattr(args, n) is not None]
    if shape_flags and not (args.tune or args.check):
        parser.error(f"{', '.join(shape_flags)} go{'es' if len(shape_flags) == 1 else ''} with --tune or --check "
                     "(the memory plan)")
    if args.timeout is not None and (args.tune or args.explain or args.list_capabilities or args.check and not args.smoke):
        parser.error("--timeout goes with --check --smoke, or with the app (the seconds each smoke check may take)")
    timeout = SMOKE_TIMEOUT if args.timeout is None else args.timeout
    if args.gpus is not None and not (args.check or args.explain) or args.gpus is not None and args.tune:
        parser.error("--gpus goes with --check or --explain (parallel.gpus for the check)")
    if args.tune:
        if args.check or args.explain or args.smoke or args.ltx_args or args.strict:
            parser.error("--tune runs on its own (with --profile, --resolution, --frames, --batch, --budget, "
                         "--options, --runs, --fresh, --json, --output, --force)")
        if args.output and _refuse_output(args):
            return 2
        from ltx_tui.tune import run_tune

        return run_tune(profile_path=args.profile, capability=args.capability, resolution=args.resolution or f"{DEFAULT_RUN.width}x{DEFAULT_RUN.height}",
                        frames=args.frames or DEFAULT_RUN.frames, batch=args.batch or DEFAULT_RUN.batch,
                        budget=args.budget or DEFAULT_BUDGET, options=args.options, runs=args.runs,
                        fresh=args.fresh, as_json=args.json, output=args.output)
    if args.explain:
        ignored = [f"--{n.replace('_', '-')}" for n in ("check", "json", "strict", "smoke", "ltx_args", "resolution",
                                                         "frames", "batch", "list_capabilities") if getattr(args, n)]
        if ignored:  # it printed the text and took none of them
            parser.error(f"--explain runs on its own (with --profile, --capability, --gpus): it takes no "
                         f"{', '.join(ignored)}")
    if args.list_capabilities:
        from ltx_tui.check import list_capabilities

        return list_capabilities()
    if args.explain:
        from ltx_tui.check import explain_option

        return explain_option(args.explain, profile_path=args.profile, capability=args.capability, gpus=args.gpus)
    if args.check:
        from ltx_tui.check import run_check

        if args.output and _refuse_output(args):
            return 2
        return run_check(profile_path=args.profile, capability=args.capability, as_json=args.json,
                         strict=args.strict, smoke=args.smoke, ltx=args.ltx_args, timeout=timeout,
                         output=args.output, force=args.force, run=_run_shapes(parser, args) if shape_flags else None,
                         gpus=args.gpus)
    if args.json or args.strict or args.smoke or args.ltx_args:
        parser.error("--json, --strict, --smoke and --ltx-args go with --check (--json also with --tune)")
    if not sys.stdout.isatty():
        print("ltx-tui: the app needs a terminal; use `ltx-tui --check` in scripts (see --help)", file=sys.stderr)
        return 2
    from ltx_tui.app import run  # textual is imported only here

    return run(args.profile, args.capability, ledger=Path(args.ledger) if args.ledger else None,
               smoke_timeout=timeout)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (`kill`, `timeout`, a dropped SSH session): unwinds like ctrl-c, so every
    worker's process group is killed on the way out; the exit code is 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame) -> None:
    raise Terminated(signum)


def _stopped_json(said: str, code: int) -> str:
    """The JSON a stopped `--tune --json` or `--check --json` answers: the shape of each one's errors."""
    if "--tune" in sys.argv[1:]:
        from ltx_tui.tune import usage_json

        return usage_json(said, code)
    from ltx_tui.usage import error_json

    return error_json("interrupted", said, code=code)


def entry() -> None:
    """The console script: exit codes as documented, never a traceback on the terminal, no worker
    left running (ctrl-c 130, SIGTERM 143, SIGHUP 129; `ltx-tui run` keeps the default handling)."""
    import signal

    from backends.machine.worker import kill_all

    handled = () if sys.argv[1:2] in (["run"], ["runs"]) else (signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.signal(signum, _terminate) for signum in handled}
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_PIPE
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        code = 128 + signum
        said = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        try:  # after a SIGHUP the terminal may be gone
            print(f"ltx-tui: {said}", file=sys.stderr)
            if "--json" in sys.argv[1:] and sys.argv[1:2] not in (["run"], ["runs"]):  # a script reads one object
                print(_stopped_json(said, code), flush=True)
        except OSError:
            pass
    except Exception as e:
        path = log_internal_error()
        print(f"ltx-tui: internal error: {type(e).__name__}: {e} (traceback in {path})", file=sys.stderr)
        code = EXIT_INTERNAL
    finally:  # the clean-up is not interrupted; the handlers are put back after it
        quiet = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, *handled)}
        kill_all()
        for signum, handler in {**quiet, **before}.items():
            signal.signal(signum, handler)
    sys.exit(code)


if __name__ == "__main__":
    entry()
