"""SIGTERM, SIGHUP and SIGINT during `ltx-tui --tune` and `ltx-tui --check --smoke`: the console
script exits 128 + the signal (143, 129, 130), says so, and leaves no worker process behind (each
worker runs in its own process group; the stand-in worker forks a child that would outlive it)."""

import os
import signal
import subprocess
import sys

import pytest

from groups import SLEEPER, alive, groups, wait_gone, wait_groups

# The real console entry point, on a machine that looks like an H100 box (no torch import: the
# probe is the preset), with the workers replaced by SLEEPER.
DRIVER = """
import dataclasses, sys
from backends import smoke
from backends.machine import capability
from backends.machine.presets import preset
from backends.tune import run
capability.probe = lambda **kw: dataclasses.replace(preset("h100"), source="live")
run.worker_argv = lambda: [sys.executable, "-c", {sleeper!r}]
smoke.worker_command = lambda spec: [sys.executable, "-c", {sleeper!r}]
sys.argv = ["ltx-tui", *sys.argv[1:]]
from ltx_tui.cli import entry
entry()
"""

COMMANDS = {"tune": ["--tune", "--options", "transformer.attention", "--resolution", "224x224", "--frames", "9"],
            "smoke": ["--check", "--smoke"]}


@pytest.fixture
def group_file(tmp_path, monkeypatch):
    path = tmp_path / "groups"
    monkeypatch.setenv("GROUPS", str(path))
    yield path
    for pgid in groups(path):  # a failed test leaves nothing running either
        if alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("command, signum", [("tune", signal.SIGTERM), ("tune", signal.SIGHUP),
                                             ("tune", signal.SIGINT), ("smoke", signal.SIGTERM),
                                             ("smoke", signal.SIGHUP)])
def test_a_signal_kills_every_worker_group_and_exits_128_plus_n(group_file, command, signum):
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(sleeper=SLEEPER), *COMMANDS[command]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the tune starts the next worker while one measures: two groups; the smoke checks one at a time
        pgids = wait_groups(group_file, 2 if command == "tune" else 1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err
    name = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    assert f"ltx-tui: {name}" in err and "Traceback" not in err
    assert wait_gone(pgids) == []  # the workers and the children they forked


@pytest.mark.parametrize("command", ["tune", "smoke"])
def test_a_signal_during_a_json_command_still_answers_json(group_file, command):
    """A newcomer trial: `--tune --json` stopped by SIGTERM exited 143 with an empty stdout, where a
    script reads one JSON object (as for any other error)."""
    import json

    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(sleeper=SLEEPER), *COMMANDS[command], "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pgids = wait_groups(group_file, 2 if command == "tune" else 1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    doc = json.loads(out)
    assert doc["exit_code"] == 143 and "tool_version" in doc
    message = doc["error"] if command == "tune" else doc["error"]["message"]  # each command's error shape
    assert message == "stopped by SIGTERM"
    assert wait_gone(pgids) == []


def test_entry_puts_the_signal_handlers_back(monkeypatch, capsys):
    """Called in-process (as tests and scripts do), the console entry point leaves no handler of its own."""
    from ltx_tui.cli import entry

    before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    monkeypatch.setattr(sys, "argv", ["ltx-tui", "--list-capabilities"])
    with pytest.raises(SystemExit) as e:
        entry()
    assert e.value.code == 0
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == before
