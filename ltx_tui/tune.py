"""`ltx-tui --tune`: measure the speed options on this machine, headless. Never imports textual.

Exit codes: 0 tuned (at least one candidate measured; a cache that cannot be written is a
warning), 1 nothing could be measured (also: shapes too big for a machine without CUDA, refused
at once), 2 usage or profile error, 3 internal error, 130 ctrl-c / 143 SIGTERM / 129 SIGHUP
(the workers are killed with their process group).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import TextIO

from backends.config import profile as profmod
from backends.config.ltx2_shapes import RunShapes
from backends.config.options import CompileEnabled, Profile, show_value
from backends.config.plan import resolve
from backends.config.run_length import UNIT, auto_choice, length_of, run_calls
from backends.machine import capability as capmod
from backends.machine.nvml import NvmlSession
from backends.machine.tuned import RUNNING, Candidate, Tuned, load_quick
from backends.tune.candidates import DEFAULT_OPTIONS, OPTIONS, timed_compiled
from backends.tune.run import can_time, cpu_refusal, fits_cpu, tune
from ltx_tui.usage import profile_fields

TUNE_SCHEMA_VERSION = 1
# the tuned options that have an auto value
AUTO_OPTIONS = ("diffvae.na_backend", "transformer.attention", "compile.enabled", "diffvae.mode")
AUTO_WORD = {"transformer.attention": "automatic"}  # the value that lets the plan choose, where not "auto"
EXIT_OK, EXIT_NOTHING, EXIT_USAGE = 0, 1, 2


def parse_options(text: str | None) -> tuple[str, ...]:
    """'all', or a comma-separated list of tunable option keys; ValueError naming the allowed ones."""
    if not text:
        return DEFAULT_OPTIONS
    if text.strip() == "all":
        return OPTIONS
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in keys if k not in OPTIONS]
    if bad or not keys:
        raise ValueError(f"--options {text!r}: {', '.join(bad) or 'empty'} cannot be tuned; expected 'all' or "
                         f"a comma-separated list of {', '.join(OPTIONS)}")
    return tuple(k for k in OPTIONS if k in keys)


def _number(x: float | None, width: int, form: str) -> str:
    return f"{x:{width}{form}}" if x is not None else f"{'-':>{width}}"


def candidate_line(c: Candidate, chosen: bool = False) -> str:
    """One row: ms, max error, first call cold and from the warm compile cache (s), the mark."""
    numbers = " ".join((_number(c.ms, 10, ".3f"), _number(c.max_error, 9, ".2e"), _number(c.warmup_s, 8, ".2f"),
                        _number(c.warmup_cached_s, 8, ".2f")))
    return f"  {c.option:<25} {c.value:<27} {c.status:<10} {numbers}  {'chosen' if chosen else '':<7} {c.reason}".rstrip()


def _auto_value(option: str, value: str):
    """A candidate's value as the plan's effective value (compile.enabled: a boolean)."""
    return CompileEnabled(value).plain() if option == "compile.enabled" else value.split(":")[0]


def pinned(profile: Profile, chosen: dict[str, str]) -> Profile:
    """`profile` with the chosen values pinned (a NATTEN kernel pins backend and kernel)."""
    values = dict(chosen)
    if values.get("diffvae.na_backend", "").startswith("natten:"):
        values["diffvae.na_backend"], values["diffvae.natten_kernel"] = values["diffvae.na_backend"].split(":")
    return profile.replace(**values)


def to_json(tuned: Tuned, shapes: RunShapes, seconds: float, reused: int, auto: dict, code: int) -> dict:
    return {"schema_version": TUNE_SCHEMA_VERSION, "tool_version": profmod.TOOL_VERSION,
            "capability_fingerprint": tuned.fingerprint, "shapes": shapes.to_dict(), "budget_s": tuned.budget_s,
            "runs": tuned.runs, "seconds": round(seconds, 2), "from_cache": reused,
            "candidates": [{"option": c.option, "value": c.value, "status": c.status, "ms": c.ms,
                            "max_error": c.max_error, "reason": c.reason, "seconds": c.seconds,
                            **({"warmup_s": c.warmup_s, "warmup_cached_s": c.warmup_cached_s}
                               if c.option in UNIT else {})}
                           for c in tuned.candidates],
            "chosen": tuned.chosen(run_calls(tuned)), "auto": auto, "notes": list(tuned.notes), "exit_code": code}


def usage_json(message: str, code: int = EXIT_USAGE, **extra) -> str:
    """`--tune --json`'s answer to a usage error (exit 2), or with `code` to a tune it refuses."""
    return json.dumps({"schema_version": TUNE_SCHEMA_VERSION, "tool_version": profmod.TOOL_VERSION, "error": message,
                       **extra, "exit_code": code})


def run_tune(*, profile_path: str | None, capability: str | None, resolution: str, frames: int, batch: int,
             budget: float, options: str | None, fresh: bool, as_json: bool, output: str | None,
             runs: int | None = None,
             stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Tune here and report (`runs`: the generations a process will run; None: as cached, else 1);
    returns the exit code."""
    from backends.config.ltx2_shapes import parse_resolution

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr

    def usage(message: str, **extra) -> int:
        print(f"ltx-tui: {message}", file=stderr)
        if as_json:
            print(usage_json(message, **extra), file=stdout)
        return EXIT_USAGE

    if capability:
        return usage(f"--tune measures this machine; --capability {capability} describes another one")
    try:
        shapes = RunShapes(*parse_resolution(resolution), frames, batch)
        keys = parse_options(options)
    except ValueError as e:
        return usage(str(e))
    profile = Profile()
    if profile_path:
        try:
            profile, warnings = profmod.read(profile_path)
        except profmod.ProfileError as e:  # `profile`: --check --json's fields of each problem
            return usage(f"profile error: {e}", profile=profile_fields(e))
        for w in warnings:
            print(w, file=stderr)
    t0 = time.monotonic()
    if not fresh and not output:  # all of it cached: shown without probing (no torch import, no CUDA)
        hit = load_quick(shapes.label)
        if hit is not None and runs in (None, hit.runs) and complete(hit, keys):  # another --runs: stored below
            asked = [o for o in AUTO_OPTIONS if o in keys and str(profile.get(o)) in ("auto", "automatic")]
            auto = {o: _auto_value(o, v) for o, v in hit.chosen(run_calls(hit)).items() if o in asked and o not in UNIT}
            decided = {o: auto_choice(o, hit, length_of(hit, None), cuda=timed_compiled(hit))  # as the plan
                       for o in asked if o in UNIT}
            auto.update({o: _auto_value(o, v) for o, (v, _) in decided.items()})
            reasons = {o: why for o, (_, why) in decided.items()}
            cached = sum(c.status != "skipped" for c in hit.candidates if c.option in keys)
            return _report(hit, shapes, keys, auto, time.monotonic() - t0, as_json, stdout, cached,
                           "all from the cache, found without probing", reasons)

    def refuse(message: str) -> int:
        print(f"ltx-tui: --tune: {message}. `auto` keeps its built-in choices for this machine.", file=stderr)
        if as_json:
            print(usage_json(message, EXIT_NOTHING, shapes=shapes.to_dict()), file=stdout)
        return EXIT_NOTHING

    no_gpu = _no_gpu_seen(shapes)  # shapes too big for a CPU and no GPU at all: said before importing torch
    if no_gpu:
        return refuse(cpu_refusal(shapes, no_gpu))
    cap = capmod.probe()
    if not can_time(cap, shapes):
        return refuse(cpu_refusal(shapes, cap.torch.cuda_reason or "no CUDA device"))
    gpu = f"{cap.gpus[0].name} ({cap.gpus[0].sm})" if cap.cuda else "CPU (no CUDA device)"
    print(f"ltx-tui --tune   {gpu}   {shapes.label}: DiT {shapes.dit_tokens} tokens, DiffVAE "
          f"{len(shapes.na_stages())} NA stages   budget {budget:g} s", file=stderr if as_json else stdout, flush=True)

    def progress(done: int, total: int, c: Candidate | None) -> None:  # on stderr: --json's stdout stays one object
        if c is not None and c.status == RUNNING:
            print(f"  [{done + 1}/{total}] {c.option} = {c.value}: measuring...", file=stderr, flush=True)
        elif c is not None:
            ms = f" {c.ms:.3f} ms" if c.ms is not None else ""
            print(f"  [{done}/{total}] {c.option} = {c.value}: {c.status}{ms}", file=stderr, flush=True)

    def waiting(message: str) -> None:
        print(f"ltx-tui: {message} (ctrl-c stops)", file=stderr, flush=True)

    tuned = tune(profile, cap, shapes, options=keys, budget=budget, fresh=fresh, runs=runs, on_event=progress,
                 on_wait=waiting, started=t0)
    problems = [note for note in tuned.notes if not note.startswith("cached in")]
    for i, note in enumerate(problems, 1):
        print(f"ltx-tui: warning: {note}{'; the results are printed below' if i == len(problems) else ''}", file=stderr)
    plan = resolve(profile, cap, tuned)
    auto = {d.option: d.effective for d in plan if d.option in keys and str(d.requested) in ("auto", "automatic")}
    if output:
        try:
            profmod.save(pinned(profile, tuned.chosen(run_calls(tuned))), output, capability=cap, overwrite=True)
        except (OSError, profmod.ProfileError) as e:
            return usage(f"--output {output}: cannot write ({getattr(e, 'strerror', None) or e})")
    code = _report(tuned, shapes, keys, auto, time.monotonic() - t0, as_json, stdout, tuned.reused,
                   "none from the cache (--fresh)" if fresh else f"{tuned.reused} of them from the cache",
                   {o: plan[o].chain[-1].reason for o in auto})
    if output and not as_json:
        print(f"wrote {output} with the chosen values pinned", file=stdout)
    return code


def _no_gpu_seen(shapes: RunShapes) -> str:
    """Why there is no CUDA device here when NVML sees no GPU and `shapes` are too big for a CPU
    (found without importing torch: CUDA needs a GPU NVML sees), else ""."""
    if fits_cpu(shapes):
        return ""
    session = NvmlSession()
    try:
        info, _, gpus = capmod.read_nvml(session, timeout=5.0)
    finally:
        session.close()
    return "" if gpus else (info.reason or "NVML sees no NVIDIA GPU")


def complete(tuned: Tuned, keys: tuple[str, ...]) -> bool:
    """Whether `tuned` has every option of `keys`, none of it cut short by a budget or a cancel."""
    return all(any(c.option == k for c in tuned.candidates) for k in keys) and not any(
        c.option in keys and c.status == "skipped" and c.reason.startswith(("budget", "cancelled"))
        for c in tuned.candidates)


def _report(tuned: Tuned, shapes: RunShapes, keys: tuple[str, ...], auto: dict, seconds: float, as_json: bool,
            stdout: TextIO, from_cache: int, cached_note: str, reasons: dict | None = None) -> int:
    """Print the tune (text table or JSON); returns the exit code."""
    chosen = {k: v for k, v in tuned.chosen(run_calls(tuned)).items() if k in keys}
    code = EXIT_OK if chosen else EXIT_NOTHING
    rows = [c for c in tuned.candidates if c.option in keys]
    if as_json:
        doc = to_json(dataclasses.replace(tuned, candidates=tuple(rows)), shapes, seconds, from_cache, auto, code)
        json.dump(doc, stdout, indent=2)
        stdout.write("\n")
        return code
    print(f"\n  {'option':<25} {'value':<27} {'status':<10} {'ms':>10} {'max err':>9} {'first s':>8} "
          f"{'cached s':>8}", file=stdout)
    for c in rows:
        print(candidate_line(c, chosen.get(c.option) == c.value and c.status == "measured"), file=stdout)
    runs = f"{tuned.runs} run{'s' if tuned.runs != 1 else ''}"
    over = f"; {', '.join(o for o in chosen if o in UNIT)} for {runs} a process, compile counted" \
        if any(o in chosen for o in UNIT) else ""
    print("\nchosen: " + (", ".join(f"{k} = {v}" for k, v in chosen.items()) or "nothing (nothing measured)") + over,
          file=stdout)
    for option, value in auto.items():
        why = (reasons or {}).get(option) or tuned.why(option, chosen[option])
        print(f"auto:   {option} {AUTO_WORD.get(option, 'auto')} -> {show_value(value)} ({why})", file=stdout)
    ran = sum(c.status != "skipped" for c in rows)  # measured, inaccurate or failed
    skipped = f"; {len(rows) - ran} skipped: the reason says why" if ran < len(rows) else ""
    print(f"tuned in {seconds:.2f} s ({len(rows)} values: {ran} ran, {cached_note}{skipped})"
          + "".join(f"; {n}" for n in tuned.notes), file=stdout)
    return code
