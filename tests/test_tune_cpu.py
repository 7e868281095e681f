"""`ltx-tui --tune` where it cannot time LTX-2's shapes, with a cache it cannot write, next to
another tune, and with a candidate too slow for its budget."""

import dataclasses
import fcntl
import json
import os
import sys
import threading
import time

import pytest

from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile
from backends.machine import capability as capmod
from backends.machine.capability import NvmlInfo
from backends.machine.presets import preset
from backends.machine.tuned import cache_dir, load_tuned
from backends.tune import run as runmod
from ltx_tui.cli import main
from test_tune import install_fake_worker

ATTENTION = ["--tune", "--options", "transformer.attention", "--resolution", "224x224", "--frames", "9"]


def live(pid):
    return dataclasses.replace(preset(pid), source="live")


@pytest.fixture
def no_probe(monkeypatch):
    def probe(**kw):
        raise AssertionError("the refusal needs no torch import")

    monkeypatch.setattr(capmod, "probe", probe)


@pytest.mark.parametrize("as_json", [False, True])
def test_ltx2s_shapes_without_a_gpu_are_refused_at_once_with_the_reason(capsys, monkeypatch, no_probe, as_json):
    no_nvml = NvmlInfo(False, "NVML library not found (test)")
    monkeypatch.setattr(capmod, "read_nvml", lambda *a, **kw: (no_nvml, [], ()))
    code = main(["--tune"] + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    assert code == 1
    assert "no CUDA device here: NVML library not found (test)." in err
    assert "768x512x121" in err and "--resolution 224x224 --frames 9" in err
    if as_json:
        doc = json.loads(out)
        assert doc["exit_code"] == 1 and "no CUDA device here" in doc["error"]
        assert doc["shapes"]["resolution"] == "768x512"


def test_a_gpu_without_cuda_in_torch_is_refused_after_the_probe(capsys, monkeypatch):
    gpu = capmod.GPU(0, "NVIDIA H200", "GPU-0", "00000000:18:00.0", (9, 0), 143771 * 2**20)
    monkeypatch.setattr(capmod, "read_nvml", lambda *a, **kw: (NvmlInfo(True), [], (gpu,)))
    monkeypatch.setattr(capmod, "probe", lambda **kw: live("cpu"))  # the CPU wheel of torch
    assert main(["--tune", "--frames", "17", "--resolution", "256x256"]) == 1
    err = capsys.readouterr().err
    assert "no CUDA device here: " in err and "256x256x17" in err


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setattr(capmod, "probe", lambda **kw: live("cpu"))
    return install_fake_worker(monkeypatch, tmp_path)


def test_an_unwritable_cache_warns_and_prints_the_results(capsys, monkeypatch, tmp_path, fake_worker):
    cache_home = tmp_path / "cache"
    cache_home.mkdir()
    (cache_home / "ltx-tui").write_text("a file where the cache directory goes")  # unwritable, even as root
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    code = main(ATTENTION)
    out, err = capsys.readouterr()
    assert code == 0
    assert "sdpa_math" in out and "chosen: transformer.attention = " in out  # the table
    assert "warning: not cached: cannot write" in err and "the results are printed" in err
    assert "Traceback" not in err


def test_json_says_its_progress_on_stderr(capsys, fake_worker):
    assert main(ATTENTION + ["--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 0  # stdout stays one JSON object
    assert "ltx-tui --tune   CPU (no CUDA device)   224x224x9" in err and "[1/2] transformer.attention" in err


def test_a_second_tune_waits_for_the_first(fake_worker):
    cache = cache_dir()
    cache.mkdir(parents=True)
    held = os.open(cache / "tune.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # another tune is timing
    os.write(held, b"4242\n")
    said, result = [], []
    worker = threading.Thread(target=lambda: result.append(runmod.tune(
        Profile(), live("cpu"), RunShapes(224, 224, 9), options=("transformer.attention",), budget=30,
        on_wait=said.append)))
    worker.start()
    try:
        deadline = time.monotonic() + 20  # until the tune says it waits (at once; later on a loaded machine)
        while not said and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert worker.is_alive() and fake_worker.read_text() == ""  # waiting, timing nothing
        assert len(said) == 1 and "another tune (pid 4242) is timing on this machine" in said[0]
    finally:
        os.close(held)  # the first tune ends
    worker.join(20)
    assert result and result[0].chosen()["transformer.attention"]
    assert fake_worker.read_text().split() == ["pytorch", "sdpa_math"]  # the automatic order without CUDA


def test_a_cancel_stops_the_wait_and_caches_nothing(fake_worker):
    cache = cache_dir()
    cache.mkdir(parents=True)
    held = os.open(cache / "tune.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    cancel = threading.Event()
    try:
        tuned = runmod.tune(Profile(), live("cpu"), RunShapes(224, 224, 9), options=("transformer.attention",),
                            budget=30, cancel=cancel, on_wait=lambda message: cancel.set())
    finally:
        os.close(held)
    assert {c.reason for c in tuned.candidates if c.status == "skipped"} >= {"cancelled"}
    assert fake_worker.read_text() == "" and load_tuned(live("cpu"), "224x224x9") is None


# NATTEN's flex-fna on a CPU: never answers within any budget here; eager SDPA, the prior, answers
# after 0.2 s, and each attention value at once.
SLOW_WORKER = """
import json, os, sys, time
spec = json.loads(sys.stdin.readline())
open(os.environ["SPAWNS"], "a").write(spec["value"] + "\\n")
time.sleep({"natten:flex-fna": 60, "eager_sdpa": 0.2}.get(spec["value"], 0))
print(json.dumps({"status": "measured", "ms": 5.0, "max_error": 1e-4, "reason": "fake"}))
"""


@pytest.mark.slow  # 6 s (CI runs it; the quick suite stays under 4 min)
def test_a_slow_candidate_does_not_eat_the_budget_of_every_run(fake_worker, monkeypatch):
    """flex-fna (a stand-in that never answers) is timed after the other options' values, and once
    the budget has cut it short it is not started again with no more time than it had. The budget
    (3 s) leaves the three quick stand-ins (0.2 s, 0 s, 0 s and a Python start each) room on a loaded
    2-core machine."""
    monkeypatch.setattr(runmod, "worker_argv", lambda: [sys.executable, "-c", SLOW_WORKER])
    monkeypatch.setattr(runmod, "MIN_TIMEOUT", 0.2)
    cap, shapes = live("cpu"), RunShapes(224, 224, 9)
    options = ("diffvae.na_backend", "transformer.attention")

    def tune():
        rows = runmod.tune(Profile(), cap, shapes, options=options, budget=3.0).candidates
        return {c.value: c for c in rows if c.value in ("eager_sdpa", "natten:flex-fna", "sdpa_math", "pytorch")}

    first = tune()
    assert [first[v].status for v in ("eager_sdpa", "sdpa_math", "pytorch")] == ["measured"] * 3
    assert first["natten:flex-fna"].reason.startswith("budget spent after")
    tune()  # everything else cached: flex-fna gets the whole budget once more, and is cut again
    spawned = fake_worker.read_text().split()
    third = tune()
    assert fake_worker.read_text().split() == spawned  # not started again: no worker at all
    assert "not started again" in third["natten:flex-fna"].reason


def test_a_tune_worker_is_done_when_it_answers_not_when_it_exits():
    """A worker that compiled can take seconds to exit after its answer (torch's compile workers,
    CUDA): the tune takes the answer and kills the group, with nothing left behind."""
    from backends.machine.worker import Worker

    code = ("import json, sys, time\nsys.stdin.readline()\nprint('progress')\n"
            "print(json.dumps({'status': 'measured', 'ms': 1.0}), flush=True)\ntime.sleep(30)  # exit-slow-worker\n")
    t0 = time.monotonic()
    worker = Worker([sys.executable, "-c", code], answer_ends=True)
    outcome_pid = worker.proc.pid
    outcome = worker.run("{}", timeout=20)
    assert outcome.status == "done" and outcome.last_json() == {"status": "measured", "ms": 1.0}
    assert time.monotonic() - t0 < 10
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):  # its process group is gone
        os.killpg(outcome_pid, 0)
    assert Worker([sys.executable, "-c", code]).run("{}", timeout=1.5).status == "timeout"  # the smoke's workers
    garbled = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe warm-up noise\\n')\n" + code
    assert Worker([sys.executable, "-c", garbled], answer_ends=True).run("{}", timeout=20).last_json() == {
        "status": "measured", "ms": 1.0}  # bytes that are not UTF-8 do not stop the reading


def test_a_ctrl_c_while_a_worker_starts_still_lists_it_for_the_kill(monkeypatch):
    """A SIGINT that came inside Popen left the started worker running and unlisted (kill_all missed it)."""
    import os
    import signal
    import subprocess
    import sys

    from backends.machine import worker as workermod

    real, started = subprocess.Popen, []

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: inside Worker()
        for _ in range(100):  # a signal reaches Python's handler between bytecodes
            pass
        return started[-1]

    monkeypatch.setattr(workermod.subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt):
        workermod.Worker([sys.executable, "-c", "import time; time.sleep(60)"])
    assert workermod.kill_all() == 1
    assert started[0].wait(timeout=5) == -signal.SIGKILL


def test_the_count_says_what_ran_and_what_was_taken_from_the_cache(capsys, tmp_path, fake_worker):
    """A trial: '(29 candidates, 4 from the cache)' counted what the cache held before the tune (here a
    row of a value that cannot run on this CPU), not what the tune took from it."""
    from backends.machine.tuned import Candidate, store_tuned

    args = ATTENTION
    assert main(args + ["--output", str(tmp_path / "a.toml")]) == 0
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tuned in"))
    ran = int(first.split(" values: ")[1].split(" ran")[0])
    assert f"values: {ran} ran, 0 of them from the cache; " in first and " skipped: the reason says why" in first
    cap = capmod.probe()
    held = load_tuned(cap, "224x224x9")
    store_tuned(cap, dataclasses.replace(held, candidates=held.candidates + (
        Candidate("transformer.attention", "sdpa_cudnn", "measured", 1.0, 1e-4),)))  # no candidate on a CPU
    assert main(args + ["--output", str(tmp_path / "b.toml"), "--json"]) == 0  # --output: not the quick path
    assert json.loads(capsys.readouterr().out)["from_cache"] == ran
    assert main(args + ["--output", str(tmp_path / "c.toml"), "--fresh"]) == 0
    assert f"values: {ran} ran, none from the cache (--fresh); " in capsys.readouterr().out
