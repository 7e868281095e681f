"""`ltx-tui run`'s pure parts: the flag policy, the ledger, `ltx-tui runs`, and the gate's checks."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from backends.config.options import Profile
from backends.launch import flags
from backends.machine import runs
from backends.machine.presets import preset
from backends.machine.runs import ModelRecord, RunRecord, StageRecord
from fakes import decided
from ltx_tui.cli import main

ARGS = ["--distilled-checkpoint-path", "/m.safetensors", "--prompt", "a cat", "--width", "768"]


def profile(**values) -> Profile:
    return decided(**values)


def test_no_speed_flags_pass_through_and_ltx_tui_applies_the_rest():
    p = flags.policy(ARGS, profile())
    assert p.ltx_argv == (*ARGS, "--diffvae-optimization", "chunked_eager") and p.verdicts == ()
    assert p.dit_steps == ("dense_attention", "fast_norm", "quantize", "compile", "capture")
    assert p.decoder_steps == ("diffvae_layout", "na_backend")


def test_every_plan_step_of_a_dit_reaches_the_dit_under_the_launcher():
    """A step the policy leaves out is silently not applied to LTX-2's DiT (fast_norm and capture
    once were): every step kind is the launcher's for the DiT, the decoder's, or the process's."""
    from backends.config.plan import STEP_ORDER

    p = flags.policy(ARGS, profile(**{"transformer.fast_norm": True, "compile.capture": True}))
    process = {"env", "offload"}  # apply_env before LTX-2 starts; offload is LTX-2's streaming builder
    assert set(STEP_ORDER) == set(p.dit_steps) | set(p.decoder_steps) | process
    assert {"fast_norm", "capture"} <= set(p.dit_steps)


def test_a_flag_that_disagrees_conflicts_naming_both():
    p = flags.policy(ARGS + ["--quantization", "fp8-cast"], profile())
    (v,) = p.conflicts
    assert v.flag == "--quantization fp8-cast" and v.option == "transformer.quantization"
    assert "transformer.quantization = none" in v.detail


def test_a_flag_that_agrees_is_taken_over_never_passed_to_ltx2():
    prof = profile(**{"diffvae.mode": "chunked_compile", "transformer.quantization": "fp8-scaled-mm",
                      "compile.enabled": True})
    p = flags.policy(ARGS + ["--diffvae-optimization", "chunked_compile", "--quantization=fp8-scaled-mm",
                             "--compile", "--max-batch-size", "1"], prof)
    assert not p.conflicts and len(p.verdicts) == 4
    # none reaches LTX-2 as given: no double quantization or compile; the layout mode only sizes LTX-2's
    # decode tiles (the launcher takes LTX-2's layout op off the decoder's builder)
    assert p.ltx_argv == (*ARGS, "--diffvae-optimization", "chunked_compile")


@pytest.mark.parametrize("given, values, option", [
    (["--compile", "mode=reduce-overhead"], {"compile.enabled": True}, "compile.mode"),
    (["--compile"], {}, "compile.enabled"),
    (["--offload", "cpu"], {}, "offload.mode"),
    (["--diffvae-optimization", "combined_compile"], {}, "diffvae.mode"),
    (["--max-batch-size", "4"], {}, "memory.max_batch_size"),
])
def test_each_speed_flag_is_judged(given, values, option):
    (v,) = flags.policy(ARGS + given, profile(**values)).conflicts
    assert v.option == option


@pytest.mark.parametrize("quantization", ["fp8-scaled-mm", "int8-w8a8", "fp8-blockwise"])
def test_offload_refuses_what_ltx2s_streaming_cannot_load(quantization):
    with pytest.raises(flags.FlagConflict, match="only quantization none or fp8-cast"):
        flags.policy(ARGS, profile(**{"offload.mode": "cpu", "transformer.quantization": quantization}))


def test_a_bare_compile_means_ltx2s_defaults():
    prof = profile(**{"compile.enabled": True, "compile.mode": "max-autotune-no-cudagraphs"})
    (v,) = flags.policy(["--compile"], prof).conflicts
    assert v.option == "compile.mode" and "left at LTX-2's default" in v.detail
    assert not flags.policy(["--compile", "mode=max-autotune-no-cudagraphs"], prof).conflicts
    with pytest.raises(flags.FlagConflict, match="twice"):
        flags.policy(["--compile", "mode=default", "mode=default"], prof)


def test_max_batch_size_compares_by_value():
    assert not flags.policy(["--max-batch-size", "01"], profile()).conflicts


def test_compile_keys_compare_by_value():
    prof = profile(**{"compile.enabled": True, "compile.fullgraph": True, "compile.dynamic": "false"})
    assert not flags.policy(["--compile", "fullgraph=True", "dynamic=false", "backend=inductor"], prof).conflicts
    assert flags.policy(["--compile", "fullgraph=false"], prof).conflicts


@pytest.mark.parametrize("given, words", [
    (["--compile", "inductor_config={}"], "no option for inductor_config"),
    (["--compile", "bogus=1"], "not a key LTX-2 knows"),
    (["--compile", "mode"], "KEY=VALUE"),
    (["--quant", "fp8-cast"], "abbreviation of --quantization"),
    (["--diffvae=chunked_eager"], "spell the flag out"),
])
def test_flags_the_profile_cannot_judge_are_refused(given, words):
    with pytest.raises(flags.FlagConflict, match=words):
        flags.policy(ARGS + given, profile(**{"compile.enabled": True}))


def test_offload_is_ltx2s_and_takes_quantization_and_compile_with_it():
    prof = profile(**{"offload.mode": "cpu", "transformer.quantization": "fp8-cast", "compile.enabled": True,
                      "compile.mode": "max-autotune-no-cudagraphs", "memory.max_batch_size": 2})
    p = flags.policy(ARGS, prof)
    assert p.ltx_argv == (*ARGS, "--diffvae-optimization", "chunked_eager", "--offload", "cpu", "--quantization",
                          "fp8-cast", "--compile", "mode=max-autotune-no-cudagraphs", "--max-batch-size", "2")
    assert p.dit_steps == ("dense_attention", "fast_norm")
    assert len(p.ltx2_does) == 4


def test_ltx2s_streaming_builder_gets_compile_without_cuda_graphs():
    """Over streamed weights the plan falls back to compile without CUDA graphs; the flag must too."""
    prof = profile(**{"offload.mode": "cpu", "transformer.quantization": "fp8-cast", "compile.enabled": True,
                      "compile.mode": "reduce-overhead", "compile.capture": True})
    p = flags.policy(ARGS, prof)
    i = p.ltx_argv.index("--compile")
    assert "capture=true" not in p.ltx_argv and "mode=reduce-overhead" not in p.ltx_argv[i:]
    assert any(d.startswith("compile: LTX-2's compile op") for d in p.ltx2_does)


@pytest.mark.parametrize("method", ["nvfp4-cast", "nvfp4-prequant"])
def test_nvfp4_goes_to_ltx2s_loader(method):
    """Only LTX-2's loader quantizes to NVFP4: the flag goes to LTX-2, the DiT gets no quantize step."""
    p = flags.policy(ARGS, profile(**{"transformer.quantization": method, "compile.enabled": True}))
    assert p.ltx_argv == (*ARGS, "--diffvae-optimization", "chunked_eager", "--quantization", method)
    assert p.dit_steps == ("dense_attention", "fast_norm", "compile", "capture")
    assert any("loader" in d for d in p.ltx2_does)


# --- the ledger -------------------------------------------------------------------------------

def record(id_: str, module="ltx_pipelines.distilled", seconds=(1.0, 4.0, 2.0), status="ok") -> RunRecord:
    stages = (StageRecord("text encoding", "text_encoder", seconds[0], peak_allocated_gib=20.0, predicted_gib=22.0,
                          predicted_stage="text encoder"),
              StageRecord("denoising 1", "denoise", seconds[1], peak_allocated_gib=36.0, step_seconds=(0.5, 0.5),
                          forwards=2, tokens=1536),
              StageRecord("video decode", "video_decode", seconds[2], peak_allocated_gib=4.3))
    return RunRecord(id_, "2026-11-30T22:00:00+00:00", module, status, 0, sum(seconds) + 1, stages=stages,
                     models=(ModelRecord("LTXModel", "denoising 1", 3.0, 0.5, True, ("compile.enabled: compiled",),
                                         compile="4 graph(s) compiled, 0 graph break(s), 1 ran eagerly (WON'T CONVERT forward)"),),
                     profile={"path": "p.toml"})


def test_ledger_appends_lines_and_finds_runs(tmp_path):
    path = tmp_path / "deep" / "runs.jsonl"
    runs.append(record("20261130-220000-aaaa"), path)
    runs.append(record("20261130-230000-bbbb"), path)
    with open(path, "a") as f:
        f.write("{not json\n" + json.dumps({"schema": 99}) + "\n")
    ledger = runs.load(path)
    assert [r.id for r in ledger.records] == ["20261130-220000-aaaa", "20261130-230000-bbbb"]
    assert ledger.skipped == 2
    assert ledger.find("-1").id.endswith("bbbb") and ledger.find("20261130-22").id.endswith("aaaa")
    assert ledger.find("2").id.endswith("bbbb")  # a position, though every id starts with a 2
    back = ledger.find("1")
    assert back == record("20261130-220000-aaaa")  # round trip
    assert back.stages[0].error_pct == pytest.approx(10.0)
    assert back.gpu_seconds == 7.0 and back.peak_gib == 36.0
    with pytest.raises(KeyError, match="no run"):
        ledger.find("nope")
    with pytest.raises(KeyError, match="holds 2 run"):
        ledger.find("3")
    with pytest.raises(KeyError, match=r"holds 2 run\(s\): give 1 to 2 \(1 the oldest\) or -1 to -2 \(-1 the newest\)"):
        ledger.find("0")  # a trial: the positions there are were not said
    with pytest.raises(KeyError, match="2 runs in"):
        ledger.find("20261130")
    # a user trial: a short prefix of the ids, all digits, was read as a position and refused
    with pytest.raises(KeyError, match="2 runs in"):
        ledger.find("2026113")
    other = tmp_path / "other.jsonl"
    for rid in ("20251130-220000-aaaa", "20261130-230000-bbbb"):
        runs.append(record(rid), other)
    assert runs.load(other).find("2025").id.endswith("aaaa") and runs.load(other).find("202611").id.endswith("bbbb")
    with pytest.raises(KeyError, match="holds 2 run"):
        runs.load(other).find("2027")


def test_runs_go_by_their_start_not_the_files_order(tmp_path, capsys):
    """A user trial: two ledgers' lines joined out of time order listed in file order, and `--show -1`
    (the newest) gave the older run; the Runs tab sorted them by start."""
    import dataclasses

    path = tmp_path / "runs.jsonl"
    runs.append(dataclasses.replace(record("20261202-080342-e8ea"), started="2026-12-02T08:03:42+00:00"), path)
    runs.append(dataclasses.replace(record("20261202-075412-dbe1"), started="2026-12-02T07:54:12+00:00"), path)
    assert runs.load(path).find("-1").id == "20261202-080342-e8ea"
    runs.append(dataclasses.replace(record("20261202-073000-aaaa"), started="2026-12-02T08:30:00+01:00"), path)
    ledger = runs.load(path)  # 07:30 UTC: the oldest by the instant, the newest by the text
    assert ledger.find("1").id == "20261202-073000-aaaa" and ledger.find("-1").id == "20261202-080342-e8ea"
    assert main(["runs", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.index("e8ea") < out.index("dbe1")  # newest first
    assert main(["runs", "--ledger", str(path), "--last", "1", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["20261202-080342-e8ea"]


def test_a_missing_ledger_is_empty_and_a_directory_is_a_problem(tmp_path):
    assert runs.load(tmp_path / "none.jsonl").records == ()
    with pytest.raises(runs.FileProblem, match="directory"):
        runs.load(tmp_path)


def test_runs_lists_shows_and_compares(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    assert main(["runs", "--ledger", str(path)]) == 0
    assert "no runs" in capsys.readouterr().err
    runs.append(record("20261130-220000-aaaa", seconds=(1.0, 8.0, 4.0)), path)
    runs.append(record("20261130-230000-bbbb", seconds=(1.0, 4.0, 1.0)), path)
    assert main(["runs", "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.index("bbbb") < out.index("aaaa")  # newest first
    assert main(["runs", "--ledger", str(path), "--last", "1", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["20261130-230000-bbbb"]
    assert main(["runs", "--ledger", str(path), "--show", "-1"]) == 0
    out = capsys.readouterr().out
    assert "denoising 1" in out and "+10.0%" in out and "plan applied" in out
    assert "every model): 4 graph(s) compiled, 0 graph break(s), 1 ran eagerly" in out  # what compile did not compile, in the record
    assert main(["runs", "--ledger", str(path), "--compare", "20261130-22", "-1"]) == 0
    out = capsys.readouterr().out
    assert "2.00x" in out and "4.00x" in out and "2.17x" in out  # denoising, decode, total 13/6
    assert main(["runs", "--ledger", str(path), "--compare", "2", "-1"]) == 0  # a trial: no word of it
    assert "2 and -1 are the same run (20261130-230000-bbbb): it is compared with itself" in capsys.readouterr().err
    assert main(["runs", "--ledger", str(path), "--show", "zzz"]) == 2
    assert "no run" in capsys.readouterr().err


def test_runs_refuses_a_ledger_that_is_not_a_file(tmp_path, capsys):
    assert main(["runs", "--ledger", str(tmp_path)]) == 2
    assert "directory" in capsys.readouterr().err


def test_runs_says_what_an_empty_listing_means(tmp_path, capsys):
    """A binary file gave "23531 line(s) ... skipped" then "no runs yet"; a ledger in a folder that
    does not exist said "no runs yet" too."""
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x7fELF\x00\x01\n" * 50)
    assert main(["runs", "--ledger", str(binary)]) == 2
    assert "holds binary data (NUL bytes) and no run record: not a run ledger" in capsys.readouterr().err
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\nworld\n")
    assert main(["runs", "--ledger", str(junk)]) == 2  # /etc/passwd exited 0, as an empty ledger does
    err = capsys.readouterr().err
    assert "none of its 2 line(s) is a run record" in err and "no runs" not in err
    assert main(["runs", "--ledger", str(tmp_path / "nodir" / "runs.jsonl")]) == 0
    assert f"its folder {tmp_path / 'nodir'} does not exist either" in capsys.readouterr().err


def test_a_ledger_with_a_zero_filled_tail_keeps_its_records(tmp_path, capsys):
    """Review: a crash can leave NUL bytes after an append; refusing the whole file for them hid every
    good record. A NUL line is skipped; a file with no record and NUL bytes is refused."""
    path = tmp_path / "runs.jsonl"
    runs.append(record("20261130-220000-aaaa"), path)
    runs.append(record("20261130-230000-bbbb"), path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 300)
    ledger = runs.load(path)
    assert [r.id[-4:] for r in ledger.records] == ["aaaa", "bbbb"] and ledger.skipped == 1
    assert main(["runs", "--ledger", str(path)]) == 0
    assert "1 line(s) of" in capsys.readouterr().err


def test_the_skipped_lines_are_said_with_json_show_and_compare_too(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    runs.append(record("20261130-220000-aaaa"), path)
    with open(path, "a") as f:
        f.write("hello\n")
    assert main(["runs", "--ledger", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 1 and "1 line(s) of" in err
    assert main(["runs", "--ledger", str(path), "--show", "1"]) == 0
    assert "1 line(s) of" in capsys.readouterr().err


def test_runs_json_errors_are_json_too(tmp_path, capsys):
    """`runs --json` of a directory printed nothing on stdout, of a file that is no ledger `[]`."""
    junk = tmp_path / "passwd"
    junk.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for ledger, kind, words in ((tmp_path, "ledger", "is a directory"), (junk, "ledger", "a run ledger?")):
        assert main(["runs", "--ledger", str(ledger), "--json"]) == 2
        doc = json.loads(capsys.readouterr().out)
        assert doc["exit_code"] == 2 and doc["error"]["kind"] == kind and words in doc["error"]["message"]
        assert doc["error"]["file"] == str(ledger)
    runs.append(record("20261130-220000-aaaa"), tmp_path / "r.jsonl")
    assert main(["runs", "--ledger", str(tmp_path / "r.jsonl"), "--json", "--show", "zzz"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "run"


def test_run_needs_a_module(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--profile", "p.toml"])
    assert e.value.code == 2
    assert "after `--`" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the module without `--`: "unrecognized arguments: ltx_pipelines..."
        main(["run", "--dry-run", "ltx_pipelines.distilled", "--prompt", "x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "put `--` before the pipeline module" in err
    assert "ltx-tui run --dry-run -- ltx_pipelines.distilled --prompt x" in err
    with pytest.raises(SystemExit):  # a profile named like a module is the profile, not the module
        main(["run", "--profile", "ltx_pipelines.toml"])
    assert "after `--`" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # run's own option after the module: not handed to LTX-2's argparse
        main(["run", "ltx_pipelines.distilled", "--prompt", "x", "--dry-run"])
    err = capsys.readouterr().err
    assert "put `--` before" in err and "-- ltx_pipelines.distilled --prompt x --dry-run" not in err
    with pytest.raises(SystemExit) as e:  # the module's --help: not run's own help (a newcomer trial), exit 2
        main(["run", "--profile", "p.toml", "ltx_pipelines.distilled", "--help"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "ltx-tui run --profile p.toml -- ltx_pipelines.distilled --help" in err
    with pytest.raises(SystemExit) as e:  # run's own --help before the module is run's
        main(["run", "--help", "ltx_pipelines.distilled"])
    assert e.value.code == 0 and "usage: ltx-tui run" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["run", "--profile", "", "--", "ltx_pipelines.distilled"])
    assert e.value.code == 2 and "--profile was given an empty value" in capsys.readouterr().err


@pytest.mark.parametrize("module, words", [
    ("os", "not an LTX-2 pipeline module"),
    ("ltx_pipelines.keyframe_interpolation_mgpu", "not one of LTX-2 v1.2.0's multi-GPU modules"),
    # (a user trial: "--quantization: ..." of a --quantization not given, and "parallel.gpus = 1" as the fix)
    ("ltx_pipelines.distilled_mgpu", "would silently not do:\nit takes no --quantization: every worker builds the DiT "
                                     "with fp8-cast, so transformer.quantization = none would silently run fp8-cast "
                                     "(fix: set transformer.quantization = \"fp8-cast\" and offload.mode = \"none\" in "
                                     "the profile (what LTX-2's multi-GPU modules run), or run the module without "
                                     "_mgpu (one GPU) to keep them)"),
])
def test_run_refuses_other_modules_before_anything_loads(module, words, capsys):
    assert main(["run", "--", module, "--prompt", "x"]) == 2
    assert words in capsys.readouterr().err


def test_run_refuses_a_conflict_before_anything_loads(tmp_path, capsys):
    prof = tmp_path / "p.toml"
    prof.write_text('[diffvae]\nmode = "chunked_compile"\n')
    assert main(["run", "--profile", str(prof), "--", "ltx_pipelines.distilled", "--diffvae-optimization",
                 "chunked_eager", "--quantization", "fp8-cast"]) == 2
    err = capsys.readouterr().err
    assert "--diffvae-optimization chunked_eager: the profile has diffvae.mode = chunked_compile" in err
    assert "--quantization fp8-cast: the profile has transformer.quantization = none" in err
    assert str(prof) in err


def test_run_refuses_a_broken_profile(tmp_path, capsys):
    prof = tmp_path / "p.toml"
    prof.write_text("[diffvae\n")
    assert main(["run", "--profile", str(prof), "--", "ltx_pipelines.distilled"]) == 2
    assert "TOML syntax error" in capsys.readouterr().err


def test_run_json_refusals_are_one_json_object_too(tmp_path, capsys):
    """A trial: `run --dry-run --json` printed nothing on stdout for a broken profile or another module
    (`--check --json` and `runs --json` print their error as an object)."""
    prof = tmp_path / "p.toml"
    prof.write_text('schema_version = 1\n[transformer]\nquantization = "nope"\n')
    for dry in (["--dry-run"], []):
        assert main(["run", "--profile", str(prof), *dry, "--json", "--", "ltx_pipelines.distilled"]) == 2
        out = json.loads(capsys.readouterr().out)
        error = out["error"]
        assert out["exit_code"] == 2 and error["kind"] == "profile"
        assert (error["file"], error["line"], error["key"]) == (str(prof), 3, "transformer.quantization")
        assert "is not allowed" in error["problem"] and error["message"].startswith(f"{prof}:3:")
    prof.write_text('schema_version = 1\n[transformer]\nquantization = "nope"\nattention = "x"\n')
    assert main(["run", "--dry-run", "--profile", str(prof), "--json", "--", "ltx_pipelines.distilled"]) == 2
    message = json.loads(capsys.readouterr().out)["error"]["message"]
    assert f"\n{prof}:4:" in message  # its lines as `--check --json` gives them, not an escaped "\\n"
    assert main(["run", "--dry-run", "--json", "--", "os"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["kind"] == "launch" and "not an LTX-2 pipeline module" in out["error"]["message"]


@pytest.mark.ltx2
def test_run_json_says_a_plan_that_cannot_run_here(ltx2_pipelines, tmp_path, capsys):
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nsparse_attention = "sla"\n')
    assert main(["run", "--profile", str(prof), "--dry-run", "--json", "--", "ltx_pipelines.distilled"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == 1 and out["error"]["kind"] == "plan"
    assert "nothing here runs sparse_attention = sla" in out["error"]["message"]


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_ledger_that_cannot_be_written_is_refused_before_the_module_runs(tmp_path, capsys, monkeypatch, dry):
    """A trial: `run --ledger DIR` ran the whole module, then said "not recorded: ... Is a directory"."""
    from backends.launch import run as launcher

    monkeypatch.setattr(launcher, "prepare", lambda *a, **k: pytest.fail("prepared with a ledger it cannot write"))
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    assert main(["run", *dry, "--ledger", str(folder), "--", "ltx_pipelines.distilled"]) == 2
    said = "would not be" if dry else "could not be"  # a trial: a dry run records nothing either way
    assert f"the run {said} recorded: {folder} is a directory, not a ledger file" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", *dry, "--json", "--ledger", str(blocker / "sub" / "runs.jsonl"), "--",
                 "ltx_pipelines.distilled"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["kind"] == "ledger" and f"{blocker} is not a folder" in out["error"]["message"]
    assert runs.unwritable(tmp_path / "new" / "deeper" / "runs.jsonl") is None  # the first record makes them
    assert runs.unwritable(blocker) is None
    assert runs.unwritable("/dev/null") is None  # a way to keep no record
    dangling = tmp_path / "gone.jsonl"
    dangling.symlink_to(tmp_path / "nowhere" / "x.jsonl")
    assert "is a symlink to nothing" in runs.unwritable(dangling)
    real_stat = runs.os.stat

    def no_search(p, *a, **k):  # a folder on the way this user cannot search (root searches every one)
        if str(p).startswith(str(tmp_path / "locked")):
            raise PermissionError(13, "Permission denied")
        return real_stat(p, *a, **k)
    monkeypatch.setattr(runs.os, "stat", no_search)
    assert runs.unwritable(tmp_path / "locked" / "runs.jsonl") == (
        f"{tmp_path / 'locked' / 'runs.jsonl'} cannot be reached: Permission denied")  # not an internal error


def test_a_dit_quantized_by_the_runtime_is_predicted_at_its_bf16_build():
    """Under `ltx-tui run` LTX-2's builder puts the bf16 DiT on the GPU and ltx-tui's runtime quantizes
    it after: the stage that builds it peaks at the bf16 weights (measured 36.53 GiB on the H200 where
    the plan had said 18.48), a stage that reuses the kept DiT at the quantized weights + activations."""
    from types import SimpleNamespace

    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, Effective, dit_build_bytes, dit_weight_bytes, plan_memory
    from backends.config.plan import resolve
    from backends.launch.run import _predictions, full_size_params
    from backends.machine.presets import preset

    fp8 = resolve(Profile().replace(**{"transformer.quantization": "fp8-scaled-mm"}), preset("h200"))
    prep = SimpleNamespace(profile=fp8.profile, plan=fp8, shape={"width": 768, "height": 512, "frames": 121})
    built = [SimpleNamespace(model=m, params=n) for m, n in full_size_params().items()]
    e = Effective.of(fp8)
    assert dit_build_bytes(e) == dit_weight_bytes(Effective.of(resolve(Profile(), preset("h200")))) > dit_weight_bytes(e)
    stage = next(s for s in plan_memory(fp8, RunShapes(768, 512, 121), None).stages if s.stage == "DiT denoising")
    assert stage.peak_bytes == dit_build_bytes(e) > stage.running_bytes  # --check's "fits" counts the build too
    assert "while built" in stage.detail
    predict = _predictions(prep, built)
    gib, against = predict("denoise", {}, False, True)
    assert gib == round(dit_build_bytes(e) / GIB, 3) and "while built in bf16" in against
    gib, against = predict("denoise", {}, False, False)  # the kept DiT: no build in this stage
    assert gib == round(stage.running_bytes / GIB, 3) and "kept" in against
    for profile in (Profile(), Profile().replace(**{"transformer.quantization": "fp8-cast", "offload.mode": "cpu"})):
        assert dit_build_bytes(Effective.of(resolve(profile, preset("h200")))) is None


def test_predictions_need_full_size_models_and_count_a_kept_dit():
    from types import SimpleNamespace

    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, Effective, dit_weight_bytes, plan_memory
    from backends.config.plan import resolve
    from backends.launch.run import _predictions, full_size_params
    from backends.machine.presets import preset

    h200 = resolve(Profile(), preset("h200"))
    prep = SimpleNamespace(profile=Profile(), plan=h200, shape={"width": 768, "height": 512, "frames": 121})
    full = full_size_params()
    built = [SimpleNamespace(model=m, params=n) for m, n in full.items()]
    plan = {s.stage: s.peak_bytes for s in plan_memory(h200, RunShapes(768, 512, 121), None).stages}
    predict = _predictions(prep, built)
    assert predict("upsample", {}) == (round(plan["latent upsampler"] / GIB, 3), "latent upsampler")
    gib, against = predict("upsample", {}, True)
    assert gib == round((plan["latent upsampler"] + dit_weight_bytes(Effective.of(h200))) / GIB, 3)
    assert "kept DiT" in against
    half = plan_memory(h200, RunShapes(384, 256, 121), None).stages
    assert predict("denoise", {"width": 384, "height": 256})[0] == round(
        next(s.peak_bytes for s in half if s.stage == "DiT denoising") / GIB, 3)
    assert predict("audio_decode", {}) == (None, None)
    tiny = [SimpleNamespace(model="LTXModel", params=378_240)]
    assert predict is not None and _predictions(prep, tiny)("denoise", {})[1].startswith("no prediction: LTXModel has 378,240")
    # a model the builders never saw (the multi-GPU modules load Gemma through Accelerate): nothing to compare
    assert _predictions(prep, tiny)("text_encoder", {}) == (
        None, "no prediction: no LTXGemmaTextEncoder was built through the LTX-2 builders ltx-tui wraps")


@pytest.mark.parametrize("damage", [
    lambda d: d["stages"][0].update(step_seconds="x"),
    lambda d: d["stages"][0].update(seconds="x"),
    lambda d: d.update(profile=[1]),
    lambda d: d.update(stages=[1, 2]),
    lambda d: d["models"][0].update(applied="yes"),
    lambda d: d.update(exit=True),
    lambda d: d["stages"][0].pop("seconds"),
])
def test_a_record_with_a_field_of_the_wrong_type_is_skipped_not_fatal(tmp_path, capsys, damage):
    path = tmp_path / "runs.jsonl"
    good = record("20261130-220000-aaaa").to_dict()
    bad = json.loads(json.dumps(good))
    damage(bad)
    path.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n")
    ledger = runs.load(path)
    assert [r.id for r in ledger.records] == ["20261130-220000-aaaa"] and ledger.skipped == 1
    assert main(["runs", "--ledger", str(path), "--show", "-1"]) == 0


def test_fields_a_newer_writer_adds_are_ignored_at_every_level(tmp_path):
    data = record("20261130-220000-aaaa").to_dict()
    data["new_top"] = 1
    data["stages"][0]["new_stage_field"] = [1]
    data["models"][0]["new_model_field"] = {}
    assert runs.RunRecord.from_dict(data) == record("20261130-220000-aaaa")


def test_a_ledger_over_the_read_limit_is_read_from_its_newest_part(tmp_path, monkeypatch, capsys):
    assert runs.LEDGER_LIMIT == 16 << 20  # thousands of runs; 64 MiB took 17 s to read on 2 cores
    path = tmp_path / "runs.jsonl"
    for n in range(3):
        runs.append(record(f"20261130-22000{n}-aaaa"), path)
    line = len(path.read_bytes()) // 3
    monkeypatch.setattr(runs, "LEDGER_LIMIT", line + line // 2)  # the newest line and half of the one before
    ledger = runs.load(path)
    assert [r.id for r in ledger.records] == ["20261130-220002-aaaa"] and ledger.skipped == 0
    assert ledger.partial  # and it is said (a 90 MB ledger was read in part without a word)
    assert main(["runs", "--ledger", str(path)]) == 0
    assert "only its newest" in capsys.readouterr().err
    noise = tmp_path / "big.txt"  # not a ledger, and over the limit: its count is of the part read
    noise.write_text("x\n" * 5000)
    monkeypatch.setattr(runs, "LEDGER_LIMIT", 1000)
    assert main(["runs", "--ledger", str(noise)]) == 2
    assert "none of the 499 line(s) read (its newest 1000 bytes) is a run record" in capsys.readouterr().err
    one_line = tmp_path / "big.toml"  # a trial: one long line over the limit exited 0, "no runs ... yet"
    one_line.write_text("x = '" + "y" * 3000 + "'\n")
    assert main(["runs", "--ledger", str(one_line)]) == 2
    assert "none of the 1 line(s) read (its newest 1000 bytes) is a run record" in capsys.readouterr().err


# --- auto of compile and the decoder layout under `ltx-tui run` ------------------------------------

@pytest.mark.parametrize("module, args, forwards, words", [
    ("ltx_pipelines.distilled", [], 11, "LTX-2's distilled schedule, 8 + 3 steps"),
    ("ltx_pipelines.distilled_mgpu", ["--num-inference-steps", "50"], 11, "distilled schedule"),
    ("ltx_pipelines.ti2vid_one_stage", ["--num-inference-steps", "40"], 40, "--num-inference-steps 40"),
    ("ltx_pipelines.ti2vid_two_stages", [], 33, "30 steps, the fewer of LTX-2's defaults + 3 stage-2 steps"),
    ("ltx_pipelines.ti2vid_two_stages_hq_mgpu", [], 18, "15 steps"),  # LTX_2_3_HQ_PARAMS
])
def test_a_run_is_one_generation_of_the_modules_dit_forwards(module, args, forwards, words):
    from backends.launch.run import run_length

    length = run_length(module, tuple(args))
    assert (length.runs, length.dit_forwards) == (1, forwards) and words in length.source


def test_the_flag_policy_judges_a_decided_profile_only():
    with pytest.raises(ValueError, match="Plan.pinned"):
        flags.policy(ARGS, Profile())


@pytest.mark.ltx2
def test_run_judges_ltx2s_flags_against_what_auto_decided_for_the_modules_steps(ltx2_pipelines, capsys, tmp_path):
    from backends.launch import run as launcher
    from backends.machine.capability import probe
    from backends.machine.tuned import Candidate, Tuned, store_tuned

    cap = probe()
    store_tuned(cap, Tuned(cap.fingerprint(), "768x512x121", (
        Candidate("compile.enabled", "false", "measured", 447.0, 1e-3, "", 5.0, 0.6),
        Candidate("compile.enabled", "true", "measured", 361.0, 1e-3, "", 12.0, 8.1, 2.2))))
    long_run = launcher.prepare(None, "ltx_pipelines.ti2vid_one_stage",
                                ["--num-inference-steps", "40", "--compile"], capability=cap, dry_run=True)
    d = long_run.plan["compile.enabled"]
    assert d.effective is True and "over 1 run of 40 DiT forwards (ti2vid_one_stage: --num-inference-steps 40" \
        in d.chain[-1].reason
    assert [v.verdict for v in long_run.policy.verdicts] == ["agrees"] and "compile" in long_run.policy.dit_steps
    with pytest.raises(launcher.LaunchError) as e:  # 11 distilled forwards do not pay for the compile
        launcher.prepare(None, "ltx_pipelines.distilled", ["--compile"], capability=cap)
    assert "the profile has compile.enabled = false" in str(e.value)
    assert "; auto decided by the plan: compile.enabled = false)" in str(e.value)
    assert "((" not in str(e.value) and "diffvae.mode" not in str(e.value)
    # the dry run says it too (a newcomer trial: "the profile has compile.enabled = false" of an auto)
    assert main(["run", "--dry-run", "--", "ltx_pipelines.distilled", "--compile"]) == 2
    out, err = capsys.readouterr()
    assert "auto decided by the plan: compile.enabled = false" in err
    # and its verdict line (a user trial: "conflicts (the profile has compile.enabled = false)" of an auto)
    assert '--compile: conflicts (the profile has compile.enabled = "auto", which the plan decided: false)' in out
    # a flag on an option the profile set names only the profile: what auto decided for another is beside it
    # (a newcomer trial: "--diffvae-optimization chunked_eager: ... auto decided by the plan: compile.enabled")
    set_mode = tmp_path / "mode.toml"
    set_mode.write_text('schema_version = 1\n[diffvae]\nmode = "chunked_compile"\n')
    assert main(["run", "--dry-run", "--profile", str(set_mode), "--", "ltx_pipelines.distilled", "--compile",
                 "--diffvae-optimization", "chunked_eager"]) == 2
    err = capsys.readouterr().err
    assert f"--diffvae-optimization chunked_eager: the profile has diffvae.mode = chunked_compile ({set_mode});" in err
    assert "--compile: the profile has compile.enabled = false" in err
    assert f"({set_mode}; auto decided by the plan: compile.enabled = false)" in err
    with pytest.raises(launcher.LaunchError, match="arguments: .*bogus"):  # judged again against auto's true
        launcher.prepare(None, "ltx_pipelines.ti2vid_one_stage",
                         ["--num-inference-steps", "40", "--compile", "bogus=1"], capability=cap, dry_run=True)


def test_a_models_record_says_whether_its_block_loop_was_captured():
    """A loop that ran without its CUDA graph must show in the ledger, not only in a warning."""
    from types import SimpleNamespace

    from backends.launch.hooks import Built

    def built(graphs, health=None):
        report = SimpleNamespace(compile_health=lambda: health, loop_graphs=graphs)
        return Built("LTXModel", "denoising 1", 1.0, report=report)

    assert built(None).compile is None
    assert built(SimpleNamespace(reason=None, replays=6)).compile == "block loop captured, 6 replay(s)"
    assert built(SimpleNamespace(reason="capture failed: x", replays=0), "1 graph(s) compiled").compile == \
        "1 graph(s) compiled; block loop not captured: capture failed: x"


def test_runs_without_a_profile_say_so_and_quote_ltx2s_argv(tmp_path, capsys):
    """A run of LTX-2 as built has no profile: the listing says what that means, never Python's None;
    argv comes back quoted as a shell takes it (a user saw `profile None` and `--prompt a cat`)."""
    path = tmp_path / "runs.jsonl"
    bare = dataclasses.replace(record("20261130-220000-aaaa"), profile={}, ltx_argv=("--prompt", "a cat"))
    runs.append(bare, path)
    runs.append(record("20261130-230000-bbbb"), path)
    assert main(["runs", "--ledger", str(path), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "profile none (LTX-2 as built" in out
    assert main(["runs", "--ledger", str(path), "--compare", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "--prompt 'a cat'" in out and "profile p.toml" in out


def test_runs_escapes_the_ledgers_control_characters(tmp_path, capsys):
    """`ltx-tui runs` (list, --show, --compare) prints a hand-edited record's escape sequences escaped;
    --json keeps the record as written (JSON escapes them itself)."""
    path = tmp_path / "runs.jsonl"
    hostile = dataclasses.replace(record("20261130-220000-aaaa"), module="ltx_pipelines.\x1b[32mGREEN",
                                  ltx_argv=("a cat \x1b[31mEVIL",), error="bad \x1b[1mthing\nline two")
    runs.append(hostile, path)
    runs.append(record("20261130-230000-bbbb"), path)
    for argv in ([], ["--show", "1"], ["--compare", "1", "2"]):
        assert main(["runs", "--ledger", str(path), *argv]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\\x1b[32mGREEN" in out, argv
    assert main(["runs", "--ledger", str(path), "--show", "1"]) == 0
    assert "  error: bad \\x1b[1mthing\n         line two" in capsys.readouterr().out
    assert main(["runs", "--ledger", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["module"] == "ltx_pipelines.\x1b[32mGREEN"


@pytest.mark.parametrize("code, status, exit_, said", [
    ("Missing --x", "failed", 1, "m exited: Missing --x"), ("", "failed", 1, "m exited: exit status 1"),
    (True, "failed", 1, "m exited: exit status 1"), (["a"], "failed", 1, "m exited: ['a']"),
    (3, "failed", 3, "m exited: exit status 3"), (None, "ok", 0, None), (0, "ok", 0, None)])
def test_a_modules_own_exit_is_read_as_python_reads_it(code, status, exit_, said):
    from backends.launch.run import _module_outcome

    def run():
        raise SystemExit(code)
    got = _module_outcome(run, "m", None)
    assert got[:3] == (status, exit_, said) and type(got[1]) is int


@pytest.mark.ltx2
@pytest.mark.parametrize("dry", [True, False])
def test_a_profile_asking_for_what_nothing_in_ltx2_runs_is_refused_dry_or_not(ltx2_pipelines, tmp_path, capsys, dry):
    """A trial: the dry run printed `sparse_attention = cannot run  error` and exited 0 (`--check`: 1), and
    the run went on without it, recorded as the pipeline's."""
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nsparse_attention = "sla"\n')
    assert main(["run", "--profile", str(prof)] + (["--dry-run"] if dry else []) + ["--", "ltx_pipelines.distilled"]) == 1
    err = capsys.readouterr().err
    assert "transformer.sparse_attention = \"sla\": nothing here runs sparse_attention = sla" in err
    assert "fix: set transformer.sparse_attention = \"none\"" in err
    # with a flag that disagrees as well, the flag first (exit 2), as the run refuses it before the plan
    assert main(["run", "--profile", str(prof)] + (["--dry-run"] if dry else []) + [
        "--", "ltx_pipelines.distilled", "--quantization", "fp8-cast"]) == 2
    assert "--quantization fp8-cast: the profile has transformer.quantization = none" in capsys.readouterr().err


def test_only_a_sparse_attention_of_the_pipeline_options_stops_the_runtime():
    """parallel.gpus on a CPU is the launcher's to judge (LTX-2 runs there in the tests); a sparse
    attention is nobody's: the runtime refused nothing and LTX-2 ran without it."""
    from backends.config.plan import resolve
    from backends.runtime.apply import ProfileNotRunnable, apply_profile

    sparse = Profile().replace(**{"transformer.sparse_attention": "sla"})
    assert [d.option for d in resolve(sparse, preset("h100")).blocking] == ["transformer.sparse_attention"]
    cpu = resolve(Profile(), preset("cpu"))
    assert cpu["parallel.gpus"].status.value == "error" and not cpu.blocking
    with pytest.raises(ProfileNotRunnable, match="transformer.sparse_attention"):
        apply_profile(torch.nn.Linear(2, 2), sparse, preset("cpu"))


def test_a_long_ltx_argv_is_cut_with_an_ellipsis_and_shown_whole_by_show(tmp_path, capsys):
    """A trial: --compare cut the argv mid-quote with nothing to say so, and --show never printed it."""
    path = tmp_path / "runs.jsonl"
    argv = ("--prompt", "a cat [red]x[/] with a very long prompt " * 3, "--seed", "7")
    runs.append(dataclasses.replace(record("20261130-220000-aaaa"), ltx_argv=argv), path)
    runs.append(record("20261130-230000-bbbb"), path)
    assert main(["runs", "--ledger", str(path), "--compare", "20261130-22", "-1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("A = "))
    assert line.endswith("…)") and "--seed" not in line
    assert main(["runs", "--ledger", str(path), "--show", "20261130-22"]) == 0
    out = capsys.readouterr().out
    assert "  ltx argv: --prompt 'a cat [red]x[/] with" in out and "--seed 7" in out
