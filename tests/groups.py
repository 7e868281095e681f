"""Process groups for the tests of quitting and signals: a worker that forks and sleeps (and says
its group), and whether anything of a group is still alive (read from /proc, no psutil)."""

from __future__ import annotations

import os
import time
from pathlib import Path

# A worker stand-in: records its process group in $GROUPS, forks a child that would outlive it,
# and sleeps (a hung kernel); both are in the worker's own process group.
SLEEPER = """
import os, sys, time
open(os.environ["GROUPS"], "a").write(f"{os.getpgid(0)}\\n")
if os.fork() == 0:
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def groups(path: Path) -> list[int]:
    """The process groups the sleepers recorded so far."""
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def alive(pgid: int) -> list[int]:
    """The processes of group `pgid` that are not zombies."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def wait_gone(pgids: list[int], timeout: float = 5.0) -> list[int]:
    """The processes of `pgids` still alive after at most `timeout` s (none: all gone)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for g in pgids for p in alive(g)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def wait_groups(path: Path, count: int, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(groups(path)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} worker(s) did not start within {timeout:g} s")
        time.sleep(0.05)
    return groups(path)
