"""What --tune measured: the cache (keyed, stale entries ignored) and `auto` following it."""

import dataclasses
import json

import pytest

from backends.config.options import Profile
from backends.config.plan import resolve
from backends.config.run_length import run_calls
from backends.config.rules import Status
from backends.machine import tuned as tunedmod
from backends.machine.presets import preset
from backends.machine.tuned import Candidate, Tuned, load_tuned, store_tuned
from fakes import without


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def live(pid="h200"):
    return dataclasses.replace(preset(pid), source="live")


def T(cap, *rows, shapes="768x512x121"):
    return Tuned(cap.fingerprint(), shapes, tuple(Candidate(*r) for r in rows))


NA = "diffvae.na_backend"


def test_auto_na_follows_the_measurements_and_says_so():
    cap = live()
    tuned = T(cap, (NA, "triton", "measured", 4.0, 1e-3), (NA, "natten:hopper-fna", "measured", 1.5, 1e-3),
              (NA, "eager_sdpa", "measured", 30.0, 1e-3))
    plan = resolve(Profile(), cap, tuned)
    d = plan[NA]
    assert (d.effective, d.status) == ("natten", Status.OK)
    assert "fastest measured here (768x512x121): 1.5 ms vs triton 4 ms, eager_sdpa 30 ms" in d.chain[-1].reason
    k = plan["diffvae.natten_kernel"]
    assert k.effective == "hopper-fna" and "fastest measured here" in k.chain[-1].reason
    # without measurements: the prior (SM 9.0: ltx-tui's Triton first), and an ok, not a fallback
    d = resolve(Profile(), cap)[NA]
    assert (d.effective, d.status) == ("triton", Status.OK) and "prior" in d.chain[-1].reason


def test_an_inaccurate_or_failed_candidate_is_never_chosen():
    cap = live()
    tuned = T(cap, (NA, "natten:hopper-fna", "inaccurate", 0.5, 0.3, "max error 0.3 > 0.02"),
              (NA, "eager_sdpa", "failed", None, None, "out of memory"), (NA, "triton", "measured", 4.0, 1e-3))
    assert tuned.chosen() == {NA: "triton"}
    assert resolve(Profile(), cap, tuned)[NA].effective == "triton"


def test_a_measured_backend_that_cannot_run_here_is_skipped():
    cap = without(live(), "natten")
    tuned = T(cap, (NA, "natten:hopper-fna", "measured", 1.0, 1e-3), (NA, "triton", "measured", 4.0, 1e-3))
    d = resolve(Profile(), cap, tuned)[NA]
    assert d.effective == "triton" and d.status is Status.OK


def test_automatic_attention_follows_the_measurements():
    cap = live()
    key = "transformer.attention"
    tuned = T(cap, (key, "sdpa_flash", "measured", 2.0, 1e-3), (key, "sdpa_cudnn", "measured", 3.0, 1e-3))
    d = resolve(Profile(), cap, tuned)[key]
    assert d.effective == "sdpa_flash" and "fastest measured here" in d.chain[-1].reason


def test_cache_round_trip_and_latest_entry():
    cap = live()
    first = dataclasses.replace(T(cap, (NA, "triton", "measured", 4.0, 1e-3), shapes="768x512x121"),
                                written="2026-11-30T10:00:00+00:00")
    second = dataclasses.replace(T(cap, (NA, "triton", "measured", 9.0, 1e-3), shapes="1536x1024x121"),
                                 written="2026-11-30T11:00:00+00:00")
    store_tuned(cap, first)
    path = store_tuned(cap, second)
    assert path.parent == tunedmod.cache_dir() and path.is_file()
    assert load_tuned(cap, "768x512x121").ranked(NA)[0].ms == 4.0
    assert load_tuned(cap).shapes == "1536x1024x121"  # the most recent
    assert load_tuned(cap, "64x64x9") is None
    store_tuned(cap, T(cap, (NA, "triton", "skipped", None, None, "cancelled"), shapes="256x224x17"))
    assert load_tuned(cap).shapes == "1536x1024x121"  # a run that measured nothing does not hide the others


def test_stale_or_broken_caches_are_ignored(cache_home):
    cap = live()
    path = store_tuned(cap, T(cap, (NA, "triton", "measured", 4.0, 1e-3)))
    assert load_tuned(cap) is not None
    other = dataclasses.replace(cap, torch=dataclasses.replace(cap.torch, version="2.99.0"))
    assert other.fingerprint() != cap.fingerprint() and load_tuned(other) is None
    assert load_tuned(dataclasses.replace(cap, source="preset:h200")) is None  # another machine's facts
    data = json.loads(path.read_text())
    for change in ({"schema_version": 0}, {"ltx_tui": "0.0.0-other"}, {"fingerprint": "sha256:0"}):
        path.write_text(json.dumps(dict(data, **change)))
        assert load_tuned(cap) is None, change
    for junk in ("{", "[]", '{"entries": 5}', json.dumps(dict(data, entries={"x": {"shapes": "x", "candidates": [
            {"option": NA, "value": "triton", "status": "fast", "ms": 1.0}]}}))):
        path.write_text(junk)
        assert load_tuned(cap) is None, junk
    path.write_text("x" * (tunedmod.CACHE_LIMIT + 1))
    assert load_tuned(cap) is None
    store_tuned(cap, T(cap, (NA, "triton", "measured", 4.0, 1e-3)))  # a broken file is rewritten
    assert load_tuned(cap) is not None


# --- auto of the options whose first call compiles: decided for the run's length ----------------

MODE, COMPILE = "diffvae.mode", "compile.enabled"


def whole_run(cap):
    """Decoder and DiT candidates with the H200's figures (bench/RESULTS.md): a compiled first call
    27.1 s cold, 3.27 s from the warm cache; the DiT's blocks 8.1 s cold, 2.2 s warm."""
    return T(cap, (MODE, "chunked_eager", "measured", 1190.0, 1e-3, "", 9.0, 1.5),
             (MODE, "chunked_compile", "measured", 550.0, 1e-3, "", 40.0, 27.1, 3.27),
             (COMPILE, "false", "measured", 447.0, 1e-3, "", 5.0, 0.6),
             (COMPILE, "true", "measured", 361.0, 1e-3, "", 12.0, 8.1, 2.2))


def test_auto_counts_the_compile_over_the_runs_length():
    from backends.config.run_length import RunLength

    cap = live()
    one = resolve(Profile(), cap, whole_run(cap))  # one distilled generation: 1 decode, 11 DiT forwards
    assert one[MODE].effective == "chunked_eager" and one[COMPILE].effective is False
    assert "chunked_eager 1.19 s/decode + 0.31 s first call = 1.5 s beats chunked_compile 0.55 s/decode + 2.72 s " \
           "compile (cached) = 3.27 s over 1 run (1 decode)" in one[MODE].chain[-1].reason
    assert "over 1 run of 11 DiT forwards (LTX-2's distilled schedule" in one[COMPILE].chain[-1].reason
    assert one.step("compile") is None and one.step("diffvae_layout").args["mode"] == "chunked_eager"
    five = resolve(Profile(), cap, whole_run(cap), RunLength(runs=5))
    assert five[MODE].effective == "chunked_compile" and five[COMPILE].effective is True
    assert five[MODE].status is Status.OK and "chunked_compile 0.55 s/decode" in five[MODE].chain[-1].reason
    assert five.step("compile") is not None and five.step("diffvae_layout").args["compile"]
    assert five.pinned().diffvae.mode.value == "chunked_compile" and five.pinned().compile.enabled.value == "true"
    long_run = resolve(Profile(), cap, whole_run(cap), RunLength(dit_forwards=40, source="40 steps"))
    assert long_run[COMPILE].effective is True and long_run[MODE].effective == "chunked_eager"


def test_an_eager_decoder_is_charged_its_first_call_from_warm_caches_where_measured():
    """The H200's tune of 2026-12-02: the eager decoder's cold first call (Triton NA JIT + autotune) is
    6.4 s; a later process pays what the warm caches leave of it, as a compiled one pays its cached compile."""
    cap = live()
    tuned = T(cap, (MODE, "chunked_eager", "measured", 959.7, 1e-3, "", 21.3, 6.43, 1.2),
              (MODE, "chunked_compile", "measured", 419.4, 1e-3, "", 37.1, 19.8, 3.02))
    d = resolve(Profile(), cap, tuned)[MODE]
    assert d.effective == "chunked_eager"
    assert "chunked_eager 0.96 s/decode + 0.24 s first call (cached) = 1.2 s beats" in d.chain[-1].reason


def test_a_cold_compile_counts_when_the_warm_cache_was_not_measured():
    from backends.config.run_length import RunLength

    cap = live()
    cold = T(cap, (MODE, "chunked_eager", "measured", 1190.0, 1e-3, "", 9.0, 1.5),
             (MODE, "chunked_compile", "measured", 550.0, 1e-3, "", 40.0, 27.1))
    d = resolve(Profile(), cap, cold, RunLength(runs=5))[MODE]
    assert d.effective == "chunked_eager" and "26.6 s compile (cold cache)" in d.chain[-1].reason


def test_without_measurements_auto_is_the_prior_and_a_pinned_value_is_kept():
    cap = live()
    plan = resolve(Profile(), cap)
    assert plan[MODE].effective == "chunked_eager" and "prior, not measured here" in plan[MODE].chain[-1].reason
    assert plan[COMPILE].effective is False and "compiled" not in plan[COMPILE].chain[-1].reason
    assert plan[MODE].chain[-1].reason.count("--tune measures it") == 1
    assert plan["compile.mode"].effective is None  # unused: auto runs eager
    cpu = resolve(Profile(), preset("cpu"))  # --tune leaves the compiled values out on the CPU: said so
    for option in (MODE, COMPILE):
        assert "--tune measures it on a CUDA GPU, not on the CPU" in cpu[option].chain[-1].reason
    pinned = resolve(Profile().replace(**{MODE: "combined_compile", COMPILE: True}), cap, whole_run(cap))
    assert pinned[MODE].effective == "combined_compile" and pinned[COMPILE].effective is True
    assert "auto" not in pinned[MODE].chain[-1].reason


def test_auto_never_picks_what_ltx2s_own_pipeline_raises_for():
    """combined_compile without natten: ltx-tui's runtime runs it, LTX-2's pipeline raises, so auto
    (whose decision --ltx-args exports) keeps to the layouts both run; asked for, it warns."""
    cap = without(live(), "natten")
    tuned = T(cap, (MODE, "chunked_eager", "measured", 1190.0, 1e-3), (MODE, "combined_compile", "measured", 5.0,
                                                                      1e-3, "", 9.0, 1.0, 1.0))
    d = resolve(Profile(), cap, tuned)[MODE]
    assert d.effective == "chunked_eager" and d.status is Status.OK and "combined" not in d.chain[-1].reason
    asked = resolve(Profile().replace(**{MODE: "combined_compile"}), cap, tuned)[MODE]
    assert asked.status is Status.WARNING and asked.rules == ("diffvae.combined-needs-natten",)


def test_auto_never_compiles_over_several_gpus_and_asked_for_it_warns_of_the_barrier():
    """LTX-2's own *_mgpu CLI traps in its all2all barrier on a first compiled step: auto, whose
    decision --ltx-args exports, stays eager there however long the run; asked for, it warns."""
    from backends.config.run_length import RunLength

    cap = live("h200x2")
    prof = Profile().replace(**{"parallel.gpus": 2, "transformer.quantization": "fp8-cast"})
    d = resolve(prof, cap, whole_run(cap), RunLength(runs=50))[COMPILE]
    assert d.effective is False and d.status is Status.OK
    asked = resolve(prof.replace(**{COMPILE: True}), cap, whole_run(cap))[COMPILE]
    assert asked.status is Status.WARNING and asked.rules == ("parallel.compile-barrier",)
    assert resolve(Profile(), cap, whole_run(cap), RunLength(runs=50))[COMPILE].effective is True  # one GPU


def test_ltx_args_say_what_auto_decided():
    from backends.config.run_length import RunLength
    from backends.ltx_args import ltx_args

    cap = live()
    text = ltx_args(resolve(Profile(), cap, whole_run(cap), RunLength(runs=5)))
    assert "    --compile \\\n    --diffvae-optimization chunked_compile" in text
    assert "# diffvae.mode = auto -> chunked_compile: auto (fastest measured here" in text
    assert "--compile" not in ltx_args(resolve(Profile(), cap, whole_run(cap)))


def test_an_old_cache_without_warm_up_times_or_runs_still_loads(cache_home):
    cap = live()
    path = store_tuned(cap, whole_run(cap))
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    assert entry["runs"] == 1 and entry["candidates"][1]["warmup_cached_s"] == 3.27
    del entry["runs"]
    for c in entry["candidates"]:
        del c["warmup_s"], c["warmup_cached_s"]
        c["a_later_field"] = 1  # what a newer ltx-tui adds is ignored
    path.write_text(json.dumps(data))
    old = load_tuned(cap)
    assert old.runs == 1 and {c.warmup_s for c in old.candidates} == {None}
    assert old.chosen(run_calls(old)) == {MODE: "chunked_compile", COMPILE: "true"}  # steady times alone
    # ... which auto does not weigh: a compiled time without its first call leaves the compile out
    plan = resolve(Profile(), cap, old)
    assert plan[MODE].effective == "chunked_eager"
    assert plan[COMPILE].effective is False and "compiled" not in plan[COMPILE].chain[-1].reason
    entry["candidates"][0]["warmup_s"] = "slow"
    path.write_text(json.dumps(data))
    assert load_tuned(cap) is None


def test_a_cached_value_this_version_does_not_know_is_not_weighed(cache_home):
    """A cache written by another version may hold values this one lacks: auto weighs the others
    instead of failing every resolve (--check, the app, the launcher)."""
    cap = live()
    odd = T(cap, (MODE, "chunked_turbo", "measured", 10.0, 1e-3, "", 5.0, 0.1, 0.1),
            (MODE, "chunked_eager", "measured", 1190.0, 1e-3, "", 9.0, 1.5),
            (COMPILE, "yes", "measured", 10.0, 1e-3, "", 5.0, 0.1, 0.1))
    plan = resolve(Profile(), cap, odd)
    assert plan[MODE].effective == "chunked_eager" and "measured" in plan[MODE].chain[-1].reason
    assert plan[COMPILE].effective is False


def test_a_plan_for_a_run_follows_the_tune_at_its_shape_and_says_when_there_is_none():
    """A user tuned a tiny run (256x224x17) last; `--check` of the real run let it drive `auto` saying
    nothing about the shape."""
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.plan import plan_here, tuned_note

    cap = live()
    real = dataclasses.replace(T(cap, (NA, "eager_sdpa", "measured", 4.0, 1e-3), (NA, "triton", "measured", 9.0, 1e-3)),
                               written="2026-11-30T10:00:00+00:00")
    tiny = dataclasses.replace(T(cap, (NA, "triton", "measured", 1.0, 1e-3), (NA, "eager_sdpa", "measured", 2.0, 1e-3),
                                 shapes="256x224x17"), written="2026-11-30T11:00:00+00:00")
    store_tuned(cap, real)
    store_tuned(cap, tiny)
    run = RunShapes(768, 512, 121)
    plan = plan_here(Profile(), cap, run=run)
    assert plan.tuned.shapes == "768x512x121" and plan[NA].effective == "eager_sdpa"
    assert tuned_note(plan.tuned, run).endswith("(2026-11-30T10:00:00+00:00)")
    other = RunShapes(1536, 1024, 121)
    plan = plan_here(Profile(), cap, run=other)
    assert plan.tuned.shapes == "256x224x17"  # none at this shape: the latest, and the note says so
    assert ("at 256x224x17 (2026-11-30T11:00:00+00:00), not at this run's 1536x1024x121" in tuned_note(plan.tuned, other)
            and "`ltx-tui --tune --resolution 1536x1024 --frames 121`" in tuned_note(plan.tuned, other))
    assert "not at LTX-2's default run, 768x512x121" in tuned_note(plan_here(Profile(), cap).tuned, None)


def test_check_text_says_the_tune_was_at_another_shape(capsys, monkeypatch):
    from ltx_tui import check

    cap = live()
    store_tuned(cap, T(cap, (NA, "triton", "measured", 1.0, 1e-3), shapes="256x224x17"))
    monkeypatch.setattr(check.capmod, "probe", lambda: cap)
    assert check.run_check(profile_path=None, capability=None, as_json=False, strict=False) == 0
    assert "not at LTX-2's default run, 768x512x121" in capsys.readouterr().out
    assert check.run_check(profile_path=None, capability=None, as_json=True, strict=False) == 0
    doc = json.loads(capsys.readouterr().out)["tuned"]  # a script hears it too
    assert doc["shapes"] == "256x224x17" and doc["at_run_shape"] is False and "768x512x121" in doc["note"]


def test_on_a_cpu_the_note_sends_a_big_run_to_the_gpu_machine():
    """"measure it with ltx-tui --tune --resolution 768x512 ..." was advice this CPU refuses."""
    from backends.config.plan import tuned_note
    from backends.tune.run import can_time

    cpu, gpu = live("cpu"), live()
    tiny = T(cpu, (NA, "triton", "measured", 1.0, 1e-3), shapes="256x224x17")
    from backends.config.ltx2_shapes import DEFAULT_RUN

    assert not can_time(cpu, DEFAULT_RUN) and can_time(gpu, DEFAULT_RUN)
    assert "on the GPU machine (this one cannot time it)" in tuned_note(tiny, None, can_time(cpu, DEFAULT_RUN))
    assert "GPU machine" not in tuned_note(tiny, None, can_time(gpu, DEFAULT_RUN))


def test_tune_report_names_attentions_own_word_for_auto():
    # it printed "transformer.attention auto -> ...", a value that option does not have ("automatic")
    import io

    from ltx_tui.tune import RunShapes, _report

    cap = live()
    tuned = T(cap, ("transformer.attention", "sdpa_cudnn", "measured", 40.0, 1e-3),
              ("transformer.attention", "sdpa_flash", "measured", 80.0, 1e-3))
    out = io.StringIO()
    _report(tuned, RunShapes(768, 512, 121, 1), ("transformer.attention",), {"transformer.attention": "sdpa_cudnn"},
            1.0, False, out, 0, "measured")
    assert "auto:   transformer.attention automatic -> sdpa_cudnn (" in out.getvalue()
