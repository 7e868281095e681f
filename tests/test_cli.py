import json
import subprocess
import sys

import pytest
import torch

from backends.machine.presets import preset
from fakes import without
from ltx_tui.cli import main
from ltx_tui.tune import TUNE_SCHEMA_VERSION
from test_profile import BROKEN, BROKEN_CASES, GOOD


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_check_on_this_cpu_machine_is_truthful(capsys):
    code, out, _ = run(capsys, "--check", "--json")
    doc = json.loads(out)
    assert code == doc["exit_code"] == 1
    assert doc["capability"]["gpus"] == []
    assert doc["capability"]["nvml"]["available"] is False
    errors = [d for d in doc["decisions"] if d["status"] == "error"]
    assert [d["option"] for d in errors] == ["parallel.gpus"]
    assert "0 CUDA GPU" in errors[0]["message"] and errors[0]["remedy"]
    assert set(doc) >= {"schema_version", "capability", "profile", "decisions", "exit_code"}
    for d in doc["decisions"]:
        assert set(d) >= {"option", "requested", "effective", "status", "chain", "rules", "message", "remedy"}


def test_check_text_lists_gpus_packages_and_options(capsys):
    code, out, _ = run(capsys, "--check", "--capability", "h100")
    assert code == 0
    assert "[0] NVIDIA H100 80GB HBM3" in out
    assert "natten" in out and "hopper-fna" in out
    assert "diffvae.na_backend" in out and "auto -> triton" in out  # SM 9.0: ltx-tui's Triton NA first
    assert "\x1b[" not in out  # no colour when not a TTY
    assert "exit 0" in out


@pytest.mark.parametrize("fixture, capability, code, option, status", [
    # ltx-tui's runtime runs these; the warning says LTX-2's own pipeline would not
    ("combined_compile.toml", "h100-no-natten", 0, "diffvae.mode", "warning"),
    ("combined_compile.toml", "h100", 0, "diffvae.mode", "ok"),
    ("chunked_compile.toml", "h100-no-natten", 0, "diffvae.mode", "warning"),
    ("chunked_compile.toml", "cpu", 1, "diffvae.mode", "ok"),  # natten flex runs on the cpu preset
    ("fp8_scaled_mm.toml", "a100", 1, "transformer.quantization", "error"),
    ("fp8_scaled_mm.toml", "h100", 0, "transformer.quantization", "ok"),
    ("offload_cpu_fp8_scaled_mm.toml", "h100", 0, "offload.mode", "warning"),
    ("reduce_overhead.toml", "h100", 0, "compile.mode", "warning"),
    ("four_gpus.toml", "h100x2", 1, "parallel.gpus", "error"),
    ("four_gpus.toml", "h100x4", 1, "parallel.gpus", "ok"),
    # no quantization asked: LTX-2's *_mgpu modules would silently run fp8-cast (test_preflight.py)
    ("four_gpus.toml", "h100x4", 1, "transformer.quantization", "error"),
])
def test_profiles_against_presets(capsys, tmp_path, fixture, capability, code, option, status):
    if capability == "h100-no-natten":
        capability = capability_file(tmp_path, without(preset("h100"), "natten"))
    got, out, _ = run(capsys, "--check", "--json", "--profile", str(GOOD / fixture), "--capability", capability)
    doc = json.loads(out)
    assert got == code
    assert {d["option"]: d["status"] for d in doc["decisions"]}[option] == status


def capability_file(tmp_path, cap):
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(cap.to_dict()))
    return str(path)


def test_strict_fails_on_fallback(capsys, tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[diffvae]\nna_backend = "triton"\n')
    cap = capability_file(tmp_path, without(preset("h100"), "triton"))
    code, out, _ = run(capsys, "--check", "--json", "--profile", str(path), "--capability", cap)
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["fallback"] == 1
    assert any("schema_version" in w for w in doc["profile"]["warnings"])
    code, _, _ = run(capsys, "--check", "--strict", "--profile", str(path), "--capability", cap)
    assert code == 1


@pytest.mark.parametrize("name", sorted(BROKEN_CASES))
def test_broken_profiles_exit_2_with_the_problem(capsys, name):
    code, out, err = run(capsys, "--check", "--profile", str(BROKEN / name), "--capability", "h100")
    assert code == 2
    assert name in err and "profile error" in err
    for fragment in BROKEN_CASES[name][1]:
        assert fragment in err
    code, out, _ = run(capsys, "--check", "--json", "--profile", str(BROKEN / name), "--capability", "h100")
    assert json.loads(out)["exit_code"] == 2


def test_missing_profile_exits_2(capsys):
    code, _, err = run(capsys, "--check", "--profile", "/nonexistent/p.toml")
    assert code == 2 and "file not found" in err


def test_bad_capability_exits_2(capsys):
    code, _, err = run(capsys, "--check", "--capability", "h300")
    assert code == 2 and "unknown capability 'h300'" in err


@pytest.mark.parametrize("text, problem", [
    ('{"gpus": [{"memory_total": "lots"}]}', "$.platform: missing"),
    ("{not json", "not valid JSON"),
])
def test_a_bad_capability_files_json_error_has_file_problem_and_fix(capsys, tmp_path, text, problem):
    """A user trial: its JSON error had only a message, prefixed 'file:' ('file:cap1.json: $.platform: missing')."""
    path = tmp_path / "cap1.json"
    path.write_text(text)
    code, out, err = run(capsys, "--check", "--json", "--capability", str(path))
    error = json.loads(out)["error"]
    assert code == 2 and error["file"] == str(path) and problem in error["problem"]
    assert "ltx-tui --check --json > cap.json" in error["fix"] and "file:" not in err


def test_capability_file_from_check_json(capsys, tmp_path):
    _, out, _ = run(capsys, "--check", "--json", "--capability", "l40s")
    path = tmp_path / "l40s.json"
    path.write_text(out)
    code, out2, _ = run(capsys, "--check", "--json", "--capability", str(path))
    assert json.loads(out2)["capability"]["gpus"] == json.loads(out)["capability"]["gpus"]
    assert code == 0


def test_app_needs_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert main([]) == 2
    assert "needs a terminal" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--check", "--bogus"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["--json"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["--check", "--smoke", "--timeout", "-1"])
    assert info.value.code == 2 and "must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--check", "--json", "--frames", "10"], "frames 10: must be 8k+1"),
    (["--check", "--json", "--resolution", "100x100"], "multiples of 32"),
    (["--check", "--json", "--gpus", "0"], "--gpus"),
    (["--check", "--json", "--bogus"], "unrecognized arguments: --bogus"),
    (["--check", "--js", "--bogus"], "unrecognized arguments: --bogus"),
    (["--json"], "go with --check")])
def test_a_usage_error_under_json_prints_the_json_error(capsys, argv, said):
    """A script that asked for JSON gets the documented error object on stdout (before, argparse's
    usage went to stderr and stdout stayed empty)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 2 and "usage: ltx-tui" in err
    data = json.loads(out)
    assert data["exit_code"] == 2 and data["error"]["kind"] == "usage" and said in data["error"]["message"]
    rest = [a for a in argv if a not in ("--json", "--js")]
    if rest:  # (without anything, the app would start)
        with pytest.raises(SystemExit):
            main(rest)
        assert capsys.readouterr().out == ""  # without --json: nothing on stdout


@pytest.mark.parametrize("argv, said", [
    (["--tune", "--json", "--frames", "10"], "frames 10: must be 8k+1"),
    (["--tu", "--js", "--bogus"], "unrecognized arguments: --bogus"),
    (["--tune", "--json", "--check"], "--tune runs on its own")])
def test_a_tune_usage_error_under_json_prints_the_tunes_json(capsys, argv, said):
    """--tune --json answers a usage error in the tune's own shape (its schema_version, `error` a
    string), as its other errors do, not --check's error object (before: --check's shape)."""
    try:
        code = main(argv)  # the tune's own checks return the code, argparse's exit
    except SystemExit as e:
        code = e.code
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and set(data) == {"schema_version", "tool_version", "error", "exit_code"}
    assert data["exit_code"] == 2 and isinstance(data["error"], str) and said in data["error"]
    assert data["tool_version"]  # as in every other JSON ltx-tui prints
    assert data["schema_version"] == TUNE_SCHEMA_VERSION


@pytest.mark.parametrize("flag, value, said", [
    ("--frames", "80000001", "frames 80000001: must be 8k+1 from 1 to 1025"),
    ("--batch", "100000", "batch 100000: must be from 1 to 64 (memory.max_batch_size's range)"),
    ("--resolution", "65536x512", "resolution 65536x512: width and height must be multiples of 32 from 32 to 4096")])
def test_check_refuses_a_run_beyond_the_bounds(capsys, flag, value, said):
    """80000001 frames planned 2.8 PB: frames and the resolution have an upper bound, said with the fix."""
    with pytest.raises(SystemExit) as info:
        main(["--check", "--capability", "h200", flag, value])
    err = capsys.readouterr().err
    assert info.value.code == 2 and said in err and " — use " in err


def test_list_capabilities(capsys):
    code, out, _ = run(capsys, "--list-capabilities")
    assert code == 0
    for pid in ("a100", "h100", "h200", "l40s", "rtx4090", "rtx5090", "b200", "cpu"):
        assert pid in out


def test_console_script_check_never_imports_textual():
    probe = ("import sys, runpy; sys.argv=['ltx-tui','--check','--json','--capability','h100'];"
             "from ltx_tui.cli import main; code = main();"
             "assert 'textual' not in sys.modules, 'textual imported'; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["exit_code"] == 0


def test_broken_profile_is_reported_before_the_live_probe(capsys, monkeypatch, tmp_path):
    def no_probe(**kwargs):
        raise AssertionError("the live probe ran before the profile was checked")
    monkeypatch.setattr("backends.machine.capability.probe", no_probe)
    code, _, err = run(capsys, "--check", "--profile", str(BROKEN / "unknown_enum.toml"))
    assert code == 2 and "not allowed" in err


def test_internal_error_exits_3_with_one_line_and_a_log(capsys, monkeypatch):
    from ltx_tui.cli import entry

    def boom(*args, **kwargs):
        raise ZeroDivisionError("planted")
    monkeypatch.setattr("backends.config.plan.resolve", boom)  # what plan_here plans with
    monkeypatch.setattr("ltx_tui.check.resolve", boom, raising=False)  # where check.py imports it by name
    monkeypatch.setattr("sys.argv", ["ltx-tui", "--check", "--capability", "h100"])
    with pytest.raises(SystemExit) as exit_:
        entry()
    assert exit_.value.code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: planted" in err
    log = err.split("traceback in ")[1].rstrip(")\n")
    assert "Traceback" in open(log).read()


def test_closed_pipe_is_quiet(capsys, monkeypatch):
    import io
    import os

    from ltx_tui.cli import entry

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone, as with `ltx-tui --check --smoke | head -2`
    closed = io.TextIOWrapper(os.fdopen(write_end, "wb"), write_through=True)
    monkeypatch.setattr("sys.stdout", closed)
    monkeypatch.setattr("sys.argv", ["ltx-tui", "--check", "--capability", "h100"])
    with pytest.raises(SystemExit) as exit_:
        entry()
    assert exit_.value.code == 141 and "Traceback" not in capsys.readouterr().err


def test_explain_prints_values_rules_runtime_and_flag(capsys):
    code, out, _ = run(capsys, "--explain", "diffvae.mode", "--capability", "h100")
    assert code == 0
    assert "values:   one of 'auto', 'chunked_eager'" in out and "(default auto)" in out
    assert "diffvae.combined-needs-natten" in out
    assert "auto (prior, not measured here" in out  # without a tune auto keeps LTX-2's layout, saying why
    assert "runtime:  LTX-2 DiffusionVideoDecoder: chunked_eager layout" in out
    assert "LTX-2:    --diffvae-optimization MODE" in out
    code, _, err = run(capsys, "--explain", "compile.mod")
    assert code == 2 and "did you mean 'compile.mode'" in err


def test_ltx_args_output_file(capsys, tmp_path):
    target = tmp_path / "run.sh"
    code, out, err = run(capsys, "--check", "--capability", "h100", "--ltx-args", "--output", str(target))
    assert code == 0 and out == "" and str(target) in err
    assert "--diffvae-optimization chunked_eager" in target.read_text()
    code, _, err = run(capsys, "--check", "--ltx-args", "--output", str(tmp_path / "no" / "dir" / "x.sh"),
                       "--capability", "h100")
    assert code == 2 and "no/dir does not exist; create it (mkdir -p " in err
    (tmp_path / "f").write_text("")
    code, _, err = run(capsys, "--check", "--ltx-args", "--output", str(tmp_path / "f" / "x.sh"), "--capability", "h100")
    assert code == 2 and f"{tmp_path / 'f'} is not a folder" in err
    (tmp_path / "link").symlink_to(tmp_path / "gone")  # a dangling link was named by its target alone
    code, _, err = run(capsys, "--check", "--ltx-args", "--output", str(tmp_path / "link" / "x.sh"), "--capability", "h100")
    assert code == 2 and f"{tmp_path / 'gone'} does not exist ({tmp_path / 'link'} is a symlink to it)" in err
    with pytest.raises(SystemExit):
        main(["--check", "--output", str(target)])  # --output needs --ltx-args


def test_strict_fails_on_a_profile_warning(capsys, tmp_path):
    """--strict: "any fallback or warning" exits 1, the profile's own warnings too (a user found a
    profile without schema_version passing --strict with its warning printed)."""
    path = tmp_path / "p.toml"
    path.write_text('[transformer]\nquantization = "none"\n')
    code, out, _ = run(capsys, "--check", "--json", "--profile", str(path), "--capability", "h200")
    doc = json.loads(out)
    assert code == 0 and any("schema_version" in w for w in doc["profile"]["warnings"])
    code, out, _ = run(capsys, "--check", "--json", "--strict", "--profile", str(path), "--capability", "h200")
    assert code == 1 and json.loads(out)["exit_code"] == 1
    code, out, _ = run(capsys, "--check", "--strict", "--profile", str(path), "--capability", "h200")
    assert code == 1 and "1 profile/capability warning(s) (--strict) -> exit 1" in out  # the summary says why


def test_an_empty_profile_path_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--check", "--profile", "", "--capability", "h200"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--profile was given an empty value" in err and "usage:" in err
    with pytest.raises(SystemExit):
        main(["--check", "--json", "--profile", "", "--capability", "h200"])
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"  # as an empty --capability's


def test_an_empty_profile_path_is_a_usage_error_for_the_app_too(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--profile", ""])
    assert e.value.code == 2 and "empty value" in capsys.readouterr().err


def test_a_json_usage_error_names_file_line_key_and_problem(capsys, tmp_path):
    """A script reading `--check --json` had only the message to parse for where the profile was wrong."""
    path = tmp_path / "p.toml"
    path.write_text('schema_version = 1\n[transformer]\nquantization = "fp9"\n')
    code, out, _ = run(capsys, "--check", "--json", "--profile", str(path), "--capability", "h200")
    error = json.loads(out)["error"]
    assert code == 2 and error["kind"] == "profile" and error["file"] == str(path) and error["line"] == 3
    assert error["key"] == "transformer.quantization" and error["problem"].startswith('"fp9" is not allowed')
    code, out, _ = run(capsys, "--check", "--json", "--profile", str(tmp_path / "none.toml"), "--capability", "h200")
    error = json.loads(out)["error"]
    assert code == 2 and error["file"] == str(tmp_path / "none.toml") and "line" not in error and error["fix"]
    assert "more" not in error
    path.write_text('[transformer]\nquantization = "fp9"\nattention = "x"\n')  # each problem, not the first only
    code, out, err = run(capsys, "--check", "--json", "--profile", str(path), "--capability", "h200")
    error = json.loads(out)["error"]
    assert error["line"] == 2 and [(m["line"], m["key"]) for m in error["more"]] == [(3, "transformer.attention")]
    assert "\n" in error["message"] and f"{path}:3: transformer.attention" in err


def test_json_with_an_output_file_writes_it_and_says_so(capsys, tmp_path):
    """`--check --json --ltx-args --output F` exited 0 and never wrote F."""
    target = tmp_path / "run.sh"
    code, out, _ = run(capsys, "--check", "--json", "--ltx-args", "--output", str(target), "--capability", "h100")
    doc = json.loads(out)
    assert code == 0 and target.read_text() == doc["ltx_args"] and doc["ltx_args_file"] == str(target)
    code, out, err = run(capsys, "--check", "--json", "--ltx-args", "--output", str(tmp_path / "no" / "x.sh"),
                         "--capability", "h100")
    error = json.loads(out)["error"]  # a script reading the JSON hears of it too, not only stderr
    assert code == 2 and error["kind"] == "output" and "does not exist" in error["message"] and "output error" in err
    code, out, _ = run(capsys, "--tune", "--json", "--output", str(tmp_path / "no" / "p.toml"))
    assert code == 2 and "does not exist" in json.loads(out)["error"]
    with pytest.raises(SystemExit) as e:
        main(["--check", "--ltx-args", "--output", ""])  # was taken as stdout
    assert e.value.code == 2 and "empty path" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_explain_exits_1_where_the_option_cannot_run_here_as_check_does(capsys):
    """--explain printed '(error)' and exited 0, though --help's table gives it --check's codes."""
    code, out, _ = run(capsys, "--explain", "parallel.gpus")
    assert code == 1 and "(error)" in out
    code, out, _ = run(capsys, "--explain", "diffvae.mode")
    assert code == 0 and "(error)" not in out


def test_explain_of_a_misspelt_key_gives_its_hint_in_parentheses(capsys):
    assert main(["--explain", "transformer.quant"]) == 2
    err = capsys.readouterr().err
    assert "unknown option 'transformer.quant' (did you mean one of 'transformer.quantization', " in err
    assert "?;" not in err  # it read "did you mean ...?; options: ..."


def test_explain_of_an_unused_option_says_unused_not_a_dash(capsys):
    """A user trial: `--explain offload.gpu_slots` printed "2 -> - (ok)" and "-: unused: ..."."""
    assert main(["--explain", "offload.gpu_slots"]) == 0
    out = capsys.readouterr().out
    assert "profile:  2 -> unused (ok)" in out and "\n            unused: offload.mode is none" in out and "-:" not in out
    main(["--check", "--capability", "cpu"])  # and --check's text
    out = capsys.readouterr().out
    assert "offload.gpu_slots               2 -> unused" in out and "1 -> cannot run" in out and " -: " not in out


@pytest.mark.parametrize("argv, flag", [
    (["--explain", ""], "--explain"), (["--check", "--explain", ""], "--explain"),
    (["--check", "--capability", ""], "--capability"), (["--check", "--json", "--capability", ""], "--capability"),
    (["--ledger", ""], "--ledger"),
])
def test_an_empty_explain_capability_or_ledger_is_a_usage_error(capsys, argv, flag):
    """`--explain ''` opened the app, `--check --explain ''` ran a whole check, `--capability ''`
    checked this machine: each empty value was taken for a missing one."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out = capsys.readouterr()
    assert exit_.value.code == 2 and f"{flag} was given an empty value" in out.err
    if flag == "--explain":  # the keys themselves (it pointed to --help, which does not list them)
        assert "one of diffvae.mode, " in out.err and "offload.gpu_slots" in out.err
    if "--json" in argv:
        assert f"{flag} was given an empty value" in json.loads(out.out)["error"]["message"]


@pytest.mark.parametrize("command", ["run", "runs"])
def test_runs_with_an_empty_ledger_is_a_usage_error_not_the_folder_dot(capsys, command):
    """`ltx-tui runs --ledger ''` blamed the default ledger for being a directory (the empty path was '.')."""
    with pytest.raises(SystemExit) as exit_:
        main([command, "--ledger", "", *(["--dry-run", "--", "ltx_pipelines.distilled"] if command == "run" else [])])
    assert exit_.value.code == 2 and "--ledger was given an empty value" in capsys.readouterr().err


def test_an_output_error_in_json_has_its_problem_and_fix(capsys, tmp_path):
    """The README promises `file` and `problem` in an --output error's JSON; it had `file` only."""
    target = tmp_path / "run.sh"
    target.write_text("keep")
    code, out, _ = run(capsys, "--check", "--ltx-args", "--json", "--output", str(target))
    error = json.loads(out)["error"]
    assert code == 2 and error["kind"] == "output" and error["file"] == str(target)
    assert error["problem"] == "exists" and error["fix"] == "pass --force to replace it"
    code, out, _ = run(capsys, "--check", "--ltx-args", "--json", "--output", str(tmp_path / "no" / "x.sh"))
    error = json.loads(out)["error"]
    assert code == 2 and error["problem"].startswith("its folder") and "does not exist" in error["problem"]
    assert target.read_text() == "keep"


@pytest.mark.parametrize("argv, says", [
    (["--check", "--frames", "²"], "'²' is not a whole number >= 1"),
    (["--check", "--frames", "１２１"], "is not a whole number >= 1"),
    (["--check", "--resolution", "７６８x５１２"], "expected WIDTHxHEIGHT"),
])
def test_numbers_are_ascii_digits(capsys, argv, says):
    """str.isdigit takes full-width digits (read as 768x512) and '²' (then int() failed: 'invalid
    _positive_int value')."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and "_positive_int" not in err


@pytest.mark.parametrize("extra", [["--json"], ["--check", "--json"], ["--smoke"], ["--check"],
                                   ["--check", "--resolution", "512x512"],
                                   ["--list-capabilities"]])
def test_explain_refuses_the_flags_it_would_ignore(capsys, extra):
    # `--explain KEY --json` printed the text and exited 0, the --json silently dropped
    with pytest.raises(SystemExit) as e:
        main(["--explain", "diffvae.mode", *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--explain runs on its own" in err and extra[0] in err


def test_a_tunes_profile_error_under_json_has_every_problem(capsys, tmp_path):
    """--tune --json on a broken profile: `profile` holds --check --json's fields of the first problem
    and `more` the others (before: the message string alone)."""
    path = tmp_path / "two.toml"
    path.write_text('[transformer]\nattention = "nope"\n[compile]\nenabled = "maybe"\n')
    assert main(["--tune", "--json", "--profile", str(path)]) == 2
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data["error"], str) and data["error"].startswith("profile error:")
    problem = data["profile"]
    assert problem["file"] == str(path) and problem["key"] == "transformer.attention" and problem["line"] == 2
    assert [m["key"] for m in problem["more"]] == ["compile.enabled"]
