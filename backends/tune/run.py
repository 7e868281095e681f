"""Running the tune: candidates in worker processes, within a budget, cached.

`tune()` times each candidate (`candidates.candidates`) in a fresh interpreter with a timeout
(`machine.worker.Worker`: killed with its process group on timeout or cancel), reuses what
the cache already holds for the same machine and run shape (unless `fresh`), marks a candidate
whose output is outside its accuracy bound `inaccurate` (never chosen), skips what the budget
cannot fit, and stores the result. Progress goes to `on_event(done, total, candidate)`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from typing import Callable

from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.machine.capability import Capability
from backends.machine.tuned import Candidate, Tuned, load_tuned, store_tuned
from backends.machine.worker import Outcome, Worker
from backends.tune.candidates import DEFAULT_OPTIONS, Spec, candidates

DEFAULT_BUDGET = 90.0
MIN_TIMEOUT = 5.0  # a candidate is not started with less budget left than this
# A candidate may take SLOWER x the worker time of its option's fastest value so far (at least
# SLOWER_MIN s): one that needs longer is far slower and would only eat the budget.
SLOWER, SLOWER_MIN = 5.0, 20.0


def _spec_json(spec: Spec, shapes: RunShapes, na_backend: str) -> str:
    return json.dumps({"option": spec.option, "value": spec.value, "device": spec.device, "na_backend": na_backend,
                       "shapes": [shapes.width, shapes.height, shapes.frames, shapes.batch]})


def worker_argv() -> list[str]:
    """The command line of a worker that times one candidate (read from its stdin)."""
    return [sys.executable, "-m", "backends.tune"]


def _na_for_decode(done: list[Candidate]) -> str:
    """The NA backend a decoder candidate runs with: the fastest measured so far, else auto."""
    ranked = Tuned("", "", tuple(done)).ranked("diffvae.na_backend")
    return ranked[0].value.split(":")[0] if ranked else "auto"


def tune(profile: Profile, cap: Capability, shapes: RunShapes, *, options: tuple[str, ...] = DEFAULT_OPTIONS,
         budget: float = DEFAULT_BUDGET, fresh: bool = False, store: bool = True,
         on_event: Callable[[int, int, Candidate | None], None] | None = None,
         cancel: threading.Event | None = None) -> Tuned:
    """Measure the candidates of `options` at `shapes` on this machine (`cap` is its live
    capability) within `budget` seconds; returns and caches the result. The next worker starts
    (imports, CUDA) while the current one measures."""
    specs, not_timed = candidates(profile, cap, options)
    cached = {} if fresh else {(c.option, c.value): c for c in (load_tuned(cap, shapes.label) or Tuned("", "", ())
                                                                 ).candidates if c.status != "skipped"}
    done: list[Candidate] = [Candidate(o, v, "skipped", reason=why) for o, v, why in not_timed]
    prior = {d.option: str(d.effective) for d in resolve(profile, cap)}
    specs.sort(key=lambda s: (options.index(s.option), s.value.split(":")[0] != prior.get(s.option)))
    to_run = sum((s.option, s.value) not in cached for s in specs)
    fastest: dict[str, tuple[float, float, str]] = {}  # option -> (ms, worker seconds, value)
    t0 = time.monotonic()
    spare: Worker | None = None
    try:
        for i, spec in enumerate(specs):
            if on_event:
                on_event(i, len(specs), None)
            hit = cached.get((spec.option, spec.value))
            best = fastest.get(spec.option)
            left = budget - (time.monotonic() - t0)
            if hit is not None:
                result = hit
            elif cancel is not None and cancel.is_set():
                result = Candidate(spec.option, spec.value, "skipped", reason="cancelled")
            elif left < MIN_TIMEOUT:
                result = Candidate(spec.option, spec.value, "skipped",
                                   reason=f"budget spent ({budget:g} s); run again with a larger --budget to time it")
            else:
                to_run -= 1
                current, spare = spare or Worker(worker_argv()), (Worker(worker_argv()) if to_run > 0 else None)
                limit = min(left, max(SLOWER_MIN, SLOWER * best[1])) if best else left
                outcome = current.run(_spec_json(spec, shapes, _na_for_decode(done)), limit, cancel)
                result = _result(spec, outcome, limit, left, best)
            if result.status == "measured" and result.seconds and (best is None or result.ms < best[0]):
                fastest[spec.option] = (result.ms, result.seconds, spec.value)
            done.append(result)
            if on_event:
                on_event(i + 1, len(specs), result)
    finally:
        if spare is not None:
            spare.kill()
    order = {(s.option, s.value): i for i, s in enumerate(specs)}
    done.sort(key=lambda c: (options.index(c.option), order.get((c.option, c.value), len(order))))
    tuned = Tuned(cap.fingerprint(), shapes.label, tuple(done), budget_s=budget)
    if store:
        stored = store_tuned(cap, tuned)
        tuned = dataclasses.replace(load_tuned(cap, shapes.label) or tuned, notes=(f"cached in {stored}",))
    return tuned


def _result(spec: Spec, outcome: Outcome, limit: float, left: float, best: tuple | None) -> Candidate:
    """The candidate row for a worker's outcome."""
    row = outcome.last_json() if outcome.status == "done" else None
    if outcome.status == "cancelled":
        return Candidate(spec.option, spec.value, "skipped", reason="cancelled")
    if outcome.status == "timeout" and limit < left:
        return Candidate(spec.option, spec.value, "skipped", reason=(
            f"stopped after {limit:g} s: over {SLOWER:g}x the {best[1]:g} s that {best[2]} needed"))
    if outcome.status == "timeout":
        return Candidate(spec.option, spec.value, "skipped",
                         reason=f"budget spent after {outcome.seconds:g} s; run again with a larger --budget")
    if row is None:
        return Candidate(spec.option, spec.value, "failed",
                         reason=f"worker exited {outcome.returncode}: {outcome.tail()}")
    return Candidate(spec.option, spec.value, row["status"], row.get("ms"), row.get("max_error"),
                     row.get("reason", ""), outcome.seconds)


def worker(spec: dict) -> dict:
    """Time one candidate here (the worker process): {"status", "ms", "max_error", "reason"}."""
    import torch

    from backends.tune.measure import MEASURE, bound

    option, value, device = spec["option"], spec["value"], spec["device"]
    shapes = RunShapes(*spec["shapes"])
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    extra = {"na_backend": spec["na_backend"]} if option == "diffvae.mode" else {}
    try:
        ms, err = MEASURE[option](value, shapes, device, dtype, **extra)
    except torch.OutOfMemoryError:
        return {"status": "failed", "reason": f"out of memory at {shapes.label}"}
    except Exception as e:  # the row says what broke
        return {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    limit = bound(option, dtype)
    ok = err <= limit
    return {"status": "measured" if ok else "inaccurate", "ms": ms, "max_error": err,
            "reason": f"max error {err:.3g} {'<=' if ok else '>'} {limit:g}"}
