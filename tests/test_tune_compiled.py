"""--tune for the options whose first call compiles (compile.enabled, diffvae.mode): which values
are timed, the cold and warm-cache first calls (two worker processes), `--runs`, the JSON rows,
and the measurement itself on this CPU at narrowed shapes."""

import dataclasses
import json
import sys
import tempfile

import pytest
import torch

from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile
from backends.machine import capability as capmod
from backends.machine.presets import preset
from backends.tune import measure, run as runmod
from backends.tune.candidates import DEFAULT_OPTIONS, candidates
from ltx_tui.cli import main
from test_tune import narrow  # noqa: F401 (a fixture)

MODE, COMPILE = "diffvae.mode", "compile.enabled"


def live(pid="h200"):
    return dataclasses.replace(preset(pid), source="live")


def test_the_default_set_times_the_decoder_layouts_and_compile_on_a_gpu():
    specs, skipped = candidates(Profile(), preset("h200"))
    timed = {(s.option, s.value) for s in specs}
    assert {(COMPILE, "true"), (COMPILE, "false"), (MODE, "chunked_eager"), (MODE, "chunked_compile")} <= timed
    assert not any(s.option == "compile.mode" for s in specs)  # on request only
    why = {(o, v): r for o, v, r in skipped}
    assert "not in the default set" in why[MODE, "combined_compile"]
    assert (MODE, "combined_compile") in {(s.option, s.value) for s in candidates(Profile(), preset("h200"),
                                                                                   (MODE,))[0]}
    assert DEFAULT_OPTIONS == ("diffvae.na_backend", "transformer.attention", "transformer.quantization", COMPILE,
                               MODE)


def test_the_default_set_leaves_an_na_backend_with_one_runnable_value_untimed():
    """An H200 without NATTEN runs one NA backend (the Triton kernel, auto's prior there): timing it alone
    cost the default tune 25 s and could not change auto; asked for with --options, it is timed."""
    cap = preset("h200")
    packages = dict(cap.packages)
    packages["natten"] = dataclasses.replace(packages["natten"], available=False, version=None,
                                             reason="not installed", details={})
    cap = dataclasses.replace(cap, packages=packages)
    specs, skipped = candidates(Profile(), cap)
    assert "diffvae.na_backend" not in {s.option for s in specs}
    assert "nothing to choose between" in {(o, v): r for o, v, r in skipped}["diffvae.na_backend", "triton"]
    assert {s.option for s in specs} >= {"transformer.attention", "transformer.quantization", COMPILE, MODE}
    assert "triton" in [s.value for s in candidates(Profile(), cap, ("diffvae.na_backend",))[0]]


def test_a_cpu_skips_the_compiles_and_an_option_left_with_one_value_saying_why():
    specs, skipped = candidates(Profile(), preset("cpu"))
    assert not any(s.option in (MODE, COMPILE) for s in specs)
    why = {(o, v): r for o, v, r in skipped}
    assert "Inductor compiles C++ for minutes" in why[COMPILE, "true"]
    assert "Inductor compiles C++" in why[MODE, "chunked_compile"]
    assert "nothing to choose between" in why[COMPILE, "false"] and "nothing to choose" in why[MODE, "chunked_eager"]


FAKE_WORKER = """
import json, os, pathlib, sys, time
spec = json.loads(sys.stdin.readline())
cache = spec["compile_cache"]
cold = cache is not None and not any(pathlib.Path(cache).rglob("*"))
open(os.environ["SPAWNS"], "a").write(f"{spec['value']} first_only={spec['first_only']} cold={cold}\\n")
if cache:  # what a compile writes: Inductor's and Triton's caches
    for sub in ("inductor", "triton"):
        (pathlib.Path(cache) / sub / spec["value"]).mkdir(parents=True)
        (pathlib.Path(cache) / sub / spec["value"] / "kernel.bin").write_text(spec["value"])
plan = {"false": (447.0, 0.6, None), "true": (361.0, 8.1, 2.2), "chunked_eager": (1190.0, 6.4, 1.3),
        "chunked_compile": (550.0, 27.1, 3.27), "combined_compile": (575.0, 30.0, 3.5)}
ms, cold_s, warm_s = plan.get(spec["value"], (100.0, 0.1, None))  # other options' values: quick
if spec["value"] in ("false", "chunked_eager"):  # the compiled options' priors take longer than others
    time.sleep(0.3)
counts = {"graphs": 2, "fx_graph": [2, 0, 0] if spec["first_only"] else [0, 2, 0], "aot_autograd": [0, 0, 1],
          "bypassed": "Bypassing autograd cache due to: [fake]"}
if spec["first_only"]:
    print(json.dumps({"status": "measured", "warmup_s": warm_s, "reason": "first call only", "compile_cache": counts}))
else:
    print(json.dumps({"status": "measured", "ms": ms, "max_error": 1e-3, "warmup_s": cold_s, "reason": "fake",
                      **({"compile_cache": counts} if cache else {})}))
"""


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    spawns = tmp_path / "spawns"
    spawns.write_text("")
    monkeypatch.setenv("SPAWNS", str(spawns))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "compile" / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "compile" / "triton"))
    monkeypatch.setattr(runmod, "worker_argv", lambda: [sys.executable, "-c", FAKE_WORKER])
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the cold caches are made
    return spawns


def test_a_compiled_value_is_timed_cold_then_from_the_warm_cache_in_a_second_process(fake_worker, tmp_path):
    tuned = runmod.tune(Profile(), live(), RunShapes(768, 512, 121), options=(COMPILE, MODE), budget=60)
    rows = {c.value: c for c in tuned.candidates}
    assert (rows["true"].warmup_s, rows["true"].warmup_cached_s) == (8.1, 2.2)
    assert (rows["chunked_compile"].warmup_s, rows["chunked_compile"].warmup_cached_s) == (27.1, 3.27)
    # no compile, and a first call as quick as the rest: one process, from cold caches too
    assert (rows["false"].warmup_s, rows["false"].warmup_cached_s) == (0.6, None)
    # no compile, but a slow cold first call (the eager decoder's Triton NA: JIT and autotune, cached on
    # disk): timed again from warm caches, as a compiled value is (auto charged it the cold 6.4 s before)
    assert (rows["chunked_eager"].warmup_s, rows["chunked_eager"].warmup_cached_s) == (6.4, 1.3)
    spawned = fake_worker.read_text().splitlines()
    assert spawned[:3] == ["false first_only=False cold=True", "chunked_eager first_only=False cold=True",
                           "chunked_eager first_only=True cold=False"]
    assert len(spawned) == 9
    assert (tmp_path / "compile" / "triton" / "false" / "kernel.bin").is_file()  # merged without a second process
    for value in ("true", "chunked_compile", "combined_compile"):  # each compiled value: cold, then warm right after
        i = spawned.index(f"{value} first_only=False cold=True")
        assert spawned[i + 1] == f"{value} first_only=True cold=False"
    # what the cold process compiled went into the caches later processes use; its own directory is gone
    assert (tmp_path / "compile" / "inductor" / "chunked_compile" / "kernel.bin").read_text() == "chunked_compile"
    assert (tmp_path / "compile" / "triton" / "true" / "kernel.bin").is_file()
    assert not list((tmp_path / "tmp").iterdir()) and tuned.runs == 1
    # each process says what the compile caches gave it: the cold one compiled, the warm one hit
    assert rows["true"].reason == (
        "fake; cold process: 2 graph(s) traced, Inductor's cache 0 hit / 2 miss / 0 bypass, AOTAutograd's 0 / 0 / 1 "
        "(Bypassing autograd cache due to: [fake]); warm-cache process: 2 graph(s) traced, Inductor's cache 2 hit / "
        "0 miss / 0 bypass, AOTAutograd's 0 / 0 / 1 (Bypassing autograd cache due to: [fake])")
    assert rows["false"].reason.startswith("fake; cold process: ")


def test_after_the_priors_the_values_whose_first_call_compiles_go_first(fake_worker):
    """The large wins (compile, the decoder layouts) are timed before a short budget runs out on the
    quick options' alternatives, even though those options' priors measured quicker."""
    runmod.tune(Profile(), live(), RunShapes(768, 512, 121), options=("transformer.attention", COMPILE, MODE),
                budget=120, store=False)
    spawned = [line.split()[0] for line in fake_worker.read_text().splitlines()]
    compiled = [i for i, v in enumerate(spawned) if v in ("true", "chunked_compile", "combined_compile")]
    others = [i for i, v in enumerate(spawned[3:], 3) if v.startswith("sdpa_") or v == "pytorch"]
    assert len(compiled) == 6 and others and max(compiled) < min(others)


def test_fp8_scaled_mm_is_timed_with_the_large_wins_before_fp8_cast_and_the_attentions(fake_worker):
    """A fresh H200 spent the default tune's 150 s on fp8-cast and before the attentions' alternatives
    with fp8-scaled-mm (the DiT's largest win after compile) left untimed, and auto chose no
    quantization: the DiT's fp8/int8 GEMMs are timed with the compiled values, right after the priors."""
    runmod.tune(Profile(), live(), RunShapes(768, 512, 121),
                options=("transformer.attention", "transformer.quantization", COMPILE), budget=120, store=False)
    spawned = [line.split()[0] for line in fake_worker.read_text().splitlines()]
    assert spawned[1:3] == ["none", "false"]  # after the attention's prior, the other priors
    assert spawned[3:7] == ["fp8-scaled-mm", "int8-w8a8", "true", "true"]  # the large wins (true: cold, warm)
    assert {"fp8-cast", "sdpa_cudnn", "pytorch"} <= set(spawned[7:])  # then the rest


def test_a_second_process_that_fails_leaves_the_cold_timing_and_says_why(fake_worker, monkeypatch):
    real = runmod._spec_json
    monkeypatch.setattr(runmod, "_spec_json", lambda spec, shapes, na, cache=None, first_only=False: "not json"
                        if first_only else real(spec, shapes, na, cache, first_only))
    tuned = runmod.tune(Profile(), live(), RunShapes(768, 512, 121), options=(COMPILE,), budget=60, store=False)
    row = next(c for c in tuned.candidates if c.value == "true")
    assert row.status == "measured" and row.warmup_s == 8.1 and row.warmup_cached_s is None
    assert "first call with a warm compile cache not timed: the second process done" in row.reason


def test_cli_tune_json_rows_carry_the_warm_ups_and_runs_steer_auto(fake_worker, monkeypatch, capsys):
    monkeypatch.setattr(capmod, "probe", lambda **kw: live())
    args = ["--tune", "--options", f"{COMPILE},{MODE}", "--resolution", "224x224", "--frames", "9", "--json"]
    assert main(args + ["--runs", "5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {c["value"]: c for c in doc["candidates"]}
    assert rows["chunked_compile"]["warmup_s"] == 27.1 and rows["chunked_compile"]["warmup_cached_s"] == 3.27
    assert rows["false"]["warmup_cached_s"] is None and doc["runs"] == 5
    assert doc["auto"] == {COMPILE: True, MODE: "chunked_compile"} == {COMPILE: True, MODE: doc["chosen"][MODE]}
    spawned = len(fake_worker.read_text().splitlines())
    assert main(args + ["--runs", "1"]) == 0  # measured once: only the run's length changes the choice
    doc = json.loads(capsys.readouterr().out)
    assert doc["auto"] == {COMPILE: False, MODE: "chunked_eager"} and doc["runs"] == 1
    assert len(fake_worker.read_text().splitlines()) == spawned

    def no_probe(**kw):
        raise AssertionError("a cached re-run must not probe")

    monkeypatch.setattr(capmod, "probe", no_probe)
    assert main(args[:-1]) == 0  # the text table, from the cache: runs as stored
    out = capsys.readouterr().out
    assert "first s" in out and "cached s" in out and "27.10     3.27" in out
    assert f"chosen: {COMPILE} = false, {MODE} = chunked_eager; {COMPILE}, {MODE} for 1 run a process" in out
    assert f"auto:   {MODE} auto -> chunked_eager (fastest measured here (224x224x9): chunked_eager" in out


def test_the_worker_times_a_first_call_alone_in_the_cache_it_is_given(monkeypatch, tmp_path):
    import os

    seen = {}

    def fake(value, shapes, device, dtype, first_only=False):
        seen.update(first_only=first_only, cache=os.environ["TORCHINDUCTOR_CACHE_DIR"])
        return (None, None, 2.5) if first_only else (10.0, 1e-4, 9.0)

    monkeypatch.setitem(measure.MEASURE, COMPILE, fake)
    spec = {"option": COMPILE, "value": "true", "device": "cpu", "na_backend": "auto", "shapes": [224, 224, 9, 1],
            "compile_cache": str(tmp_path), "first_only": True}
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/elsewhere")  # the worker sets both: put them back after the test
    row = runmod.worker(spec)
    assert row == {"status": "measured", "warmup_s": 2.5, "reason": "first call only",
                   "compile_cache": row["compile_cache"]}
    assert set(row["compile_cache"]) >= {"graphs", "fx_graph", "aot_autograd"}  # torch's counters, as they stand
    assert seen == {"first_only": True, "cache": str(tmp_path / "inductor")}
    row = runmod.worker(dict(spec, first_only=False, compile_cache=None))
    assert row["ms"] == 10.0 and row["warmup_s"] == 9.0 and row["status"] == "measured"


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_the_dit_measurement_times_one_forward_of_48_blocks_and_its_first_call(narrow, monkeypatch):  # noqa: F811
    monkeypatch.setattr(measure, "bench", lambda fn, device, warm=False: fn() and 1.0)
    monkeypatch.setattr(measure, "first_call", lambda fn, device: (0.5, fn()))
    ms, err, warm = measure.compile_enabled("false", narrow, "cpu", torch.float32)
    assert ms == 24.0 and err < 1e-5  # the pair's 1 ms x 48 / 2
    assert warm == 0.5 + 23 * 0.001  # a whole DiT's first forward: the pair's first call + 23 pairs at 1 ms
    ms, err, warm = measure.compile_enabled("false", narrow, "cpu", torch.float32, first_only=True)
    assert (ms, err, warm) == (None, None, 0.5 + 23 * 0.5)  # the steady time from the pair's second call


def test_a_cached_eager_row_with_a_slow_cold_first_call_is_timed_again_from_warm_caches(fake_worker, tmp_path,
                                                                                          monkeypatch):
    """A tune before eager values got their warm-cache first call cached chunked_eager with its cold
    6.4 s alone (auto then charged it that, and picked the compiled decoder); the next tune times it
    again. A row whose second process failed is kept: re-timing it would cost every tune."""
    from backends.machine.tuned import Candidate, Tuned, store_tuned

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cap = live()
    failed = "fake; first call with a warm compile cache not timed: the second process failed"
    store_tuned(cap, Tuned(cap.fingerprint(), "768x512x121", (
        Candidate(MODE, "chunked_eager", "measured", 1190.0, 1e-3, "", 21.3, 6.4),
        Candidate(MODE, "chunked_compile", "measured", 550.0, 1e-3, failed, 40.0, 27.1),
        Candidate(COMPILE, "false", "measured", 447.0, 1e-3, "", 5.0, 0.6))))
    tuned = runmod.tune(Profile(), cap, RunShapes(768, 512, 121), options=(COMPILE, MODE), budget=60)
    spawned = fake_worker.read_text().splitlines()
    assert spawned[:2] == ["chunked_eager first_only=False cold=True", "chunked_eager first_only=True cold=False"]
    assert not any(line.startswith(("chunked_compile", "false ")) for line in spawned)
    rows = {c.value: c for c in tuned.candidates}
    assert rows["chunked_eager"].warmup_cached_s == 1.3 and rows["chunked_compile"].reason == failed


def test_a_cached_compiled_row_without_its_first_call_is_measured_again(fake_worker, tmp_path, monkeypatch):
    """A cache from before first calls were timed holds compiled rows auto cannot weigh: the next tune
    measures them again (cold, then warm) instead of reusing them."""
    from backends.machine.tuned import Candidate, Tuned, store_tuned

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cap = live()
    store_tuned(cap, Tuned(cap.fingerprint(), "768x512x121", (
        Candidate(COMPILE, "false", "measured", 447.0, 1e-3, "", 5.0),
        Candidate(COMPILE, "true", "measured", 361.0, 1e-3, "", 12.0))))
    tuned = runmod.tune(Profile(), cap, RunShapes(768, 512, 121), options=(COMPILE,), budget=60)
    assert fake_worker.read_text().splitlines() == ["true first_only=False cold=True", "true first_only=True cold=False"]
    rows = {c.value: c for c in tuned.candidates}
    assert (rows["true"].warmup_s, rows["true"].warmup_cached_s) == (8.1, 2.2)


def test_a_warm_first_call_cut_short_is_timed_again_and_a_failed_one_is_not():
    from backends.machine.tuned import Candidate

    def row(value, reason, warm=None, cold=6.4, ms=1190.0):
        return Candidate(MODE, value, "measured", ms, 1e-3, reason, 20.0, cold, warm)

    untimed = "fake; first call with a warm compile cache not timed: "
    assert runmod._warm_missing(row("chunked_eager", "fake"))  # an old tune never tried it
    assert runmod._warm_missing(row("chunked_eager", untimed + "the second process timeout; run again"))
    assert runmod._warm_missing(row("chunked_compile", untimed + "the second process cancelled; run again", cold=1.0))
    assert runmod._warm_missing(row("chunked_eager", untimed + "budget spent; run again with a larger --budget"))
    assert not runmod._warm_missing(row("chunked_eager", untimed + "the second process failed (Traceback ...)"))
    assert not runmod._warm_missing(row("chunked_eager", "fake", warm=1.3))  # it has one
    assert not runmod._warm_missing(row("chunked_eager", "fake", cold=1.5))  # a quick first call needs none
    assert not runmod._warm_missing(row("combined_eager", "fake"))  # a value of another version


def test_decoders_are_timed_with_the_na_backend_left_untimed_alone():
    from backends.machine.tuned import Candidate
    from backends.tune.candidates import ALONE

    alone = Candidate("diffvae.na_backend", "triton", "skipped", reason=f"{ALONE}: auto has nothing to choose")
    assert runmod._na_for_decode([alone]) == "triton"
    measured = Candidate("diffvae.na_backend", "natten:hopper-fna", "measured", 50.0, 1e-3)
    assert runmod._na_for_decode([alone, measured]) == "natten"
    assert runmod._na_for_decode([]) == "auto"
