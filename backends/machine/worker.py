"""Running a worker interpreter that cannot outlive its timeout, nor this process.

The worker runs in its own process group: on timeout or cancel (or a KeyboardInterrupt here) the
whole group is killed, so a hung CUDA call or a child it forked goes too. Every group still alive
is listed: `kill_all()` kills them (the app's quit, `ltx-tui`'s SIGTERM/SIGHUP handling, and at
exit). Output is read by threads (a worker filling a pipe never blocks), and the waits are bounded.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

KILL_WAIT = 5.0  # seconds to wait for a killed group's leader to be reaped

_live: set[subprocess.Popen] = set()  # the workers whose group has not been killed yet
_live_lock = threading.Lock()


@dataclass(frozen=True)
class Outcome:
    """How a worker ended: `status` done | timeout | cancelled, its output and exit code."""

    status: str
    seconds: float
    stdout: str
    stderr: str
    returncode: int | None

    def last_json(self) -> dict | None:
        """The last stdout line that is a JSON object with a "status" key (the worker's answer)."""
        for line in reversed(self.stdout.strip().splitlines()):
            row = _answer(line)
            if row:
                return row
        return None

    def tail(self, lines: int = 3) -> str:
        return " | ".join((self.stderr or self.stdout).strip().splitlines()[-lines:])


def _answer(line: str) -> dict | None:
    """`line` as a worker's answer: a JSON object with a "status" key, else None."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) and "status" in row else None


def _signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's process group (its children too); it is no longer live."""
    with _live_lock:
        _live.discard(proc)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    _signal_group(proc)
    try:
        proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass


def kill_all() -> int:
    """Kill the process group of every worker of this process that is still alive (quitting,
    a signal, exit); returns how many groups were killed. Safe from any thread, never waits."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _signal_group(proc)
    return len(procs)


atexit.register(kill_all)

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # what ltx-tui turns into KeyboardInterrupt


@contextlib.contextmanager
def _signals_held():
    """Defer `HELD` signals to the end of the block (on the main thread, where Python handles them):
    one that comes meanwhile goes to its handler after the block, never between starting a worker and
    listing it. (Not the thread's signal mask: a worker would inherit it.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[tuple[int, object]] = []
    held = {signum: signal.getsignal(signum) for signum in HELD}
    held = {signum: handler for signum, handler in held.items() if handler is not None}  # None: not Python's to set
    for signum in held:
        signal.signal(signum, lambda n, frame: came.append((n, frame)))
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
        for signum, frame in came[:1]:
            handler = held[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


class Worker:
    """A worker process started now, told what to do later (`run`): a worker can import its
    modules while another one is still measuring. It reads its task as one line on stdin."""

    def __init__(self, argv: list[str], answer_ends: bool = False) -> None:
        """`answer_ends`: the worker's answer (a stdout line holding a JSON object with a "status"
        key) ends its run; it is not waited for to exit (a process that compiled can take seconds
        to shut torch's compile workers and CUDA down)."""
        with _signals_held():  # a ctrl-c inside Popen would leave its process running, and unlisted
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, errors="replace", start_new_session=True)
            with _live_lock:
                _live.add(self.proc)
        self._out: list[str] = []
        self._err: list[str] = []
        self._answered = threading.Event()
        self._readers = [threading.Thread(target=self._read_lines if answer_ends else self._read_all, daemon=True),
                         threading.Thread(target=lambda: self._err.append(self.proc.stderr.read()), daemon=True)]
        for r in self._readers:
            r.start()

    def _read_all(self) -> None:
        self._out.append(self.proc.stdout.read())

    def _read_lines(self) -> None:
        for line in self.proc.stdout:
            self._out.append(line)
            if _answer(line):
                self._answered.set()

    def run(self, task: str | None, timeout: float, cancel: threading.Event | None = None) -> Outcome:
        """Send `task` (if any), wait at most `timeout` s from now; the group is gone afterwards."""
        t0 = time.perf_counter()
        proc = self.proc
        try:
            if task is not None:
                proc.stdin.write(task + "\n")
            proc.stdin.close()
        except (BrokenPipeError, OSError):  # the worker died early: its exit code and stderr say why
            pass
        status = None
        try:
            while proc.poll() is None and not self._answered.is_set():
                if cancel is not None and cancel.is_set():
                    status = "cancelled"
                elif time.perf_counter() - t0 > timeout:
                    status = "timeout"
                if status:
                    break
                time.sleep(0.05)
            if status is None and cancel is not None and cancel.is_set():  # killed for a cancel (`kill_all`)
                status = "cancelled"
            if status == "timeout" and self._answered.is_set():  # the answer came in the last tick
                status = None
        finally:
            if status or proc.poll() is None:  # also on KeyboardInterrupt: no worker is left behind
                _kill_group(proc)
            else:  # the worker is done; a child it left behind goes with its group
                _signal_group(proc)
        for r in self._readers:
            r.join(timeout=1.0)
        return Outcome(status or "done", round(time.perf_counter() - t0, 2), "".join(self._out),
                       "".join(self._err), proc.returncode)

    def kill(self) -> None:
        _kill_group(self.proc)


def run_worker(argv: list[str], timeout: float, cancel: threading.Event | None = None) -> Outcome:
    """Run `argv` in a new process group; never raises for the worker's failure, never waits past
    `timeout` (+ the kill)."""
    return Worker(argv).run(None, timeout, cancel)
