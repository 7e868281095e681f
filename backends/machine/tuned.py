"""What `ltx-tui --tune` measured on this machine, and its on-disk cache.

The cache is one JSON file per capability fingerprint (GPU models, driver, torch and package
versions: `Capability.fingerprint()`) in the user cache directory (platformdirs; on Linux
`$XDG_CACHE_HOME/ltx-tui/tune/`), holding one entry per run shape ("768x512x121"). A file
written by another schema or ltx-tui version, or for another fingerprint, is stale and ignored;
an unreadable one too (the next tune rewrites it). `tune_lock()`: one tune times at a time.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

from backends.machine.capability import Capability, read_nvml
from backends.machine.nvml import NvmlSession
from backends.machine.textfile import FileProblem, read_bounded, write_atomically
from backends.version import TOOL_VERSION

SCHEMA_VERSION = 1
STATUSES = ("measured", "failed", "inaccurate", "skipped")
RUNNING = "running"  # a tune's progress event for the value a worker starts measuring (never a result)
CACHE_LIMIT = 4 << 20


@dataclass(frozen=True)
class Candidate:
    """One option value timed at the run's shapes (ms: lower is faster)."""

    option: str
    value: str
    status: str
    ms: float | None = None
    max_error: float | None = None
    reason: str = ""
    seconds: float | None = None  # what measuring it took (worker start to answer)
    warmup_s: float | None = None  # its first call in a fresh process, compile caches cold (compile included)
    warmup_cached_s: float | None = None  # the same in a second fresh process, ltx-tui's compile cache warm

    @property
    def label(self) -> str:
        return self.value.replace(":", " ")

    @property
    def first_call_s(self) -> float:
        """Seconds of its first call in a later process: with the compile cache warm where measured,
        else cold, else one steady call."""
        first = self.warmup_cached_s if self.warmup_cached_s is not None else self.warmup_s
        return first if first is not None else self.ms / 1000

    def run_s(self, calls: int) -> float:
        """Seconds for `calls` calls in one process: the first call, then calls - 1 at the steady time."""
        return self.first_call_s + (calls - 1) * self.ms / 1000


@dataclass(frozen=True)
class Tuned:
    """The candidates measured for one run shape on one machine."""

    fingerprint: str
    shapes: str
    candidates: tuple[Candidate, ...]
    written: str = ""
    budget_s: float | None = None
    notes: tuple[str, ...] = field(default=())
    runs: int = 1  # generations a process runs (`--tune --runs N`): what a compile is paid over
    reused: int = 0  # results (not skips) the tune that gave this took from the cache (not stored)

    def ranked(self, option: str, calls: int | None = None) -> list[Candidate]:
        """The measured (accurate) candidates of `option`, fastest first: by steady time, or with
        `calls` by the seconds of that many calls in one process (`Candidate.run_s`)."""
        return sorted((c for c in self.candidates if c.option == option and c.status == "measured"),
                      key=lambda c: c.ms if calls is None else c.run_s(calls))

    def chosen(self, calls: dict[str, int] | None = None) -> dict[str, str]:
        """The fastest accurate value of every option with a measurement (`calls`: per option, the
        calls a run makes, for the options whose first call compiles)."""
        out: dict[str, str] = {}
        for c in self.candidates:
            ranked = self.ranked(c.option, (calls or {}).get(c.option))
            if c.option not in out and ranked:
                out[c.option] = ranked[0].value
        return out

    def why(self, option: str, value: str) -> str:
        """'fastest measured here (768x512x121): 0.91 ms vs natten hopper-fna 3.40 ms, ...'."""
        ranked = self.ranked(option)
        mine = next(c for c in ranked if c.value == value)
        others = ", ".join(f"{c.label} {_ms(c.ms)}" for c in ranked if c is not mine)
        head = "fastest" if ranked[0] is mine else "measured"
        return f"{head} measured here ({self.shapes}): {_ms(mine.ms)}" + (f" vs {others}" if others else "")

    def to_dict(self) -> dict[str, Any]:
        return {"shapes": self.shapes, "written": self.written, "budget_s": self.budget_s, "notes": list(self.notes),
                "runs": self.runs, "candidates": [asdict(c) for c in self.candidates]}


def _ms(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.3g} s"


def cache_dir() -> Path:
    import platformdirs

    return platformdirs.user_cache_path("ltx-tui") / "tune"


def _path(cap: Capability) -> Path:
    return cache_dir() / (cap.fingerprint().replace(":", "-") + ".json")


def _key(cap: Capability) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "ltx_tui": TOOL_VERSION, "fingerprint": cap.fingerprint()}


QUICK_DISTS = ("torch", "triton", "natten", "flash-attn", "flash-attn-3", "nvidia-cutlass-dsl", "ltx-kernels",
               "ltx-core")


def quick_key(env: dict | None = None) -> str:
    """A key for this machine found without importing torch (NVML and package metadata only):
    the GPUs' models and memory, the driver, CUDA_VISIBLE_DEVICES and the versions of the
    packages that decide speed. A cached tune is shown from it in well under a second; a change
    it cannot see (a rebuilt package of the same version) needs `--tune --fresh`."""
    from importlib.metadata import PackageNotFoundError, version

    env = dict(os.environ if env is None else env)
    session = NvmlSession()
    try:
        info, _, gpus = read_nvml(session, env, timeout=5.0)
    finally:
        session.close()
    versions = {}
    for dist in QUICK_DISTS:
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    blob = json.dumps({"gpus": [(g.name, g.memory_total) for g in gpus], "driver": info.driver_version,
                       "visible": env.get("CUDA_VISIBLE_DEVICES"), "versions": versions, "ltx_tui": TOOL_VERSION,
                       "python": sys.version_info[:2], "platform": sys.platform}, sort_keys=True, default=str)
    return "quick:" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_quick(shapes: str, env: dict | None = None) -> Tuned | None:
    """The cached tune of run shape `shapes` of the machine `quick_key()` finds, or None."""
    key = quick_key(env)
    try:
        paths = sorted(cache_dir().glob("sha256-*.json"))
    except OSError:
        return None
    for path in paths:
        try:
            data = json.loads(read_bounded(path, CACHE_LIMIT))
        except (FileProblem, ValueError):
            continue
        if (not isinstance(data, dict) or data.get("quick_key") != key or data.get("schema_version") != SCHEMA_VERSION
                or data.get("ltx_tui") != TOOL_VERSION or not isinstance(data.get("entries"), dict)):
            continue
        entry = data["entries"].get(shapes)
        tuned = _from_entry(str(data.get("fingerprint")), entry) if entry is not None else None
        if tuned is not None:
            return tuned
    return None


def _read(cap: Capability) -> dict[str, Any]:
    """The cache file's entries for `cap`, {} when there is none or it is stale or unreadable."""
    try:
        data = json.loads(read_bounded(_path(cap), CACHE_LIMIT))
    except (FileProblem, ValueError):
        return {}
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in _key(cap).items()):
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


FIELDS = tuple(f.name for f in fields(Candidate))
TIMES = ("warmup_s", "warmup_cached_s")


def _from_entry(fingerprint: str, entry: Any) -> Tuned | None:
    """A cache entry as a Tuned; None when it is not one. Fields an older ltx-tui did not write
    (warm-up times, runs) get their defaults; fields a newer one adds are ignored."""
    try:
        candidates = tuple(Candidate(**{k: v for k, v in c.items() if k in FIELDS}) for c in entry["candidates"])
        if any(c.status not in STATUSES or (c.status == "measured" and not isinstance(c.ms, (int, float)))
               or any(not isinstance(getattr(c, t), (int, float, type(None))) for t in TIMES) for c in candidates):
            return None
        runs = entry.get("runs", 1)
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            return None
        return Tuned(fingerprint, str(entry["shapes"]), candidates, str(entry.get("written", "")),
                     entry.get("budget_s"), tuple(entry.get("notes", ())), runs)
    except (KeyError, TypeError, AttributeError):
        return None


def load_tuned(cap: Capability, shapes: str | None = None, *, or_latest: bool = False) -> Tuned | None:
    """This machine's measurements for run shape `shapes` (default: the most recently tuned one
    with a measurement; with `or_latest`, that one where `shapes` has none: what `auto` follows for a
    run, `Tuned.shapes` saying which it was);
    None for another machine's capability (a preset or file), or when nothing valid is cached."""
    if cap.source != "live":
        return None
    entries = _read(cap)
    if shapes is not None:
        found = _from_entry(cap.fingerprint(), entries.get(shapes))
        if found is not None or not or_latest:
            return found
    usable = [t for t in (_from_entry(cap.fingerprint(), e) for e in entries.values()) if t is not None and t.chosen()]
    return max(usable, key=lambda t: t.written, default=None)


def store_tuned(cap: Capability, tuned: Tuned) -> Path:
    """Write `tuned` into this machine's cache file (atomically), keeping its other run shapes."""
    path = _path(cap)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = _read(cap)
    written = tuned.written or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    entries[tuned.shapes] = dict(tuned.to_dict(), written=written)
    data = dict(_key(cap), quick_key=quick_key(), entries=entries)
    write_atomically(path, json.dumps(data, indent=1).encode(), overwrite=True)
    return path


LOCK_POLL = 0.2  # seconds between tries for a lock another tune holds


@contextlib.contextmanager
def tune_lock(cancel: threading.Event | None = None, on_wait: Callable[[str], None] | None = None) -> Iterator[str]:
    """Hold the tune lock of the cache directory (fcntl on `tune.lock`) while timing and caching:
    two tunes at once slow each other's timings 3-10x and would cache them. Another holder is
    waited for, said once through `on_wait` (with its pid); `cancel` stops the wait. Yields ""
    with the lock held, else why there is none (a cancelled wait, an unwritable cache directory:
    the tune then runs unlocked). The kernel drops the lock when its holder exits, even killed."""
    path = cache_dir() / "tune.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        yield f"not locked against another tune at the same time: cannot open {path} ({e.strerror or e})"
        return
    try:
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):  # e.g. no locks on this file system
                    yield f"not locked against another tune at the same time: cannot lock {path} ({e.strerror or e})"
                    return
            if cancel is not None and cancel.is_set():
                yield "cancelled while waiting for another tune"
                return
            if not said and on_wait is not None:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                on_wait(f"another tune{f' (pid {holder})' if holder.isdigit() else ''} is timing on this machine "
                        f"(lock {path}); waiting for it, so that neither slows the other's timings")
                said = True
            time.sleep(LOCK_POLL)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield ""
    finally:
        os.close(fd)  # releases the lock
