"""The run ledger: one JSON record per `ltx-tui run`, appended to a JSON-lines file.

Written by the launcher (`backends.launch`), read by `ltx-tui runs`, the app's Runs tab and the
comparison of two runs. The default file is `runs.jsonl` in the user data directory
(platformdirs; on Linux `$XDG_DATA_HOME/ltx-tui/`). Appends are whole lines under an exclusive
lock, so two runs writing at once never interleave. A line that is not a record of this schema
(hand-edited, truncated by a crash, a future version) is skipped and counted, never fatal.

A record (`RunRecord.to_dict()`): id, started (UTC ISO), module, argv (ltx-tui's), ltx_argv (what
LTX-2's module received), exit code, status, error, wall seconds, versions, device, the run's
shape (width, height, frames), the profile (path, sha256, values), the plan (option -> effective
value, step texts), the models built (`ModelRecord`) and the stages (`StageRecord`: seconds, peak
GPU memory allocated and reserved, per-step seconds for denoising, the memory plan's prediction).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import stat
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from backends.machine.text import printable
from backends.machine.textfile import FileProblem, read_bounded

SCHEMA_VERSION = 1
LEDGER_LIMIT = 16 << 20  # a ledger larger than this is read from its last LEDGER_LIMIT bytes (thousands of runs)
STATUSES = ("ok", "failed", "not applied", "interrupted")


@dataclass(frozen=True)
class ModelRecord:
    """One model LTX-2 built during the run and what the plan did to it."""

    model: str  # class name: LTXModel, DiffusionVideoDecoder, ...
    stage: str  # the stage that built it
    load_s: float
    apply_s: float
    applied: bool  # the plan was applied to it (False: built as LTX-2 built it)
    changes: tuple[str, ...] = ()  # "option: action detail" of the report, for options that did something
    warnings: tuple[str, ...] = ()
    params: int | None = None  # parameters of the model as built
    kept: bool = False  # an earlier stage's model, kept on the device (nothing loaded)
    compile: str | None = None  # compiled by the plan: graph breaks and eager graphs from its apply to the
    # run's end (Dynamo's counts are process-wide: a later model's count here too); captured: whether
    # the block loop's graphs were replayed, or why the loop ran without them


@dataclass(frozen=True)
class StageRecord:
    """One stage of the run: time and peak GPU memory while it was active."""

    name: str  # "text encoding", "denoising 1", "upsampling", "audio decode", "video decode", ...
    kind: str  # text_encoder | denoise | upsample | image_condition | audio_decode | video_decode
    seconds: float
    calls: int = 1
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    step_seconds: tuple[float, ...] = ()  # denoising: seconds of each step (all forwards at one sigma)
    forwards: int = 0  # denoising: transformer forwards (guidance makes several per step)
    tokens: int | None = None  # denoising: video tokens per forward
    predicted_gib: float | None = None  # the memory plan's peak for this stage, same run and profile
    predicted_stage: str | None = None  # the memory plan's stage it was compared with, or why there is none
    shape: dict[str, int] = field(default_factory=dict)  # denoising: the stage's width, height, frames
    load_s: float = 0.0  # of `seconds`: building models (reading weights) while the stage was active
    apply_s: float = 0.0  # of `seconds`: ltx-tui applying the plan to them

    @property
    def compute_s(self) -> float:
        """The stage's seconds without model loading and plan applying."""
        return max(0.0, self.seconds - self.load_s - self.apply_s)

    @property
    def error_pct(self) -> float | None:
        """(predicted - measured) / measured, in percent."""
        if self.predicted_gib is None or not self.peak_allocated_gib:
            return None
        return 100.0 * (self.predicted_gib - self.peak_allocated_gib) / self.peak_allocated_gib


@dataclass(frozen=True)
class RunRecord:
    id: str
    started: str
    module: str
    status: str
    exit: int
    wall_s: float
    argv: tuple[str, ...] = ()
    ltx_argv: tuple[str, ...] = ()
    error: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    shape: dict[str, int] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    models: tuple[ModelRecord, ...] = ()
    stages: tuple[StageRecord, ...] = ()
    rank: int | None = None  # multi-GPU: the rank that wrote the record

    @property
    def gpu_seconds(self) -> float:
        """Seconds of the stages (the run's GPU work), without Python start-up and file writing."""
        return sum(s.seconds for s in self.stages)

    @property
    def compute_s(self) -> float:
        return sum(s.compute_s for s in self.stages)

    @property
    def peak_gib(self) -> float | None:
        peaks = [s.peak_allocated_gib for s in self.stages if s.peak_allocated_gib is not None]
        return max(peaks) if peaks else None

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), schema=SCHEMA_VERSION)

    @staticmethod
    def from_dict(data: Any) -> "RunRecord":
        """A record from its JSON form; ValueError when it is not one of this schema (every
        field of the right type; fields a newer writer added are ignored)."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
            raise ValueError("not a run record of schema 1")
        record = _typed(RunRecord, data, "record")
        if record.status not in STATUSES:
            raise ValueError(f"malformed run record: status {record.status!r}")
        return record


def _shown(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {_shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_shown(v) for v in value)
    return value


def displayed(record: RunRecord) -> RunRecord:
    """`record` as a terminal may show it: every text in it (nested ones too) on one line with its
    control characters escaped (`printable`: an ESC in a hand-edited module name must not colour or
    move the screen); `error` keeps its line breaks. JSON output takes the record as written."""
    data = record.to_dict()
    error = data.get("error")
    data = _shown(data)
    if isinstance(error, str):
        data["error"] = "\n".join(printable(line) for line in error.split("\n"))
    return RunRecord.from_dict(data)


def _value(kind: str, value: Any, where: str) -> Any:
    """`value` checked against the annotation `kind` (as the dataclasses here write them)."""
    if value is None and kind.endswith("| None"):
        return None
    base = kind.removesuffix(" | None")
    if base in NESTED:
        return _typed(NESTED[base], value, where)
    if base.startswith("tuple[") and isinstance(value, (list, tuple)):
        inner = base[len("tuple["):-len(", ...]")]
        return tuple(_value(inner, v, f"{where}[{i}]") for i, v in enumerate(value))
    ok = {"str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}.get(base)
    if ok is not None and ok(value) or ok is None and base.startswith("dict[") and isinstance(value, dict):
        return value
    raise ValueError(f"malformed run record: {where} is {type(value).__name__}, expected {kind}")


def _typed(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise ValueError(f"malformed run record: {where} is {type(data).__name__}, expected an object")
    values = {f.name: _value(f.type, data[f.name], f"{where}.{f.name}") for f in fields(cls) if f.name in data}
    try:
        return cls(**values)
    except TypeError as e:  # a field without a default is missing
        raise ValueError(f"malformed run record: {where}: {e}") from None


NESTED = {"ModelRecord": ModelRecord, "StageRecord": StageRecord}


def default_ledger() -> Path:
    import platformdirs

    return platformdirs.user_data_path("ltx-tui") / "runs.jsonl"


def new_id(now: datetime.datetime | None = None) -> str:
    """'20261130-221503-1a2b': sortable by time, unique enough for one machine."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex()


def unwritable(path: Path | None = None) -> str | None:
    """Why a record could not be appended to the ledger at `path` (default: the user data directory),
    asked before a run so that its record is not lost after it; None when it can be (a character
    device such as /dev/null takes it: no record kept)."""
    path = Path(path) if path is not None else default_ledger()
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:  # a folder on the way that cannot be searched, a symlink loop
        return f"{path} cannot be reached: {e.strerror or e}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return f"{path} is a directory, not a ledger file"
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            return f"{path} is not a regular file, not a ledger file"
        return None if os.access(path, os.W_OK) else f"{path} is not writable by this user"
    if os.path.lexists(path):
        return f"{path} is a symlink to nothing (or to itself): remove it or point it at a file"
    folder = path.parent
    while not os.path.lexists(folder):  # the first record makes the folders: the nearest one there must take them
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a folder, so {path} cannot be made"
    return None if os.access(folder, os.W_OK | os.X_OK) else f"{folder} is not writable, so {path} cannot be made"


def append(record: RunRecord, path: Path | None = None) -> Path:
    """Append `record` as one line to the ledger at `path` (default: the user data directory)."""
    path = Path(path) if path is not None else default_ledger()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record.to_dict(), sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)
    return path


@dataclass(frozen=True)
class Ledger:
    """The records of a ledger file, oldest first (by start; ties in file order), and how many lines
    were not records."""

    path: Path
    records: tuple[RunRecord, ...]
    skipped: int = 0
    missing_folder: Path | None = None  # the file is not there, nor is the folder it would be in
    partial: bool = False  # larger than LEDGER_LIMIT: only its newest part was read

    def displayed(self) -> "Ledger":
        """This ledger with its records `displayed` (for the terminal)."""
        return replace(self, records=tuple(displayed(r) for r in self.records))

    def empty_reason(self) -> str | None:
        """Why it lists no run, with what to do; None when it is only empty (no run recorded yet)."""
        if self.skipped:
            part = f"the {self.skipped} line(s) read (its newest {size_text(LEDGER_LIMIT)})" if self.partial else \
                f"its {self.skipped} line(s)"
            return (f"none of {part} is a run record: is {self.path} a run ledger? "
                    "(`ltx-tui run` writes one JSON object a line)")
        if self.missing_folder is not None:
            return (f"no ledger at {self.path}: its folder {self.missing_folder} does not exist either "
                    "(check the path; the first run recorded there makes both)")
        return None

    def find(self, key: str) -> RunRecord:
        """A record by position (1 the oldest, -1 the newest) or by id or id prefix (a number past the
        positions is one: `2026113`); KeyError says what the ledger holds."""
        matches = [r for r in self.records if r.id.startswith(key)] if key else []
        if key.lstrip("-").isdigit() and len(key.lstrip("-")) < 8:  # ids start with an 8-digit date
            n = int(key)
            index = n - 1 if n > 0 else n
            if n != 0 and -len(self.records) <= index < len(self.records):
                return self.records[index]
            if not matches:  # past the positions, and no id's start (`2026`, `2026113` are)
                n = len(self.records)
                positions = f": give 1 to {n} (1 the oldest) or -1 to -{n} (-1 the newest), or an id" if n else ""
                raise KeyError(f"run {key}: the ledger {self.path} holds {n} run(s){positions}")
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise KeyError(f"run {key!r}: {len(matches)} runs in {self.path} have ids starting so; give more of the id")
        raise KeyError(f"run {key!r}: no run in {self.path} with that id (`ltx-tui runs` lists them)")


def size_text(n: int) -> str:
    """A byte count as the read limit is said: 16 MiB, or bytes below one MiB."""
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _started(r: RunRecord) -> tuple:
    """A record's place in time: its start as an instant (a naive time taken as UTC); one that is not an
    ISO time (a hand-edited ledger) goes first."""
    try:
        t = datetime.datetime.fromisoformat(r.started)
    except ValueError:
        return (0, 0.0)
    return (1, (t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)).timestamp())


def load(path: Path | None = None) -> Ledger:
    """The ledger at `path` (default: the user data directory); empty when it does not exist.
    FileProblem when the path is not a readable regular file."""
    given, path = path is not None, Path(path) if path is not None else default_ledger()
    try:
        st = os.stat(path)
    except FileNotFoundError:  # the default's folder is made by the first run: only a given path's is news
        return Ledger(path, (), missing_folder=path.parent if given and not path.parent.is_dir() else None)
    except OSError as e:
        raise FileProblem(f"cannot read: {e.strerror or e}") from None
    partial = stat.S_ISREG(st.st_mode) and st.st_size > LEDGER_LIMIT
    if not partial:
        data = read_bounded(path, LEDGER_LIMIT)  # refuses what is not a regular file, with the reason
    else:  # a long history: its newest part
        with open(path, "rb") as f:
            f.seek(-LEDGER_LIMIT, os.SEEK_END)
            data = f.read(LEDGER_LIMIT).split(b"\n", 1)[-1]
    records, skipped = [], 0
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            records.append(RunRecord.from_dict(json.loads(raw)))
        except (ValueError, RecursionError):  # not JSON, or not a record of this schema
            skipped += 1
    if not records and b"\x00" in data:  # a crash's zero-filled tail after good records is only skipped
        raise FileProblem("holds binary data (NUL bytes) and no run record: not a run ledger "
                          "(one JSON object a line)", "binary")
    if partial and not records:  # a ledger's newest 16 MiB hold records: the cut line counts as one not read
        skipped = max(skipped, 1)
    records.sort(key=_started)  # by start (lines joined from two ledgers); ties in file order
    return Ledger(path, tuple(records), skipped, partial=partial)
