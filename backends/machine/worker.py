"""Running a worker interpreter that cannot outlive its timeout.

The worker runs in its own process group: on timeout or cancel (or a KeyboardInterrupt here) the
whole group is killed, so a hung CUDA call or a child it forked goes too. Output is read by
threads (a worker filling a pipe never blocks), and the waits are bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

KILL_WAIT = 5.0  # seconds to wait for a killed group's leader to be reaped


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
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "status" in row:
                return row
        return None

    def tail(self, lines: int = 3) -> str:
        return " | ".join((self.stderr or self.stdout).strip().splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        pass


def run_worker(argv: list[str], timeout: float, cancel: threading.Event | None = None) -> Outcome:
    """Run `argv` in a new process group; never raises for the worker's failure, never waits past
    `timeout` (+ the kill)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=lambda s=s, b=b: b.append(s.read()), daemon=True)
               for s, b in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    status = None
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                status = "cancelled"
            elif time.perf_counter() - t0 > timeout:
                status = "timeout"
            if status:
                break
            time.sleep(0.05)
    finally:
        if status or proc.poll() is None:  # also on KeyboardInterrupt: no worker is left behind
            _kill_group(proc)
        else:  # the worker is done; a child it left behind goes with its group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for r in readers:
        r.join(timeout=1.0)
    return Outcome(status or "done", round(time.perf_counter() - t0, 2), "".join(out), "".join(err), proc.returncode)
