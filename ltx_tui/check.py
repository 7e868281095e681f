"""`ltx-tui --check`: headless validation with text or JSON output. Never imports textual.

Exit codes: 0 runnable as asked (fallbacks and warnings reported), 1 some option cannot
run here (or any fallback/warning under --strict, or a failed smoke check), 2 usage,
profile or capability file error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, TextIO

from backends.machine import capability as capmod
from backends.machine import textfile
from backends.machine.text import printable, printable_lines
from backends.machine.presets import load_capability
from backends.config.run_length import run_calls
from backends.config import profile as profmod
from backends import smoke as smokemod
from backends.config.options import SCHEMA_VERSION, Profile, show_value, toml_value
from backends.config.ltx2_shapes import DEFAULT_RUN, RunShapes
from backends.config.memory import GIB, MemoryPlan, plan_memory
from backends.config.plan import Plan, plan_here, tuned_note
from backends.config.rules import Decision, Status, natten_kernels, summarize
from backends.ltx_args import ltx_args
from ltx_tui.usage import error_json, profile_fields

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2

_COLOURS = {Status.OK: "32", Status.FALLBACK: "33", Status.WARNING: "33", Status.ERROR: "31"}


def _colour(enabled: bool):
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if enabled else text
    return paint


def use_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 1024**3:.1f}"


def gpu_line(g: capmod.GPU) -> str:
    parts = [f"[{g.index}] {g.name}", g.sm]
    if g.memory_used is not None:
        parts.append(f"{_gib(g.memory_used)}/{_gib(g.memory_total)} GiB")
    elif g.memory_total is not None:
        parts.append(f"{_gib(g.memory_total)} GiB")
    if g.utilization is not None:
        parts.append(f"util {g.utilization}%")
    if g.temperature is not None:
        parts.append(f"{g.temperature}°C")
    if g.power_draw is not None:
        parts.append(f"{g.power_draw:.0f}/{g.power_limit or 0:.0f} W")
    if g.sm_clock is not None:
        parts.append(f"{g.sm_clock}/{g.mem_clock} MHz")
    if g.errors:
        parts.append("(" + "; ".join(f"{k}: {v}" for k, v in g.errors.items()) + ")")
    return "  ".join(parts)


def package_line(p: capmod.Package, natten: dict | None = None) -> str:
    """One package; `natten`: which NATTEN kernels run here (for the natten row)."""
    head = f"{p.name:<20} {(p.version or '-'):<12}"
    if not p.available:
        return f"{head} no   {p.reason}"
    notes = []
    if "has_libnatten" in p.details:
        notes.append("libnatten" if p.details["has_libnatten"] else "no libnatten")
    if natten is not None:
        notes.append("kernels: " + (", ".join(k for k, a in natten.items() if a.available) or "none"))
    parts = [k for k in capmod.LTX_KERNELS_PARTS if p.details.get(k)]
    if p.name == "ltx_kernels":
        notes.append("builds: " + (", ".join(parts) or "none"))
    if p.details.get("imported") is False:
        notes.append("installed, not imported (no CUDA device)")
    return f"{head} yes  {'; '.join(notes)}".rstrip()


def render_text(cap: capmod.Capability, profile_label: str, warnings: list[str], decisions: list[Decision],
                colour: bool) -> str:
    paint = _colour(colour)
    out = [f"ltx-tui --check   capability: {cap.source}   profile: {printable(profile_label)}", "", "GPUs"]
    if cap.gpus:
        out += ["  " + gpu_line(g) for g in cap.gpus]
        if cap.nvml.ordinal_match:
            out.append(f"  CUDA ordinals matched by {cap.nvml.ordinal_match}")
    else:
        out.append("  none visible")
    if not cap.nvml.available:
        out.append(f"  NVML: {cap.nvml.reason}")
    else:
        out.append(f"  driver {cap.nvml.driver_version or '?'}, CUDA driver {cap.nvml.cuda_driver_version or '?'}")
    t = cap.torch
    if t.available:
        cuda = f"CUDA {t.cuda}" if t.cuda else "no CUDA build"
        out.append(f"  torch {t.version} ({cuda}, cuDNN {t.cudnn or '-'})"
                   + ("" if t.cuda_available else f": {t.cuda_reason}"))
    else:
        out.append(f"  torch: {t.reason}")
    kernels = natten_kernels(cap)
    out += ["", "Packages"] + ["  " + package_line(p, kernels if p.name == "natten" else None)
                               for p in cap.packages.values()]
    sdpa = ", ".join(f"{n} {'yes' if a.available else 'no'}" for n, a in cap.sdpa.items())
    out.append(f"  {'sdpa':<20} {'':<12} {sdpa}")
    out += [""] + [paint(w, "33") for w in warnings] + (["" ] if warnings else [])
    out.append("Options (requested -> effective)")
    width = max(len(d.option) for d in decisions)
    for d in decisions:
        status = paint(f"{d.status.value:<8}", _COLOURS[d.status])
        line = f"  {status} {d.option:<{width}}  {show_value(d.requested)} -> {d.effective_text}"
        if len(d.chain) == 1 and d.status is Status.OK:
            out.append(f"{line}   {d.chain[0].reason}")
            continue
        out.append(line)
        for step in d.chain:
            out.append(f"{'':>12}{step.text}")
        if d.remedy and d.status is not Status.OK:
            out.append(f"{'':>12}fix: {d.remedy}")
    return "\n".join(out) + "\n"


def summary_line(decisions: list[Decision], results: list, code: int, memory: MemoryPlan | None = None,
                 strict_warnings: int = 0) -> str:
    """`strict_warnings`: the profile's and capability's warnings that --strict counted."""
    s = str(summarize(decisions))
    if strict_warnings:
        s += f"; {strict_warnings} profile/capability warning(s) (--strict)"
    if results:
        s += "; smoke " + smokemod.summary(results)
    if memory is not None:
        s += f"; memory {memory.verdict().split(' (')[0]}"
    verdict = {0: "runnable as asked", 1: "cannot run as asked"}[code]
    return f"\nSummary: {s} -> exit {code} ({verdict})\n"


def decision_dict(d: Decision) -> dict[str, Any]:
    data = dataclasses.asdict(d)
    data["status"] = d.status.value
    return data


def _shown(kind: str, message: str) -> str:
    """A usage error's message on stderr: a profile's a problem a line (each line already escaped by
    ProfileError), any other on one line with its control characters escaped."""
    return printable_lines(message) if kind == "profile" else printable(message)


def smoke_line(row) -> str:
    err = "-" if row.max_error is None else f"{row.max_error:.2e}"
    return f"  {row.status:<9} {row.name:<34} {row.seconds:7.2f} s  max err {err:<9} {row.message}"


def _load(profile_path: str | None, capability: str | None, usage_error, gpus: int | None = None) -> tuple | int:
    """(profile, its warnings, capability, its warnings), or the exit code of a usage error. The
    profile is read and checked before the live probe (which imports torch); `gpus` (`--gpus N`)
    overrides its parallel.gpus."""
    warnings: list[str] = []
    cap_warnings: list[str] = []
    profile = Profile()
    if profile_path == "":
        return usage_error("profile", "--profile was given an empty path; name a TOML profile file, or leave "
                                      "--profile out for the default profile")
    if profile_path:
        try:
            profile, read_warnings = profmod.read(profile_path)
        except profmod.ProfileError as e:
            return usage_error("profile", str(e), profile_fields(e))
        warnings = [str(w) for w in read_warnings]
    if gpus is not None:
        from backends.config.options import InvalidValue

        try:
            profile = profile.replace(**{"parallel.gpus": gpus})
        except InvalidValue as e:
            return usage_error("usage", f"--gpus {gpus}: {e}")
    try:
        cap = load_capability(capability, cap_warnings) if capability else capmod.probe()
    except capmod.CapabilityError as e:
        return usage_error("capability", str(e), e.fields)
    return profile, warnings, cap, cap_warnings


def explain_option(key: str, *, profile_path: str | None, capability: str | None, gpus: int | None = None,
                   stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """`ltx-tui --explain KEY`: exit 0, 1 where KEY's decision here is an error (it cannot run as
    asked, as `--check` exits), or 2 for an unknown key / unreadable input."""
    from backends.config.options import OPTIONS_BY_KEY, suggest
    from backends.config.plan import explain

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if key not in OPTIONS_BY_KEY:
        hint = suggest(key, list(OPTIONS_BY_KEY))
        print(f"ltx-tui: unknown option {key!r}" + (f" ({hint})" if hint else "") + "; options: "
              + ", ".join(OPTIONS_BY_KEY), file=stderr)
        return EXIT_USAGE

    def usage_error(kind: str, message: str, fields: dict | None = None) -> int:
        print(f"ltx-tui: {kind} error: {_shown(kind, message)}", file=stderr)
        return EXIT_USAGE

    loaded = _load(profile_path, capability, usage_error, gpus)
    if isinstance(loaded, int):
        return loaded
    profile, warnings, cap, cap_warnings = loaded
    for w in warnings + cap_warnings:
        print(w, file=stderr)
    plan = plan_here(profile, cap)
    stdout.write(explain(key, plan))
    return EXIT_ERRORS if plan[key].status is Status.ERROR else EXIT_OK


def free_bytes(cap: capmod.Capability, profile: Profile) -> int | None:
    """Free memory of the profile's first GPU: total minus what is in use (other processes),
    when NVML says; a preset's total. With several GPUs the least free of those the run uses
    (every rank holds a full DiT: the fullest GPU decides)."""
    from backends.config.rules import Facts

    if not cap.gpus:
        return None
    facts = Facts(cap, profile)
    gpus = facts.used_gpus if facts.multi else [facts.gpu]
    free = [g.memory_total - (g.memory_used or 0) for g in gpus if g is not None and g.memory_total is not None]
    return min(free) if free else None


def memory_lines(plan: MemoryPlan, gpu: str) -> list[str]:
    width = 30
    top = max([s.peak_bytes for s in plan.stages] + [plan.free_bytes or 0])
    out = []
    if plan.ranks:
        peak_rank = plan.peak_rank
        out.append(f"Memory at {plan.shapes.label} per rank, {plan.world_size} ranks (peak of each; {gpu})")
        for r in plan.ranks:
            n = max(1, round(width * r.peak.peak_bytes / top))
            mark = "  <- peak rank" if r is peak_rank else ""
            out.append(f"  {f'rank {r.rank} (GPU {r.device})':<16} {r.peak.peak_bytes / GIB:6.1f} GiB  "
                       f"{'#' * n:<{width}}  {r.peak.stage}{mark}")
        out.append(f"Rank {peak_rank.rank} per stage, peak:")
    else:
        out.append(f"Memory at {plan.shapes.label} (per stage, peak; {gpu})")
    for s in plan.stages:
        n = max(1, round(width * s.peak_bytes / top))
        out.append(f"  {s.stage:<16} {s.peak_bytes / GIB:6.1f} GiB  {'#' * n:<{width}}  {s.detail}")
    if plan.free_bytes is not None:
        out.append(f"  {'free':<16} {plan.free_bytes / GIB:6.1f} GiB  {'|' * round(width * plan.free_bytes / top)}")
    out.append(f"  {plan.verdict()}")
    label = "fix:" if plan.fits is False else "lower:"  # a run that fits has nothing to fix
    for change, peak in plan.fixes:
        out.append(f"  {label} {change:<56} -> peak {peak / GIB:.1f} GiB")
    return out


def _said(d) -> str:
    """'option = value: why', the option and value once where the message begins with them."""
    why = printable(d.message or "; ".join(st.reason for st in d.chain))
    head = f"{d.option} = {toml_value(d.requested)}"
    return why if why.startswith(head) else f"{head}: {why}"


def _why_not(plan: Plan, code: int, strict: bool, memory: MemoryPlan | None) -> list[str]:
    """Why `--check --ltx-args` exits non-zero (stderr; the command line itself goes to stdout):
    an option a line with its fix, then what the exit code means."""
    if code == 0:
        return []
    flagged = [d for d in plan if d.status is Status.ERROR or (strict and d.status is not Status.OK)]
    out = [f"ltx-tui: {d.status}: {_said(d)}" + (f" (fix: {printable(d.remedy)})" if d.remedy else "") for d in flagged]
    if memory is not None and memory.fits is False:
        out.append(f"ltx-tui: error: memory: {memory.verdict()}")
    cannot = any(d.status is Status.ERROR for d in flagged) or (memory is not None and memory.fits is False)
    out.append(f"ltx-tui: exit {code}: " + ("the profile cannot run here as asked" if cannot else
                                            "--strict counts the fallbacks and warnings above")
               + "; `ltx-tui --check` without --ltx-args shows every option")
    return out


def run_check(*, profile_path: str | None, capability: str | None, as_json: bool, strict: bool,
              smoke: bool = False, ltx: bool = False, timeout: float = smokemod.DEFAULT_TIMEOUT, output: str | None = None,
              force: bool = False, run: RunShapes | None = None, gpus: int | None = None,
              stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Validate a profile against a capability and report. Returns the exit code. `output`: where
    the LTX-2 command line goes (`textfile.write_atomically`; an existing file only with `force`).
    `run`: the run's shapes (the memory plan, and the checks that need them: the multi-GPU token
    cap); `gpus`: parallel.gpus for this check (`--gpus N`)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr

    def usage_error(kind: str, message: str, fields: dict | None = None) -> int:
        print(f"ltx-tui: {kind} error: {_shown(kind, message)}", file=stderr)
        if as_json:
            print(error_json(kind, message, fields), file=stdout)
        return EXIT_USAGE

    loaded = _load(profile_path, capability, usage_error, gpus)
    if isinstance(loaded, int):
        return loaded
    profile, warnings, cap, cap_warnings = loaded
    plan = plan_here(profile, cap, run=run)
    tuned = plan.tuned  # what `ltx-tui --tune` measured here (None for another machine's capability)
    if tuned is not None:
        from backends.tune.run import can_time

        tuned_text = tuned_note(tuned, run, can_time(cap, run or DEFAULT_RUN))
    code = plan.exit_code(strict=strict)
    if strict and (warnings or cap_warnings):  # --strict: the profile's and capability's warnings too
        code = max(code, EXIT_ERRORS)
    memory = plan_memory(plan, run, free_bytes(cap, profile)) if run is not None else None
    if memory is not None and memory.fits is False:
        code = EXIT_ERRORS
    label = profile_path or "the default profile"
    if ltx and output:  # the command line goes to the file, with --json too (the JSON names the file)
        try:
            textfile.write_atomically(output, ltx_args(plan, label).encode("utf-8"), overwrite=force)
        except textfile.OutputExists:
            return usage_error("output", f"{output} exists; pass --force to replace it", {"file": output})
        except textfile.OutputError as e:
            return usage_error("output", str(e), {"file": output, "problem": e.strerror})
        except OSError as e:
            return usage_error("output", f"{output}: cannot write ({e.strerror or e})", {"file": output})
        print(f"ltx-tui: wrote the LTX-2 command line to {printable(output)}", file=stderr)
    if ltx and not as_json:
        for w in warnings + cap_warnings:
            print(w, file=stderr)
        if not output:
            stdout.write(ltx_args(plan, label))
        for line in _why_not(plan, code, strict, memory):
            print(line, file=stderr)
        return code
    if not as_json:
        notes = warnings + cap_warnings
        if tuned is not None:
            notes = notes + [tuned_text]
        stdout.write(render_text(cap, profile_path or "default (no --profile)", notes, list(plan),
                                 use_colour(stdout)))
    if memory is not None and not as_json:
        gpu = f"{cap.gpus[0].name}, {cap.source}" if cap.gpus else f"no GPU, {cap.source}"
        stdout.write("\n" + "\n".join(memory_lines(memory, gpu)) + "\n")
    results = []
    if smoke:
        live = capmod.probe() if capability else None
        here = plan_here(profile, live) if live else plan
        specs = smokemod.plan_checks(here)
        if not as_json:
            note = (f" (planned for this machine: --capability {capability} describes another one)"
                    if capability else "")
            print(f"\nSmoke checks{note}: {len(specs)}, each in a subprocess, timeout {timeout:g} s",
                  file=stdout, flush=True)
        results = smokemod.run_all(specs, timeout, on_result=None if as_json else
                                   lambda i, r: print(smoke_line(r), file=stdout, flush=True))
        if any(r.status not in smokemod.NOT_FAILED for r in results):
            code = EXIT_ERRORS
    if as_json:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "tool_version": profmod.TOOL_VERSION,
            "capability": cap.to_dict(),
            "capability_fingerprint": cap.fingerprint(),
            "profile": {"path": profile_path, "values": profmod.to_data(dataclasses.replace(profile, generated=None)),
                        "warnings": warnings},
            "capability_warnings": cap_warnings,
            "tuned": None if tuned is None else {"shapes": tuned.shapes, "written": tuned.written,
                                                 "chosen": tuned.chosen(run_calls(tuned)),
                                                 "at_run_shape": tuned.shapes == (run or DEFAULT_RUN).label,
                                                 "note": tuned_text},
            "decisions": [decision_dict(d) for d in plan],
            "steps": [dataclasses.asdict(s) for s in plan.steps],
            "summary": dataclasses.asdict(plan.summary()),
            "memory": memory.to_dict() if memory is not None else None,
            "strict": strict,
            "exit_code": code,
        }
        if smoke:
            doc["smoke"] = [r.to_dict() for r in results]
            doc["smoke_machine"] = "this machine" if not capability else f"this machine, not {capability}"
        if ltx:
            doc["ltx_args"] = ltx_args(plan, label)
            doc["ltx_args_file"] = output or None  # where the same text was written (--output)
        json.dump(doc, stdout, indent=2)
        stdout.write("\n")
    else:
        stdout.write(summary_line(list(plan), results, code, memory,
                                  len(warnings) + len(cap_warnings) if strict else 0))
    return code


def list_capabilities(stdout: TextIO | None = None) -> int:
    from backends.machine.presets import PRESETS

    stdout = stdout or sys.stdout
    for pid, spec in PRESETS.items():
        gpu = f"{spec.gpu} (SM {spec.cc[0]}.{spec.cc[1]}, {spec.memory_gib} GiB)" if spec.gpu else "no GPU"
        pkgs = ", ".join(spec.packages + tuple(f"ltx_kernels.{p}" for p in spec.ltx_kernels_parts))
        lib = "" if spec.has_libnatten else " (natten without libnatten)"
        print(f"{pid:<8} {gpu}\n{'':<9}packages: {pkgs}{lib}", file=stdout)
    from backends.machine.presets import MULTI_GPU_BOXES

    print("\nAppend xN for N GPUs (e.g. h100x8); --capability also takes a JSON file saved from "
          "`ltx-tui --check --json`.", file=stdout)
    print("Multi-GPU boxes (peer access between their GPUs, ltx-kernels' all2all built for them): "
          + " ".join(MULTI_GPU_BOXES), file=stdout)
    return EXIT_OK
