"""Running the tune: candidates in worker processes, within a budget, cached.

`tune()` times each candidate (`candidates.candidates`) in a fresh interpreter with a timeout
(`machine.worker.Worker`: killed with its process group on timeout or cancel), reuses what
the cache already holds for the same machine and run shape (unless `fresh`), marks a candidate
whose output is outside its accuracy bound `inaccurate` (never chosen), skips what the budget
cannot fit, and stores the result. Progress goes to `on_event(done, total, candidate)`: a result,
None when only the count moved, or a `RUNNING` candidate when a worker starts measuring it.

Every value of an option whose first call may compile (compile.enabled, diffvae.mode) is timed in
a worker whose compile caches are an empty directory of its own (`warmup_s`: a cold first call);
what it compiled is then merged into the compile caches later processes use. A value that
compiles, and one whose cold first call took over WARM_AGAIN_S more than a steady call (the eager
decoder's Triton NA kernels: JIT and autotune, cached on disk too), gets a second worker that
times its first call again from them (`warmup_cached_s`): what a later run pays. `auto` weighs
that, so an eager value is not charged the cold first call that only a compiled one is spared.

Each option's prior (the value `auto` or the profile picks without a tune) is timed first, then
the other values: those whose first call compiles (compile.enabled, diffvae.mode: the large wins)
first, then those of the options whose prior measured quickest: a short budget still measures
every option, and the quick alternatives before the slow ones. A value stopped for
being over SLOWER x its option's fastest is known to be slower and cached as such; one the
budget cut short is not started again with no more time than it already had (a slow kernel,
e.g. NATTEN's flex-fna on a CPU, costs its share once, not on every run; the next tune gives it
what is left). A value timed while nothing of its option is measured yet takes at most
FIRST_SHARE of the budget left while others still wait (but at least SLOWER_MIN, COMPILE_MIN for a
compiled first call): one slow value never leaves the rest of the tune unmeasured. One tune times at a
time per cache directory (`tuned.tune_lock`): two at once would slow each other's timings.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from backends.config import values
from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile, show_value
from backends.config.plan import resolve
from backends.config.run_length import UNIT, counted
from backends.machine.capability import Capability
from backends.machine.tuned import RUNNING, Candidate, Tuned, load_tuned, store_tuned, tune_lock
from backends.machine.worker import Outcome, Worker
from backends.runtime.compile_cache import ENV, merge_compile_caches
from backends.tune.candidates import ALONE, DEFAULT_OPTIONS, Spec, candidates

DEFAULT_BUDGET = 150.0
MIN_TIMEOUT = 5.0  # a candidate is not started with less budget left than this
FINISH_S = 1.0  # kept back from the budget (at most 1% of it) for what follows the last worker
# A candidate may take SLOWER x the worker time of its option's fastest value so far (at least
# SLOWER_MIN s; COMPILE_MIN s for one whose first call compiles, which a compile makes long):
# one that needs longer is far slower and would only eat the budget.
SLOWER, SLOWER_MIN, COMPILE_MIN = 5.0, 20.0, 120.0
# An option's first value (nothing of its option measured yet) may take FIRST_SHARE of the budget
# left while others wait (at least SLOWER_MIN / COMPILE_MIN): a slow one, e.g. NATTEN's flex-fna on a
# CPU, no longer takes the whole budget and leaves every other option unmeasured.
FIRST_SHARE = 0.5
WARM_AGAIN_S = 1.0  # a cold first call this much over a steady call is timed again with warm caches
# in the reason of a row whose warm-cache first call was not timed; RETRY: cut short, timed by the next tune
WARM_UNTIMED, BUDGET_SPENT, RETRY = "first call with a warm compile cache not timed", "budget spent", "run again"
STOPPED, UNFINISHED = "stopped after", "budget spent after"  # how the reasons of those two skips start
# Without CUDA one candidate at LTX-2's shapes takes minutes (the DiffVAE's NA at 768x512x121 is
# ~100x the work at 224x224x9, whose tiled eager SDPA decode alone took 18 s on two cores): a CPU
# times at most CPU_MAX's video (width x height x frames x batch); larger shapes are refused at once.
CPU_MAX, CPU_STAND_IN = RunShapes(256, 224, 17), RunShapes(224, 224, 9)


def pixels(shapes: RunShapes) -> int:
    return shapes.width * shapes.height * shapes.frames * shapes.batch


def fits_cpu(shapes: RunShapes) -> bool:
    """Whether a machine without CUDA times `shapes` (else `cpu_refusal` says why not)."""
    return pixels(shapes) <= pixels(CPU_MAX)


def can_time(cap: Capability, shapes: RunShapes) -> bool:
    """Whether a tune can time `shapes` on the machine `cap` describes (a GPU, or shapes a CPU fits)."""
    return cap.cuda or fits_cpu(shapes)


def cpu_refusal(shapes: RunShapes, no_cuda: str, in_app: bool = False) -> str:
    """Why `shapes` (too big: not `fits_cpu`) are not timed on this machine, which has no CUDA
    device (`no_cuda` says why); the stand-in shapes as the command line or the app (`in_app`) sets them."""
    stand_in = (f"the Plan tab's run (w) at {CPU_STAND_IN.width}x{CPU_STAND_IN.height}, {CPU_STAND_IN.frames} frames"
                if in_app else f"--resolution {CPU_STAND_IN.width}x{CPU_STAND_IN.height} --frames {CPU_STAND_IN.frames}")
    return (f"no CUDA device here: {no_cuda}. At {shapes.label} ({pixels(shapes):,} video pixels) one candidate "
            f"takes minutes on a CPU, so nothing would be measured within the budget. A CPU times at most "
            f"{CPU_MAX.label} ({pixels(CPU_MAX):,} pixels): tune on the GPU machine, or time small stand-in "
            f"shapes here ({stand_in})")


def _spec_json(spec: Spec, shapes: RunShapes, na_backend: str, compile_cache: Path | None = None,
               first_only: bool = False) -> str:
    return json.dumps({"option": spec.option, "value": spec.value, "device": spec.device, "na_backend": na_backend,
                       "shapes": [shapes.width, shapes.height, shapes.frames, shapes.batch],
                       "compile_cache": None if compile_cache is None else str(compile_cache),
                       "first_only": first_only})


def first_call_compiles(spec: Spec) -> bool:
    """Whether the candidate's first call compiles (it gets a second, warm-cache process)."""
    return spec.option in UNIT and values.value(spec.option, spec.value).compiled


def large_win(spec: Spec) -> bool:
    """Whether the candidate is one of a run's large wins, timed right after the priors (a short
    budget on a slow machine ran out on fp8-cast and the attentions before fp8-scaled-mm, the
    DiT's largest win after compile): its first call compiles, or its value says so."""
    return first_call_compiles(spec) or values.value(spec.option, spec.value).large_win


def warm_again(spec: Spec, result: Candidate) -> bool:
    """Whether a candidate timed from cold caches gets a second, warm-cache process: it compiles, or
    its cold first call took over WARM_AGAIN_S more than a steady call (what it filled may be cached)."""
    return result.status == "measured" and (first_call_compiles(spec) or _needs_warm(result))


def _needs_warm(c: Candidate) -> bool:
    """A measured first call over WARM_AGAIN_S above a steady call."""
    return c.status == "measured" and c.warmup_s is not None and c.ms is not None and \
        c.warmup_s - c.ms / 1000 > WARM_AGAIN_S


def _warm_missing(c: Candidate) -> bool:
    """A cached row that should have its warm-cache first call and has not: never tried (an eager value
    timed by a tune before that rule) or cut short (budget, timeout, cancel). It is timed again; one
    whose second process failed is not (it would cost every later tune its time)."""
    if c.option not in UNIT or c.status != "measured" or c.warmup_cached_s is not None:
        return False
    try:
        compiled = values.value(c.option, c.value).compiled
    except (KeyError, ValueError):  # a value of another version: not weighed (`counted`)
        return False
    if not (_needs_warm(c) or compiled):
        return False
    return WARM_UNTIMED not in c.reason or RETRY in c.reason


def worker_argv() -> list[str]:
    """The command line of a worker that times one candidate (read from its stdin)."""
    return [sys.executable, "-m", "backends.tune"]


def _na_for_decode(done: list[Candidate]) -> str:
    """The NA backend a decoder candidate runs with: the fastest measured so far, else the one that
    can run here (left untimed, alone), else auto."""
    ranked = Tuned("", "", tuple(done)).ranked("diffvae.na_backend")
    alone = [c.value for c in done if c.option == "diffvae.na_backend" and c.reason.startswith(ALONE)]
    return (ranked[0].value if ranked else alone[0] if alone else "auto").split(":")[0]


def tune(profile: Profile, cap: Capability, shapes: RunShapes, *, options: tuple[str, ...] = DEFAULT_OPTIONS,
         budget: float = DEFAULT_BUDGET, fresh: bool = False, store: bool = True, runs: int | None = None,
         on_event: Callable[[int, int, Candidate | None], None] | None = None,
         cancel: threading.Event | None = None, on_wait: Callable[[str], None] | None = None,
         started: float | None = None) -> Tuned:
    """Measure the candidates of `options` at `shapes` on this machine (`cap` is its live
    capability) within `budget` seconds, counted from `started` (`time.monotonic()`, e.g. when the
    command began; the wait for another tune is not counted); returns and caches the result, with `runs` (the
    generations a process will run: what `auto` counts a compile over; None: as cached, else 1).
    The next worker starts
    (imports, CUDA) while the current one measures. `on_wait(message)`: another tune holds the
    machine and this one waits for it (`cancel` stops the wait). A cache that cannot be written
    loses nothing but the cache: the result's notes say why."""
    spent = 0.0 if started is None else max(0.0, time.monotonic() - started)
    with tune_lock(cancel, on_wait) as unlocked:
        spent += min(FINISH_S, budget / 100)
        tuned = _tune(profile, cap, shapes, options, budget, fresh, on_event, cancel, spent)
        earlier = load_tuned(cap, shapes.label)
        if earlier is not None:
            tuned = _kept_over_cancelled(tuned, earlier)
        held = set(earlier.candidates) if earlier is not None else set()  # results taken over, not timed again
        reused = sum(c in held and c.status != "skipped" for c in tuned.candidates)
        if earlier is not None and set(tuned.candidates) <= set(earlier.candidates):  # nothing new measured
            tuned = dataclasses.replace(tuned, written=earlier.written)
        if runs is None:
            runs = (earlier or tuned).runs
        tuned = dataclasses.replace(tuned, runs=runs)
        notes = (unlocked,) if unlocked else ()
        if store and not (unlocked and cancel is not None and cancel.is_set()):  # not after a cancelled wait
            try:
                stored = store_tuned(cap, tuned)
                tuned, notes = load_tuned(cap, shapes.label) or tuned, (f"cached in {stored}",)
            except OSError as e:
                notes += (f"not cached: cannot write {e.filename or 'the cache'} ({e.strerror or e})",)
    return dataclasses.replace(tuned, notes=notes, reused=reused)


def _kept_over_cancelled(tuned: Tuned, earlier: Tuned) -> Tuned:
    """`tuned` with each row a cancel left untimed taken from `earlier` where that one has more to say
    (measured, failed, cut short): a cancelled `--fresh` tune (the app's `U`, then `c`) keeps what it
    did not time again."""
    kept = {(c.option, c.value): c for c in earlier.candidates if c.reason != "cancelled"}
    rows = tuple(kept.get((c.option, c.value), c) if c.status == "skipped" and c.reason == "cancelled" else c
                 for c in tuned.candidates)
    return dataclasses.replace(tuned, candidates=rows)


def _tune(profile: Profile, cap: Capability, shapes: RunShapes, options: tuple[str, ...], budget: float, fresh: bool,
          on_event: Callable[[int, int, Candidate | None], None] | None, cancel: threading.Event | None,
          spent: float = 0.0) -> Tuned:
    specs, not_timed = candidates(profile, cap, options)
    earlier = () if fresh else (load_tuned(cap, shapes.label) or Tuned("", "", ())).candidates
    cached = {(c.option, c.value): c for c in earlier
              if (c.status != "skipped" or c.reason.startswith(STOPPED))
              and (c.option not in UNIT or c.status != "measured" or counted(c.option, c))  # first call timed
              and not _warm_missing(c)}
    unfinished = {(c.option, c.value): c.seconds for c in earlier if c.reason.startswith(UNFINISHED) and c.seconds}
    done: list[Candidate] = [Candidate(o, v, "skipped", reason=why) for o, v, why in not_timed]
    prior = {d.option: show_value(d.effective) for d in resolve(profile, cap)}
    specs.sort(key=lambda s: (s.value.split(":")[0] != prior.get(s.option), options.index(s.option)))
    priors = sum(s.value.split(":")[0] == prior.get(s.option) for s in specs)
    to_run = sum((s.option, s.value) not in cached for s in specs)
    fastest: dict[str, tuple[float, float, str]] = {}  # option -> (ms, worker seconds, value)
    t0 = time.monotonic() - spent  # the budget's start
    spare: Worker | None = None
    try:
        for i in range(len(specs)):
            if i == priors:  # the other values: the large wins first (compiled ones, the fp8/int8 GEMMs), by
                specs[i:] = sorted(specs[i:], key=lambda s: (not large_win(s),  # quickest option, then the rest
                                                             fastest.get(s.option, (0.0, math.inf, ""))[1]))
            spec = specs[i]
            if on_event:
                on_event(i, len(specs), None)
            hit = cached.get((spec.option, spec.value))
            best = fastest.get(spec.option)
            left = budget - (time.monotonic() - t0)
            least = COMPILE_MIN if first_call_compiles(spec) else SLOWER_MIN
            ran = unfinished.get((spec.option, spec.value))
            if best:
                limit = min(left, max(least, SLOWER * best[1]))
            elif to_run > 1 and ran is None:  # others wait: they keep a share
                limit = min(left, max(least, FIRST_SHARE * left))
            else:  # the last to run, or cut short before: what is left (started only if more than it had)
                limit = left
            if hit is not None:
                result = hit
            elif cancel is not None and cancel.is_set():
                result = Candidate(spec.option, spec.value, "skipped", reason="cancelled")
            elif left < MIN_TIMEOUT:
                result = Candidate(spec.option, spec.value, "skipped",
                                   reason=f"{BUDGET_SPENT} ({budget:g} s): the next --tune times it (what this one "
                                   "measured stays cached); a larger --budget times all in one run")
            elif ran is not None and limit <= ran:
                to_run -= 1
                result = Candidate(spec.option, spec.value, "skipped", seconds=ran, reason=(
                    f"{UNFINISHED} {ran:g} s in an earlier tune, not started again with {limit:.0f} s; give it a "
                    f"--budget over {ran:g} s (or --fresh)"))
            else:
                to_run -= 1
                na = _na_for_decode(done)
                cold = Path(tempfile.mkdtemp(prefix="ltx-tui-tune-")) if spec.option in UNIT else None
                if on_event:  # which value is being measured now (a long one looks hung otherwise)
                    on_event(i, len(specs), Candidate(spec.option, spec.value, RUNNING))
                try:
                    current, spare = spare or _new_worker(), (_new_worker() if to_run > 0 or cold else None)
                    result = _result(spec, current.run(_spec_json(spec, shapes, na, cold), limit, cancel),
                                     limit, left, best)
                    if cold is not None and warm_again(spec, result):
                        current, spare = spare or _new_worker(), (_new_worker() if to_run > 0 else None)
                        result = _warm_again(current, spec, shapes, na, cold, result,
                                             budget - (time.monotonic() - t0), cancel)
                    elif cold is not None and result.status == "measured":
                        try:  # what its first call filled (Triton's kernels) still serves later runs
                            merge_compile_caches(cold)
                        except OSError:
                            pass  # a cache only: a later run fills it again
                finally:
                    if cold is not None:
                        shutil.rmtree(cold, ignore_errors=True)
            if result.status == "measured" and result.seconds and (best is None or result.ms < best[0]):
                fastest[spec.option] = (result.ms, result.seconds, spec.value)
            done.append(result)
            if on_event:
                on_event(i + 1, len(specs), result)
    finally:
        if spare is not None:
            spare.kill()
    order = {(s.option, s.value): i for i, s in enumerate(sorted(specs, key=lambda s: options.index(s.option)))}
    done.sort(key=lambda c: (options.index(c.option), order.get((c.option, c.value), len(order))))
    return Tuned(cap.fingerprint(), shapes.label, tuple(done), budget_s=budget)


def _new_worker() -> Worker:
    """A tune worker, done once it answers (a process that compiled is not waited for to exit)."""
    return Worker(worker_argv(), answer_ends=True)


def _result(spec: Spec, outcome: Outcome, limit: float, left: float, best: tuple | None) -> Candidate:
    """The candidate row for a worker's outcome."""
    row = outcome.last_json() if outcome.status == "done" else None
    if outcome.status == "cancelled":
        return Candidate(spec.option, spec.value, "skipped", reason="cancelled")
    if outcome.status == "timeout" and limit < left and best is not None:
        return Candidate(spec.option, spec.value, "skipped", reason=(
            f"{STOPPED} {limit:g} s: over {SLOWER:g}x the {best[1]:g} s that measuring {best[2]} took"))
    if outcome.status == "timeout" and limit < left:  # an option's first value, at its share of the budget
        return Candidate(spec.option, spec.value, "skipped", seconds=outcome.seconds, reason=(
            f"{UNFINISHED} {outcome.seconds:g} s, its share of the {left:.0f} s left (the rest kept for the "
            "other values); run again with a larger --budget"))
    if outcome.status == "timeout":
        return Candidate(spec.option, spec.value, "skipped", seconds=outcome.seconds,
                         reason=f"{UNFINISHED} {outcome.seconds:g} s; run again with a larger --budget")
    if row is None:
        return Candidate(spec.option, spec.value, "failed",
                         reason=f"worker exited {outcome.returncode}: {outcome.tail()}")
    return Candidate(spec.option, spec.value, row["status"], row.get("ms"), row.get("max_error"),
                     row.get("reason", "") + cache_note(row.get("compile_cache"), "cold process"), outcome.seconds,
                     row.get("warmup_s"))


def _warm_again(worker: Worker, spec: Spec, shapes: RunShapes, na: str, cold: Path, result: Candidate, left: float,
                cancel: threading.Event | None) -> Candidate:
    """`result` with `warmup_cached_s`: the candidate's first call again in a fresh process (`worker`),
    after what the first one compiled (into `cold`) was merged into the compile caches later runs use."""
    def untimed(why: str) -> Candidate:
        worker.kill()
        return dataclasses.replace(result, reason=f"{result.reason}; {WARM_UNTIMED}: {why}")

    try:
        merge_compile_caches(cold)
    except OSError as e:
        return untimed(f"cannot write the compile cache ({e.strerror or e})")
    if left < MIN_TIMEOUT:
        return untimed(f"{BUDGET_SPENT}; {RETRY} with a larger --budget (or --fresh)")
    outcome = worker.run(_spec_json(spec, shapes, na, first_only=True), min(left, max(SLOWER_MIN, result.seconds or 0)),
                         cancel)
    row = outcome.last_json() if outcome.status == "done" else None
    if row is None or not isinstance(row.get("warmup_s"), (int, float)):
        cut = outcome.status in ("timeout", "cancelled")  # timed again by the next tune (`_warm_missing`)
        return untimed(f"the second process {outcome.status}" + (f"; {RETRY}" if cut else "")
                       + (f" ({outcome.tail()})" if outcome.tail() else ""))
    return dataclasses.replace(result, warmup_cached_s=row["warmup_s"], seconds=round(
        (result.seconds or 0) + outcome.seconds, 2), reason=result.reason + cache_note(row.get("compile_cache"), "warm-cache process"))


_CACHE_LOGGERS = ("torch._inductor.codecache", "torch._functorch._aot_autograd.autograd_cache")


class _Bypasses(logging.Handler):
    """Why Inductor's or AOTAutograd's cache passed a graph by (their "Bypassing ..." messages)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Bypassing"):
            self.reasons.append(record.getMessage())


def compile_cache_counts(bypassed: list[str]) -> dict:
    """What this process's compiles found in the compile caches: graphs traced, and Inductor's FX
    graph and AOTAutograd's cache hits, misses and bypasses (with the first bypass's reason)."""
    from torch._dynamo.utils import counters

    fx, aot = counters["inductor"], counters["aot_autograd"]
    return {"graphs": counters["stats"]["unique_graphs"],
            "fx_graph": [fx["fxgraph_cache_hit"], fx["fxgraph_cache_miss"], fx["fxgraph_cache_bypass"]],
            "aot_autograd": [aot["autograd_cache_hit"], aot["autograd_cache_miss"], aot["autograd_cache_bypass"]],
            **({"bypassed": bypassed[0][:200]} if bypassed else {})}


def cache_note(counts: dict | None, process: str) -> str:
    """'; <process>: 12 graph(s) traced, Inductor's cache 12 hit / 0 miss / 0 bypass, ...' for a
    row's reason ('' without counts)."""
    if not isinstance(counts, dict):
        return ""
    hit, miss, bypass = counts.get("fx_graph", ("?",) * 3)
    ahit, amiss, abypass = counts.get("aot_autograd", ("?",) * 3)
    why = f" ({counts['bypassed']})" if counts.get("bypassed") else ""
    return (f"; {process}: {counts.get('graphs', '?')} graph(s) traced, Inductor's cache {hit} hit / {miss} miss / "
            f"{bypass} bypass, AOTAutograd's {ahit} / {amiss} / {abypass}{why}")


def worker(spec: dict) -> dict:
    """Time one candidate here (the worker process): {"status", "ms", "max_error", "reason"}, and
    "warmup_s" (its first call) for the options whose first call compiles; with "first_only" in
    `spec` only that call; with "compile_cache", torch.compile's caches in that directory."""
    import torch

    from backends.tune.measure import MEASURE, bound

    option, value, device = spec["option"], spec["value"], spec["device"]
    shapes = RunShapes(*spec["shapes"])
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    if spec.get("compile_cache"):  # read by Inductor and Triton when they first compile
        os.environ.update({var: str(Path(spec["compile_cache"]) / sub) for var, sub in ENV.items()})
    extra = {"na_backend": spec["na_backend"]} if option == "diffvae.mode" else {}
    if spec.get("first_only"):
        extra["first_only"] = True
    bypasses = _Bypasses()
    for name in _CACHE_LOGGERS:
        logging.getLogger(name).addHandler(bypasses)
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        ms, err, *warm = MEASURE[option](value, shapes, device, dtype, **extra)
    except torch.OutOfMemoryError:
        return {"status": "failed", "reason": f"out of memory at {shapes.label}"}
    except Exception as e:  # the row says what broke
        return {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    warmup = {"warmup_s": round(warm[0], 3), "compile_cache": compile_cache_counts(bypasses.reasons)} if warm else {}
    if spec.get("first_only"):
        return {"status": "measured", **warmup, "reason": "first call only"}
    limit = bound(option, value, dtype)
    ok = err <= limit
    said = (f"max error {err:.3g} {'<=' if ok else '>'} {limit:g}" if limit else  # an exact value: the reference's
            f"max error {err:.3g} {'=' if ok else '>'} 0 (the reference's own computation)")
    return {"status": "measured" if ok else "inaccurate", "ms": ms, "max_error": err, **warmup, "reason": said}
