"""`ltx-tui run` on LTX-2's multi-GPU modules: the plan in every rank LTX-2 spawns.

How LTX-2 v1.2.0 starts its ranks (ltx_pipelines/multigpu/): a module's `__main__` hands its
runner class to `MGPUController(runner_cls)` (controller.py); `start()` spawns one process per
visible GPU with the `spawn` start method (fleet.py, `_RunnersFleet.spawn`); the class crosses to
each process by value (fleet.py, `_RunnerShipper`: cloudpickle, with the class's module registered
by value, so that a class of `__main__` survives the spawn). In each rank `_worker_entrypoint` binds
the GPU, instantiates the class with no arguments, then starts NCCL, calls `setup(**setup_kwargs)`
once, and calls the instance once per job (a generator). A spawned process imports LTX-2 afresh:
wrappers installed in the parent process are not there.

The seam: in the parent, ltx-tui wraps `MGPUController.__init__` (`controller_seam`) so that the
controller gets, in place of the module's runner class, a subclass of it made here
(`rank_runner`): same name and module, the runner's own methods underneath, and this module's
`__init__`, `setup` and `__call__` over them, with the `RankSpec` (plan, flag policy, run id,
ledger) as a class attribute. LTX-2's shipper carries the subclass by value like the class it
replaces; its three methods are functions of this module, which cloudpickle ships by reference:
the rank imports `backends.launch.mgpu` (the spawned process gets the parent's `sys.path`). In the
rank, `__init__` (before NCCL starts) opens a `RankSession`: the builder and block wrappers of the
single-GPU launch (`hooks.Hooks`, which also installs the dense attention inside LTX-2's all2all
wrappers) and, when the plan compiles the DiT, a wrapper on `SequenceParallelBuilder.build` that
raises the all2all barrier timeout before the first step. Each job (`__call__`) is metered on the
rank's GPU and recorded as that rank's own ledger record (`<run id>-r<rank>`, appended under the
ledger's lock); when it ends, every wrapper and the timeout are put back. LTX-2's files are never
edited.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC_ATTR = "_ltx_tui_spec"  # the RankSpec, a class attribute of the subclass LTX-2 ships
SESSION_ATTR = "_ltx_tui_session"  # the rank's RankSession, on the runner instance
# The all2all barrier timeout of every rank while ltx-tui compiles the DiT. LTX-2's is 10 s
# (ltx_core/multigpu/transformer/attention.py, `_DEFAULT_ALL2ALL_TIMEOUT_SECONDS`), and nothing in
# v1.2.0 raises it; a rank whose first compiled step (or a recompile at a new shape) is still
# compiling reaches the barrier late. On the H200 one GPU's first compiled DiT step took 6-16 s
# and the stage-2 recompile 8-14 s with warm caches (bench/RESULTS.md, "bench/ltx2_run.py"); cold
# caches take longer. 600 s only delays the report of a real hang.
BARRIER_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RankSpec:
    """What every rank needs from the parent; shipped with the runner class (picklable)."""

    prep: Any  # backends.launch.run.Prepared: the plan, the flag policy, the profile, versions, shape
    run_id: str  # the records are `<run_id>-r<rank>`
    argv: tuple[str, ...]  # ltx-tui's command line, for the records
    ledger: str | None  # None: the user's default ledger
    barrier_timeout_s: float | None = None  # raise the all2all barrier timeout to this before the first step


# --- the parent: the controller gets the subclass ---------------------------------------------

@contextlib.contextmanager
def controller_seam(spec: RankSpec):
    """While the module runs, every `MGPUController` it makes ships `rank_runner(its runner, spec)`."""
    controller = importlib.import_module("ltx_pipelines.multigpu.controller").MGPUController
    original = controller.__dict__["__init__"]

    def __init__(self, runner_cls, *args, **kwargs):
        return original(self, rank_runner(runner_cls, spec), *args, **kwargs)
    __init__.__wrapped__ = original
    controller.__init__ = __init__
    try:
        yield
    finally:
        controller.__init__ = original


def rank_runner(base: type, spec: RankSpec) -> type:
    """A subclass of LTX-2's runner class `base` with ltx-tui's session around its setup and jobs.
    Same name, module and qualified name as `base`, so that LTX-2's shipper treats it as it treats
    `base` (by value) and its messages read the same."""
    namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__, "__doc__": base.__doc__,
                 "__init__": _rank_init, "setup": _rank_setup, "__call__": _rank_call, SPEC_ATTR: spec}
    return type(base)(base.__name__, (base,), namespace)


def _ours(cls: type) -> type:
    return next(c for c in cls.__mro__ if SPEC_ATTR in vars(c))


def _rank_init(self, *args, **kwargs):
    cls = _ours(type(self))
    super(cls, self).__init__(*args, **kwargs)
    setattr(self, SESSION_ATTR, RankSession(vars(cls)[SPEC_ATTR]).open())


def _rank_setup(self, *args, **kwargs):
    cls = _ours(type(self))
    session = getattr(self, SESSION_ATTR)
    session.open()
    try:
        return super(cls, self).setup(*args, **kwargs)
    except BaseException:
        session.close()  # the rank dies with this error (LTX-2's worker does not survive a setup error)
        raise


def _rank_call(self, *args, **kwargs):
    cls = _ours(type(self))
    session = getattr(self, SESSION_ATTR)
    session.begin()
    try:
        result = yield from super(cls, self).__call__(*args, **kwargs)
    except KeyboardInterrupt:
        session.end("interrupted", 128 + session.signalled if session.signalled else 130, "interrupted")
        raise
    except BaseException as e:
        session.end("failed", 1, f"{type(e).__name__}: {e}")
        raise
    session.end("ok", 0, None)
    return result


# --- the rank ---------------------------------------------------------------------------------

class RankSession:
    """ltx-tui in one rank: wrappers installed from `open()` to the end of each job, one record per job."""

    def __init__(self, spec: RankSpec) -> None:
        import torch

        self.spec = spec
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
        self.hooks = None
        self.jobs = 0
        self.notes: list[str] = []
        self.raised: list[tuple[Any, float]] = []  # (SP builder, its timeout before ltx-tui raised it)
        self.signalled = 0
        self._stack: contextlib.ExitStack | None = None
        self._signals: dict = {}
        self._started: datetime.datetime | None = None
        self._t0 = 0.0

    @property
    def prefix(self) -> str:
        return f"ltx-tui: rank {self.rank}"

    def say(self, text: str) -> None:
        print(f"{self.prefix}: {text}", file=sys.stderr, flush=True)

    def open(self) -> "RankSession":
        """Install the wrappers in this process (once until `close`)."""
        if self._stack is not None:
            return self
        from backends.launch.hooks import Hooks, describe
        from backends.launch.meter import Meter

        prep = self.spec.prep
        self.hooks = Hooks(prep.plan, prep.policy.dit_steps, prep.policy.decoder_steps, Meter(self.device),
                           lambda built: print(describe(built, self.prefix), file=sys.stderr, flush=True),
                           take_over=not prep.as_built, keep_dit=False)
        stack = contextlib.ExitStack()
        stack.enter_context(self.hooks.installed())
        if self.spec.barrier_timeout_s is not None:
            stack.enter_context(self._barrier_wrapped())
        self._stack = stack
        return self

    def close(self) -> None:
        """Put back everything `open` installed, and every barrier timeout raised."""
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                stack.close()
        finally:
            self._restore_timeouts()

    @contextlib.contextmanager
    def _barrier_wrapped(self):
        sp = importlib.import_module("ltx_pipelines.multigpu.sp_builder").SequenceParallelBuilder
        original = sp.__dict__["build"]
        session = self

        def build(self, device=None, dtype=None, **kwargs):
            session.raise_timeout(self)
            return original(self, device, dtype, **kwargs)
        build.__wrapped__ = original
        sp.build = build
        try:
            yield
        finally:
            sp.build = original

    def raise_timeout(self, builder) -> None:
        """Before the DiT of a sequence-parallel stage is built (so before its first step): the
        builder's all2all barrier timeout (LTX-2's setter fans it out to every All2All of its
        AttentionManager) up to the spec's, once per manager (a stage's builder is a copy sharing it)."""
        target = self.spec.barrier_timeout_s
        prior = float(builder.all2all_timeout_seconds)
        if target is None or prior >= target:
            return
        builder.all2all_timeout_seconds = target
        self.raised.append((builder, prior))
        text = (f"all2all barrier timeout raised from {prior:g} s to {target:g} s before the first step (ltx-tui "
                f"compiles the DiT: a rank still compiling reaches the barrier late); put back after the run")
        self.notes.append(text)
        self.say(text)

    def _restore_timeouts(self) -> None:
        raised, self.raised = self.raised, []
        for builder, prior in reversed(raised):
            try:
                builder.all2all_timeout_seconds = prior
            except Exception as e:  # a rank tearing down: say it, never mask the run's own error
                self.say(f"warning: the all2all barrier timeout could not be put back to {prior:g} s ({e})")

    # --- jobs ---

    def begin(self) -> None:
        if self.jobs or self._stack is None:  # a later job: its own wrappers, meter and models
            self.close()
            self.open()
        self.jobs += 1
        self.signalled = 0
        self._started = datetime.datetime.now(datetime.timezone.utc)
        self._t0 = time.perf_counter()
        self._catch_signals()

    def _catch_signals(self) -> None:
        """SIGTERM / SIGHUP (LTX-2's controller terminating the fleet, `timeout`, a dropped session)
        unwind the job like ctrl-c, so that the rank records it as interrupted."""
        def stop(signum, frame):
            self.signalled = signum
            raise KeyboardInterrupt
        for signum in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._signals[signum] = signal.signal(signum, stop)
            except ValueError:  # not the main thread: leave them
                pass

    def _release_signals(self) -> None:
        saved, self._signals = self._signals, {}
        for signum, handler in saved.items():
            signal.signal(signum, handler)

    def end(self, status: str, code: int, error: str | None) -> None:
        """The job ended: record it (never raising over the job's own outcome), put everything back."""
        try:
            self._release_signals()
            meter = self.hooks.meter
            for s in list(meter.active):
                meter.pause(s)
            self._record(status, code, error)
        except Exception as e:
            self.say(f"the record could not be made ({type(e).__name__}: {e})")
        finally:
            self.close()

    def _record(self, status: str, code: int, error: str | None) -> None:
        from backends.launch import run as launcher
        from backends.machine import runs

        prep, hooks = self.spec.prep, self.hooks
        if not (hooks.built or hooks.meter.stages):
            return  # nothing ran (as for one GPU: nothing to record)
        status, code, error = launcher.settle(prep, hooks.built, hooks.meter, status, code, error)
        job = "" if self.jobs == 1 else f"-j{self.jobs}"
        record = launcher.make_record(
            prep, run_id=f"{self.spec.run_id}{job}-r{self.rank}", started=self._started,
            wall_s=time.perf_counter() - self._t0, status=status, code=code, error=error, argv=self.spec.argv,
            device=self.device, built=hooks.built, meter=hooks.meter, rank=self.rank,
            plan_extra={"mgpu": {"rank": self.rank, "world_size": self.world_size, "run": self.spec.run_id,
                                 "notes": list(self.notes)}})
        try:
            path = runs.append(record, Path(self.spec.ledger) if self.spec.ledger else None)
            self.say(f"{status}: recorded as run {record.id} in {path}")
        except OSError as e:
            self.say(f"{status}: not recorded: the ledger {self.spec.ledger or runs.default_ledger()} cannot be "
                     f"written ({e})")


def rank_records(ledger: str | Path | None, run_id: str) -> list:
    """The records the ranks of run `run_id` appended to `ledger`, by rank (none when it cannot be read)."""
    from backends.machine import runs
    from backends.machine.textfile import FileProblem

    try:
        records = runs.load(Path(ledger) if ledger is not None else None).records
    except FileProblem:
        return []
    mine = [r for r in records if r.rank is not None and r.plan.get("mgpu", {}).get("run") == run_id]
    return sorted(mine, key=lambda r: (r.id, r.rank))
