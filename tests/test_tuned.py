"""What --tune measured: the cache (keyed, stale entries ignored) and `auto` following it."""

import dataclasses
import json

import pytest

from backends.config.options import Profile
from backends.config.plan import resolve
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
