import json
import os
import re
import threading

import pytest

from backends.machine.capability import probe
from backends.machine.presets import preset
from backends.ltx_args import ltx_args
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.smoke import CheckSpec, plan_checks, run_all, run_check
from ltx_tui.cli import main


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def L(profile, cap="h100"):
    return ltx_args(resolve(profile, preset(cap)))


def test_default_profile_flags():
    out = L(P())
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert "python -m ltx_pipelines.distilled \\" in out
    assert "--diffvae-optimization chunked_eager" in out and "--max-batch-size 1" not in out
    assert "# memory.max_batch_size = 1: --max-batch-size is read only by some pipeline modules" in out
    assert "--offload" not in out and "--quantization" not in out and "--compile" not in out
    assert "# diffvae.na_backend = auto: no ltx-pipelines flag" in out
    # a trial: on a CPU the export set the allocator variable the plan says has no effect there
    cpu = L(P(), "cpu")
    assert "export PYTORCH_CUDA_ALLOC_CONF" not in cpu
    assert "# memory.expandable_segments = true left out: no effect without CUDA" in cpu


@pytest.mark.parametrize("q", ["fp8-cast", "fp8-scaled-mm", "nvfp4-cast", "nvfp4-prequant"])
def test_quantization_flags(q):
    assert f"--quantization {q}" in L(P(transformer__quantization=q))


def test_quantizations_without_a_flag_are_comments():
    out = L(P(transformer__quantization="int8-w8a8"))
    assert "--quantization" not in out and "# transformer.quantization = int8-w8a8: no ltx-pipelines flag" in out
    out = L(P(transformer__quantization="fp8-blockwise"))
    assert "    --quantization" not in out
    assert "# transformer.quantization = fp8-blockwise left out: ltx-tui does not run fp8-blockwise" in out


def test_offload_compile_and_batch_flags():
    out = L(P(offload__mode="disk", compile__enabled=True, memory__max_batch_size=3,
                     memory__expandable_segments=False, diffvae__mode="combined_compile"))
    assert "--offload disk" in out and "--max-batch-size" not in out.split("#")[0]
    assert "--diffvae-optimization combined_compile" in out
    assert "    --compile \\" in out  # bare: all defaults
    assert "PYTORCH_CUDA_ALLOC_CONF" not in out
    assert "# offload.gpu_slots = 2: no ltx-pipelines flag" in out
    keyed = L(P(compile__enabled=True, compile__mode="max-autotune", compile__backend="aot_eager",
                       compile__fullgraph=True, compile__dynamic="true", compile__capture=True))
    assert "--compile mode=max-autotune backend=aot_eager fullgraph=true dynamic=true capture=true" in keyed
    eager = L(P(compile__enabled=False, compile__capture=True))
    assert "--compile" not in eager.split("#")[0] and "# compile.capture = true with compile off: no ltx-pipelines" \
        in eager


def test_multi_gpu_uses_mgpu_module_and_drops_ignored_flags():
    out = L(P(parallel__gpus=2, parallel__devices=(2, 3), transformer__quantization="fp8-scaled-mm",
                     offload__mode="cpu"))
    assert "python -m ltx_pipelines.distilled_mgpu" in out
    assert "in place of ltx_pipelines.distilled)" not in out and "*_mgpu module" in out
    assert "export CUDA_VISIBLE_DEVICES=2,3" in out
    assert "    --quantization" not in out and "    --offload" not in out
    assert "# transformer.quantization = fp8-scaled-mm left out: LTX-2's multi-GPU command lines (*_mgpu) drop " \
        "--quantization" in out
    assert "# offload.mode = cpu left out: LTX-2's multi-GPU command lines (*_mgpu) drop --offload" in out


def test_cli_ltx_args(capsys, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[offload]\nmode = "cpu"\n')
    assert main(["--check", "--profile", str(path), "--capability", "h100", "--ltx-args"]) == 0
    assert "--offload cpu" in capsys.readouterr().out
    main(["--check", "--json", "--capability", "h100", "--ltx-args"])
    assert "--diffvae-optimization" in json.loads(capsys.readouterr().out)["ltx_args"]


def test_checks_follow_the_plan():
    p = P(transformer__quantization="fp8-cast", compile__enabled=True, offload__mode="cpu",
          parallel__gpus=2, diffvae__na_backend="natten")
    cap = preset("h100x2")
    names = [s.name for s in plan_checks(resolve(p, cap))]
    assert names[:2] == ["diffvae chunked_eager", "na3d natten:hopper-fna"]
    assert "compiled blocks (default)" in names and "nccl all-reduce x2" in names
    # multi-GPU runs fp8-cast and no offload (offload there is an error of the plan), so that is what gets checked
    assert "linear fp8-cast" in names and not any(n.startswith("offload") for n in names)
    single = P(offload__mode="cpu")
    assert "offload cpu round trip" in [s.name for s in plan_checks(resolve(single, preset("h100")))]
    cpu = preset("cpu")
    assert {s.device for s in plan_checks(resolve(P(), cpu))} == {"cpu"}


def test_checks_carry_the_plan_step_they_check():
    plan = resolve(P(diffvae__na_backend="triton", transformer__attention="sdpa_flash"), preset("h100"))
    specs = {s.kind: s for s in plan_checks(plan)}
    assert specs["na_backend"].params["steps"][0]["args"] == dict(plan.step("na_backend").args) == {"backend": "triton"}
    assert specs["dense_attention"].params["steps"] == [{"kind": "dense_attention", "args": {"name": "sdpa_flash"},
                                                        "text": plan.step("dense_attention").text,
                                                        "options": ["transformer.attention"]}]
    assert specs["dense_attention"].params["bound"] == {"half": 2e-2, "fp32": 1e-3}
    assert [s["kind"] for s in specs["diffvae_layout"].params["steps"]] == ["diffvae_layout", "na_backend"]
    assert specs["diffvae_layout"].params["bound"] == {"half": 5e-2, "fp32": 1e-3}


def test_fast_norm_and_the_eager_capture_are_smoke_checked_within_their_bounds():
    specs = {s.kind: s for s in plan_checks(resolve(P(transformer__fast_norm=True, compile__capture=True),
                                                    preset("h200")))}
    assert specs["fast_norm"].name == "one-pass norms (fast_norm)"
    assert specs["fast_norm"].params["bound"] == {"half": 2e-2, "fp32": 1e-3}
    assert specs["capture"].name == "captured block loop (eager blocks)"
    assert specs["capture"].params["bound"] == {"half": 3e-2, "fp32": 1e-3}
    assert "capture" not in {s.kind for s in plan_checks(resolve(P(compile__capture=True), preset("cpu")))}


def test_a_capture_that_did_not_capture_fails_its_check():
    from types import SimpleNamespace

    from backends.smoke import CheckFailed, _captured

    _captured(SimpleNamespace(reason=None, replays=1), "probe")
    for graphs, says in ((None, "no LTX-2 block loop"), (SimpleNamespace(reason="capture failed: x", replays=0),
                                                         "without a CUDA graph on probe: capture failed: x"),
                         (SimpleNamespace(reason=None, replays=0), "never replayed")):
        with pytest.raises(CheckFailed, match=says):
            _captured(graphs, "probe")


def test_fast_norm_is_not_run_without_ltx2s_modules(monkeypatch):
    """ltx-tui's stand-in modules have no norm slots nor block loop: not run, saying why (not a failure)."""
    from dataclasses import asdict

    from backends import smoke
    from backends.runtime import ltx2

    monkeypatch.setattr(ltx2, "import_ltx_core", lambda: (None, "not installed (test)"))
    spec = next(s for s in plan_checks(resolve(P(transformer__fast_norm=True), preset("cpu"))) if s.kind == "fast_norm")
    row = smoke._worker(asdict(spec))
    assert row["status"] == "skipped" and "ltx-core is not importable" in row["message"], row


@pytest.mark.slow  # a worker process with LTX-2's modules (~12 s on 2 cores)
@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_the_fast_norm_check_runs_ltx2s_blocks_on_this_cpu():
    spec = next(s for s in plan_checks(resolve(P(transformer__fast_norm=True), preset("cpu"))) if s.kind == "fast_norm")
    result = run_check(spec)
    assert result.status == "pass" and "LTX-2 LTXModel" in result.message, result


@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
def test_a_checks_message_says_how_many_modules_each_option_changed():
    """A newcomer trial: the message ended "...: 2 diffvae.na_backend", a count with nothing to say what of."""
    from dataclasses import asdict

    from backends import smoke

    spec = next(s for s in plan_checks(resolve(P(diffvae__na_backend="eager_sdpa"), preset("cpu"))) if s.kind == "na_backend")
    row = smoke._worker(asdict(spec))
    assert row["status"] == "pass" and re.search(r": diffvae\.na_backend in \d+ modules", row["message"]), row


def test_errors_are_not_smoke_checked():
    p = P(transformer__quantization="fp8-scaled-mm")
    assert not any(s.name.startswith("linear") for s in plan_checks(resolve(p, preset("a100"))))


def test_a_check_is_not_refused_for_another_options_error():
    """A user trial: with transformer.quantization = fp8-scaled-mm on this CPU (an error), every other
    smoke check errored "ProfileNotRunnable: the profile cannot run here:" after ~11 s, its reason on
    a second line the table never showed. A check applies its own steps: another option's error is
    validation's to report."""
    import torch

    from backends.runtime.apply import apply_profile
    from backends.smoke import _only

    plan = resolve(P(transformer__quantization="fp8-scaled-mm"), probe())
    assert [d.option for d in plan.blocking] == ["transformer.quantization"]
    na = next(s for s in plan_checks(plan) if s.kind == "na_backend")
    steps = [s for s in plan.steps if s.kind == "na_backend"]
    sub = _only(plan, tuple(steps))
    assert sub.blocking == [] and na.name
    apply_profile(torch.nn.Linear(2, 2), sub, device="cpu")  # raised ProfileNotRunnable


def _na_spec(backend="eager_sdpa"):
    plan = resolve(P(diffvae__na_backend=backend), probe())
    return next(s for s in plan_checks(plan) if s.kind == "na_backend")


@pytest.mark.slow
def test_run_check_passes_fails_times_out_and_cancels():
    spec = _na_spec()
    good = run_check(spec)
    assert good.status == "pass" and good.max_error < 1e-4 and good.seconds > 0, good
    other = dict(spec.params["steps"][0], args={"backend": "reference"})
    sent = run_check(CheckSpec(spec.name, spec.kind, spec.device, {**spec.params, "steps": [other]}))
    assert sent.status == "pass" and "this machine's plan now has {'backend': 'eager_sdpa'}" in sent.message  # runs what it is sent
    slow = run_check(spec, timeout=0.05)
    assert slow.status == "timeout" and "0.05" in slow.message
    assert "--timeout S gives each check longer" in slow.message  # it said only "no answer within 0.05 s"
    cancel = threading.Event()
    cancel.set()
    rows = run_all([spec] * 3, cancel=cancel)
    assert [r.status for r in rows] == ["cancelled", "not run", "not run"]


@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the checks and exit code of a machine without CUDA")
def test_cli_smoke_on_this_machine(capsys, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[diffvae]\nna_backend = "eager_sdpa"\n[transformer]\nquantization = "fp8-cast"\n')
    code = main(["--check", "--json", "--smoke", "--profile", str(path)])
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["smoke"]] == ["diffvae chunked_eager", "na3d eager_sdpa", "attention pytorch",
                                                 "linear fp8-cast"]
    assert all(r["status"] == "pass" for r in doc["smoke"][1:])
    # the layout is LTX-2's decoder's: skipped (not failed) where ltx-core cannot be imported
    assert doc["smoke"][0]["status"] == ("pass" if os.environ.get("LTX2_CORE_SRC") else "skipped")
    assert code == 1  # parallel.gpus: no GPU here


def _forking_worker(spec):
    """A worker that forks a child which keeps the output pipes open and sleeps."""
    import sys

    code = ("import os, sys, time\n"
            "if os.fork() == 0:\n    time.sleep(100)\n"
            "time.sleep(100)\n")
    return [sys.executable, "-c", code]


def test_timeout_holds_when_the_worker_has_children(monkeypatch):
    import os
    import time

    monkeypatch.setattr("backends.smoke.worker_command", _forking_worker)
    spec = CheckSpec("forks", "na_backend", "cpu", {})
    t0 = time.monotonic()
    result = run_check(spec, timeout=1)
    wall = time.monotonic() - t0
    print(f"timeout 1 s with a forked child: returned after {wall:.2f} s")
    assert result.status == "timeout" and wall < 10.0
    # the whole process group is gone: no sleeping child is left behind
    time.sleep(0.2)
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and "time.sleep(100)" in
                 open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")]
    assert leftovers == []


def test_cancel_kills_the_group_too(monkeypatch):
    import time

    monkeypatch.setattr("backends.smoke.worker_command", _forking_worker)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    result = run_check(CheckSpec("forks", "na_backend", "cpu", {}), timeout=60, cancel=cancel)
    assert result.status == "cancelled" and time.monotonic() - t0 < 10.0


@pytest.mark.slow
def test_smoke_for_another_capability_is_planned_for_this_machine(capsys):
    code = main(["--check", "--json", "--smoke", "--capability", "h100", "--timeout", "300"])
    doc = json.loads(capsys.readouterr().out)
    here = resolve(Profile(), probe())
    assert [r["name"] for r in doc["smoke"]] == [s.name for s in plan_checks(here)]
    assert doc["smoke_machine"] == "this machine, not h100"
    assert "na3d triton" not in [r["name"] for r in doc["smoke"]] or probe().cuda


def test_cli_ltx_args_that_cannot_run_say_why_on_stderr(capsys, tmp_path):
    """`--check --ltx-args` of a profile with errors exited 1 with an empty stderr: now each error
    is a line there, with its fix, and the exit code's meaning."""
    path = tmp_path / "p.toml"
    path.write_text('schema_version = 1\n[parallel]\ngpus = 2\n')
    assert main(["--check", "--profile", str(path), "--capability", "cpu", "--ltx-args"]) == 1
    out, err = capsys.readouterr()
    assert "python -m ltx_pipelines.distilled_mgpu" in out  # the command line is still written
    assert "ltx-tui: error: parallel.gpus = 2" in err and "fix:" in err
    assert "parallel.gpus = 2: parallel.gpus = 2" not in err  # a newcomer trial: said twice, the message's own
    assert "exit 1: the profile cannot run here as asked" in err
    assert main(["--check", "--profile", str(path), "--capability", "h100", "--ltx-args", "--gpus", "1"]) == 0
    assert capsys.readouterr().err == ""
    path.write_text("")  # runs as asked; only --strict's count of the profile's warning exits 1
    assert main(["--check", "--profile", str(path), "--capability", "h100", "--ltx-args", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "cannot run here" not in err and "exit 1: --strict counts the fallbacks and warnings above" in err


@pytest.mark.parametrize("mode", ["combined_compile", "chunked_eager"])
def test_a_decoder_layout_is_not_passed_where_ltx2s_decoder_is_not_there(monkeypatch, mode):
    # without ltx-core the layout check ran ltx-tui's NA blocks, which have no layout: a green pass of
    # a layout nothing exercised (combined_compile "passed" with no compile at all)
    from backends import smoke
    from backends.runtime import ltx2

    plan = resolve(P(diffvae__mode=mode, diffvae__na_backend="eager_sdpa"), preset("cpu"))
    spec = {s.kind: s for s in plan_checks(plan)}["diffvae_layout"]
    monkeypatch.setattr(ltx2, "import_ltx_core", lambda: (None, "ltx-core is not installed"))
    with pytest.raises(smoke.CheckSkipped, match="ltx-core is not importable"):
        smoke._check_step("diffvae_layout", "cpu", spec.params["profile"], spec.params["steps"], spec.params["bound"])
    assert "skipped" in smoke.NOT_FAILED  # a check skipped so does not fail --check --smoke
