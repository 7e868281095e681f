"""`ltx-tui run` on LTX-2 v1.2.0's own, unmodified pipeline modules (CPU, tiny random checkpoints).

LTX-2 is imported from `$LTX2_CORE_SRC` / `$LTX2_PIPELINES_SRC`; its checkpoints are written by
`ltx2_checkpoints` with LTX-2's own configurators. Two test-only stand-ins, both for things this
CPU machine cannot have: `tests/stand_ins/torchaudio` (PyPI has no torchaudio for torch 2.13;
LTX-2 imports it, never calls it in these runs: the stand-in raises if called), and a decode
memory budget for LTX-2's tiling off CUDA (`cpu_tiling_budget`: LTX-2 gives the DiffVAE tiling
0 bytes without a GPU and refuses to decode).
"""

from __future__ import annotations

import functools
import importlib
import json
import pathlib
import runpy
import sys

import pytest
import torch

from backends.config.options import Profile
from backends.launch import gate, hooks
from backends.machine import runs
from ltx_tui.cli import main

pytestmark = pytest.mark.ltx2
CPU_DECODE_BUDGET = 8 << 30


@pytest.fixture(scope="module")
def tiny(ltx2_pipelines, tmp_path_factory):
    import ltx2_checkpoints

    return ltx2_checkpoints.write_checkpoints(tmp_path_factory.mktemp("ltx2-tiny"), "tiny")


@pytest.fixture(autouse=True)
def cpu_tiling_budget(request, monkeypatch):
    """Off CUDA LTX-2 budgets 0 bytes for DiffVAE tiling and raises; give it host memory (tests only)."""
    if "ltx2_pipelines" not in request.fixturenames or torch.cuda.is_available():
        return
    helpers = importlib.import_module("ltx_pipelines.utils.helpers")
    original = helpers.tiling_config_for_vae

    def with_budget(*args, device=None, free_bytes=None, **kwargs):
        return original(*args, device=device, free_bytes=CPU_DECODE_BUDGET if free_bytes is None else free_bytes,
                        **kwargs)
    monkeypatch.setattr(helpers, "tiling_config_for_vae", with_budget)


def args_for(tiny, module: str, out: pathlib.Path, frames: int = 9) -> list[str]:
    import ltx2_checkpoints

    size = 32 if module == "ti2vid_one_stage" else 64
    return ltx2_checkpoints.pipeline_args(tiny, module, width=size, height=size, frames=frames, output=out,
                                          **({} if module == "distilled" else {"steps": 2}))


def only_record(ledger: pathlib.Path) -> runs.RunRecord:
    (record,) = runs.load(ledger).records
    return record


@pytest.mark.slow  # a whole distilled run with Dynamo tracing the blocks (~25 s)
def test_a_compiled_run_gets_ltx2s_pipeline_timesteps_as_one_adaln_row(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    """LTX-2's pipelines pass (B, T, 1) timesteps (`denoise_mask * sigma`); a text-to-video run's are
    uniform, so the compiled DiT gets them as one token (`runtime.timestep_rows`), both stages."""
    from backends.runtime import timestep_rows

    seen = []
    original = timestep_rows.collapse

    def spy(*modalities):
        out = original(*modalities)
        seen.append(tuple(None if m is None else (tuple(a.timesteps.shape), tuple(m.timesteps.shape))
                          for a, m in zip(modalities, out)))
        return out
    monkeypatch.setattr(timestep_rows, "collapse", spy)
    profile = tmp_path / "p.toml"
    profile.write_text('[compile]\nenabled = true\nbackend = "eager"\n')
    out, ledger = tmp_path / "out.mp4", tmp_path / "runs.jsonl"
    assert main(["run", "--profile", str(profile), "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args_for(tiny, "distilled", out)]) == 0
    r = only_record(ledger)
    dit = next(m for m in r.models if m.model == "LTXModel")
    assert any("one AdaLN row" in c for c in dit.changes if c.startswith("compile.enabled")), dit.changes
    assert len(seen) == 8 + 3  # every DiT forward of both stages
    for (video_in, video_out), (audio_in, audio_out) in seen:
        assert len(video_in) == 3 and video_in[1] > 1 and video_out == (1, 1, 1)
        assert len(audio_in) == 3 and audio_out == (1, 1, 1)


# 20 s each (a whole distilled run): slow, CI runs both; the quick suite keeps the as-built run
@pytest.mark.parametrize("keep", [pytest.param(True, marks=pytest.mark.slow), pytest.param(False, marks=pytest.mark.slow)],
                         ids=["dit-kept", "dit-rebuilt"])
def test_distilled_runs_with_the_plan_on_both_dit_builds_and_every_stage_recorded(ltx2_pipelines, tiny, tmp_path,
                                                                                  monkeypatch, keep):
    """fp8-cast replaces the DiT's linears; distilled builds the DiT twice. Kept: stage 2 gets
    stage 1's model. Rebuilt (a DiT too big to keep): LTX-2 hands the second build the cached
    shell of the first, whose linears ltx-tui replaced; the launcher must give it a fresh one."""
    if not keep:
        monkeypatch.setattr(hooks, "_fits", lambda model: False)
    let_go = []
    original_let_go = hooks.Hooks.let_go

    def spy(self):
        if self.kept is not None:
            let_go.append((self.kept[1], self.meter.stages[-1].name))  # the last stage begun so far
        original_let_go(self)
    monkeypatch.setattr(hooks.Hooks, "let_go", spy)
    profile = tmp_path / "p.toml"
    profile.write_text('[transformer]\nquantization = "fp8-cast"\nfast_norm = true\n')
    out, ledger = tmp_path / "out.mp4", tmp_path / "runs.jsonl"
    code = main(["run", "--profile", str(profile), "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args_for(tiny, "distilled", out)])
    assert code == 0
    assert out.stat().st_size > 0
    r = only_record(ledger)
    assert r.status == "ok" and r.exit == 0 and r.versions["ltx-pipelines"] == "1.2.0"
    assert r.shape == {"width": 64, "height": 64, "frames": 9}
    names = [s.name for s in r.stages]
    for name in ("text encoding", "denoising 1", "upsampling", "denoising 2", "video decode", "audio decode"):
        assert name in names
    steps = {s.name: s for s in r.stages}
    assert len(steps["denoising 1"].step_seconds) == 8 and len(steps["denoising 2"].step_seconds) == 3
    assert steps["denoising 1"].forwards >= 8 and steps["denoising 1"].tokens
    assert steps["denoising 1"].shape == {"width": 32, "height": 32, "frames": 9}  # stage 1: half resolution
    assert steps["denoising 2"].shape == {"width": 64, "height": 64, "frames": 9}
    first, second = [m for m in r.models if m.model == "LTXModel"]
    assert (first.stage, second.stage) == ("denoising 1", "denoising 2")
    assert first.applied and not first.kept
    assert any(c.startswith("transformer.quantization: replaced") for c in first.changes)
    assert any(c.startswith("transformer.attention: installed") for c in first.changes)
    assert any(c.startswith("transformer.fast_norm: installed") for c in first.changes), first.changes  # once left out
    if keep:
        assert second.kept and second.applied and second.load_s == 0  # stage 2 reuses it: nothing read again
        (model, last_stage), = let_go
        assert last_stage == "denoising 2"  # let go when the decoder starts, before it allocates anything
        assert all(p.device.type == "meta" for p in model.parameters())
    else:
        assert not second.kept and second.applied
        assert any(c.startswith("transformer.quantization: replaced") for c in second.changes)
    (decoder,) = [m for m in r.models if m.model == "DiffusionVideoDecoder"]
    assert decoder.applied and any(c.startswith("diffvae.mode: laid out") for c in decoder.changes)
    assert any(c.startswith("diffvae.na_backend: installed") for c in decoder.changes)
    assert not any(m.applied for m in r.models if m.model not in ("LTXModel", "DiffusionVideoDecoder"))
    assert r.profile["sha256"] and r.plan["effective"]["transformer.quantization"] == "fp8-cast"
    # JSON values, not TOML text in a JSON string (a trial: "compile.backend": "\"inductor\"", devices "-")
    values = r.profile["values"]
    assert values["compile.backend"] == "inductor" and values["parallel.devices"] is None
    assert values["offload.prefetch"] == 1 and values["transformer.fast_norm"] is True


@pytest.mark.slow
@pytest.mark.parametrize("module", ["ti2vid_one_stage", "ti2vid_two_stages"])
def test_the_ti2vid_pipelines_run_with_the_default_profile(ltx2_pipelines, tiny, tmp_path, module):
    out, ledger = tmp_path / "out.mp4", tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", f"ltx_pipelines.{module}", *args_for(tiny, module, out)]) == 0
    assert out.stat().st_size > 0
    r = only_record(ledger)
    kinds = {s.kind for s in r.stages}
    assert {"text_encoder", "denoise", "video_decode", "audio_decode"} <= kinds
    if module == "ti2vid_two_stages":
        assert "upsample" in kinds and sum(s.kind == "denoise" for s in r.stages) == 2
    # stage 2 adds the distilled LoRA: another DiT, so stage 1's is not kept (only distilled keeps it)
    assert not any(m.kept for m in r.models)
    assert all(m.applied for m in r.models if m.model in ("LTXModel", "DiffusionVideoDecoder"))


class _Captured(Exception):
    """Stops a run once the final latent reached the video decoder."""


def _capture_latent(monkeypatch, into: list):
    blocks = importlib.import_module("ltx_pipelines.utils.blocks")

    def capture(self, latent, tiling_config=None, generator=None, *, dtype=None):  # v1.2.0's signature
        into.append(latent.detach().float().clone())
        raise _Captured
    monkeypatch.setattr(blocks.VideoDecoder, "__call__", capture)


@pytest.mark.slow  # 24 s: a whole tiny distilled run twice (CI runs it; the quick suite stays under 4 min)
def test_a_profile_equal_to_ltx2s_defaults_gives_ltx2s_latents(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    args = args_for(tiny, "distilled", tmp_path / "x.mp4")
    plain, ours = [], []
    _capture_latent(monkeypatch, plain)
    monkeypatch.setattr(sys, "argv", ["ltx_pipelines.distilled", *args])
    with pytest.raises(_Captured):
        runpy.run_module("ltx_pipelines.distilled", run_name="__main__", alter_sys=True)
    _capture_latent(monkeypatch, ours)
    profile = tmp_path / "ltx2-defaults.toml"
    profile.write_text('[transformer]\nattention = "pytorch"\n')  # LTX-2's automatic attention on the CPU
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--profile", str(profile), "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args]) == 1  # the capture stopped it
    assert only_record(ledger).error.startswith("_Captured")
    assert len(plain) == len(ours) == 1
    torch.testing.assert_close(ours[0], plain[0], rtol=0, atol=1e-3)


def test_a_changed_wrapped_signature_exits_2_before_anything_loads(ltx2_pipelines, tmp_path, monkeypatch, capsys):
    blocks = importlib.import_module("ltx_pipelines.utils.blocks")

    def changed(self, latent, extra, tiling_config=None, generator=None, *, dtype=None):
        raise AssertionError("never called")
    monkeypatch.setattr(blocks.VideoDecoder, "__call__", changed)
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", "ltx_pipelines.distilled", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert "VideoDecoder.__call__(self, latent, extra, tiling_config, generator, dtype) differs" in err
    assert "--ltx-args" in err and not ledger.exists()


def test_another_ltx2_version_exits_2(ltx2_pipelines, monkeypatch, capsys):
    monkeypatch.setattr(gate, "package_version", lambda module: "1.3.0")
    assert main(["run", "--dry-run", "--", "ltx_pipelines.distilled"]) == 2
    err = capsys.readouterr().err
    assert "ltx-core 1.3.0 is not v1.2.0" in err and "ltx-pipelines 1.3.0 is not v1.2.0" in err


def test_v120_has_every_wrapped_signature(ltx2_pipelines):
    assert gate.signature_problems() == []


def test_dry_run_shows_plan_verdicts_and_the_command_and_loads_nothing(ltx2_pipelines, tiny, tmp_path, capsys):
    profile = tmp_path / "p.toml"
    profile.write_text('[diffvae]\nmode = "chunked_eager"\n[compile]\nenabled = true\n')
    args = args_for(tiny, "distilled", tmp_path / "x.mp4")
    assert main(["run", "--profile", str(profile), "--dry-run", "--", "ltx_pipelines.distilled", *args,
                 "--compile", "--diffvae-optimization", "chunked_eager"]) == 0
    out = capsys.readouterr().out
    assert "--compile: agrees" in out and "--diffvae-optimization chunked_eager: agrees" in out
    assert "torch.compile per transformer block" in out
    command = out.split("LTX-2 command (what runs, in this process):\n")[1]
    assert "--compile" not in command  # taken over: ltx-tui compiles, LTX-2 must not
    assert command.count("--diffvae-optimization chunked_eager") == 1  # once: it sizes LTX-2's decode tiles
    assert not (tmp_path / "x.mp4").exists()
    assert main(["run", "--profile", str(profile), "--dry-run", "--json", "--", "ltx_pipelines.distilled",
                 *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["versions"] == {"ltx-core": "1.2.0", "ltx-pipelines": "1.2.0"}
    # a trial: "parallel.gpus ... error" on this CPU and exit 0, unexplained; --check --json has exit_code
    import torch

    cpu = not torch.cuda.is_available()
    assert data["exit_code"] == 0 and data["not_refused"] == (["parallel.gpus"] if cpu else [])
    assert ("  not refused: parallel.gpus is not ltx-tui's to judge" in out) == cpu
    # a trial: "(the model/tensors are on cpu)" in a dry run, which builds no model: the machine's reason
    assert "model/tensors" not in out
    # a conflict: the whole dry run is shown, the verdict says what exits 2, and it exits 2
    assert main(["run", "--profile", str(profile), "--dry-run", "--", "ltx_pipelines.distilled", *args,
                 "--compile", "mode=max-autotune"]) == 2
    captured = capsys.readouterr()
    assert "--compile mode=max-autotune: conflicts" in captured.out and "LTX-2 command" in captured.out
    assert "disagree with it" in captured.err



def test_dry_run_says_why_an_option_cannot_run(ltx2_pipelines, tiny, tmp_path):
    # the plan listed "parallel.gpus = - error" with no reason (--check says it and the fix)
    from backends.launch import run as launcher
    from backends.machine.presets import preset

    profile = tmp_path / "p.toml"
    profile.write_text('[transformer]\nquantization = "fp8-cast"\n')
    prep = launcher.prepare(str(profile), "ltx_pipelines.distilled", args_for(tiny, "distilled", tmp_path / "x.mp4"),
                            capability=preset("cpu"), dry_run=True)
    gpus = prep.plan["parallel.gpus"]
    assert gpus.status.value == "error"
    text = launcher.describe(prep)
    line = next(x for x in text.splitlines() if x.strip().startswith("parallel.gpus"))
    assert "cannot run" in line and "error" in line, line
    assert f"{gpus.message} (fix: {gpus.remedy})" in text
    assert "unused" in next(x for x in text.splitlines() if x.strip().startswith("parallel.devices"))

def test_no_ltxmodel_through_the_builders_means_profile_not_applied(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    """A module that never builds an LTXModel through LTX-2's builders: exit 1, said so."""
    blocks = importlib.import_module("ltx_pipelines.utils.blocks")

    @functools.wraps(blocks.DiffusionStage.__call__)  # same signature: the gate lets it through
    def no_dit(self, *args, **kwargs):
        raise SystemExit(0)
    monkeypatch.setattr(blocks.DiffusionStage, "__call__", no_dit)
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args_for(tiny, "distilled", tmp_path / "x.mp4")]) == 1
    r = only_record(ledger)
    assert r.status == "not applied" and "profile not applied" in r.error


@pytest.mark.slow  # 7.4 s on 2 cores: CI runs it
def test_as_built_measures_ltx2_with_its_own_flags_and_applies_nothing(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    captured = []
    _capture_latent(monkeypatch, captured)  # LTX-2's own decoder pins NATTEN's CUDA kernel: stop before it
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--as-built", "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args_for(tiny, "distilled", tmp_path / "x.mp4"), "--quantization", "fp8-cast"]) == 1
    r = only_record(ledger)
    assert r.plan["as_built"] and r.plan["effective"]["transformer.quantization"] == "fp8-cast"
    assert "--quantization" in r.ltx_argv  # LTX-2's flag reaches LTX-2
    assert not any(m.applied for m in r.models)
    steps = {s.name: s for s in r.stages}
    # LTX-2 hands stage 2 the shell of stage 1: its step meter is installed once, not twice
    assert steps["denoising 2"].forwards == len(steps["denoising 2"].step_seconds) == 3


def test_a_streamed_dit_gets_what_ltx2s_streaming_leaves_to_ltx_tui_and_stays_where_ltx2_put_it(ltx2_pipelines):
    """With offload LTX-2's StreamingModelBuilder owns the DiT's placement (and its fp8-cast and
    compile): the launcher installs only the dense attention, moves nothing, meters the steps.
    (The plan refuses offload without CUDA, so the pipeline path itself runs on the GPU box only.)"""
    import torch.nn as nn

    from backends.config.plan import resolve
    from backends.launch.meter import Meter
    from backends.machine.presets import preset
    from backends.runtime import ltx2
    from backends.runtime.dense_attention import DenseFunction

    plan = resolve(Profile(), preset("cpu"))
    model = ltx2.tiny_transformer()
    wrapper = nn.Module()
    wrapper.model = model
    hooks_ = hooks.Hooks(plan, ("dense_attention",), (), Meter(None))
    moved = []
    model.to = lambda *a, **k: moved.append(a) or model
    build = hooks_._wrap_streaming(lambda self, device, dtype, cpu_slots, gpu_slots, **kw: wrapper)
    assert build(object(), "cpu", torch.bfloat16) is wrapper
    (built,) = hooks_.built
    assert built.model == "LTXModel" and built.applied
    assert isinstance(model.transformer_blocks[0].attn1.attention_function, DenseFunction)
    assert not moved and getattr(model, hooks.STEP_HOOK)


def test_the_modules_own_help_is_not_a_run(ltx2_pipelines, tmp_path, capsys):
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", "ltx_pipelines.distilled", "--help"]) == 0
    assert "--distilled-checkpoint-path" in capsys.readouterr().out and not ledger.exists()




def test_a_module_that_exits_with_a_message_says_it_and_is_recorded_as_failed(ltx2_pipelines, tmp_path, capsys):
    # LTX-2's distilled exits with SystemExit("Missing --distilled-checkpoint-path ...") before it builds
    # anything: the message was swallowed (exit 1, nothing said) and no record was made
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--json", "--", "ltx_pipelines.distilled", "--prompt", "x"]) == 1
    out, err = capsys.readouterr()
    assert "Missing --distilled-checkpoint-path" in err
    record = only_record(ledger)
    assert record.status == "failed" and record.exit == 1 and "Missing --distilled-checkpoint-path" in record.error
    assert json.loads(out)["id"] == record.id


def test_a_runs_profile_is_recorded_by_its_whole_path(ltx2_pipelines, tmp_path, capsys, monkeypatch):
    """A newcomer trial: `--profile p.toml` was recorded as "p.toml", ambiguous read from elsewhere."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text('[transformer]\nquantization = "none"\n')
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--profile", "p.toml", "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 "--prompt", "x"]) == 1
    assert only_record(ledger).profile["path"] == str(tmp_path / "p.toml")


def test_an_argument_error_of_the_module_is_recorded_as_failed(ltx2_pipelines, tmp_path, capsys):
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 "--distilled-checkpoint-path", str(tmp_path / "none.safetensors"), "--no-such-flag"]) == 2
    assert "--no-such-flag" in capsys.readouterr().err
    assert only_record(ledger).status == "failed" and only_record(ledger).exit == 2

def test_sigterm_during_a_run_is_recorded_as_interrupted_and_exits_143(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    import os
    import signal

    blocks = importlib.import_module("ltx_pipelines.utils.blocks")
    before = signal.getsignal(signal.SIGTERM)

    @functools.wraps(blocks.DiffusionStage.__call__)
    def terminated(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # what `timeout` or `kill` sends mid-run
        raise AssertionError("the handler unwinds the run before this")
    monkeypatch.setattr(blocks.DiffusionStage, "__call__", terminated)
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--ledger", str(ledger), "--", "ltx_pipelines.distilled",
                 *args_for(tiny, "distilled", tmp_path / "x.mp4")]) == 143
    assert only_record(ledger).status == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_missing_dependency_of_ltx2_is_said_as_that(ltx2_pipelines, monkeypatch, capsys):
    """LTX-2's pipeline blocks import torchaudio; where it is not installed the run says so, once,
    with the install line (before: six "is missing" lines and "supports v1.2.0 as released")."""
    real = gate._resolve

    def resolve(module, qualname):
        if module.startswith("ltx_pipelines."):
            raise ModuleNotFoundError("No module named 'torchaudio'", name="torchaudio")
        return real(module, qualname)

    real_spec = gate.importlib.util.find_spec  # tests/stand_ins/torchaudio is found: hide it too
    monkeypatch.setattr(gate.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchaudio" else real_spec(name, *a))
    monkeypatch.setattr(gate, "_resolve", resolve)
    assert main(["run", "--dry-run", "--", "ltx_pipelines.distilled"]) == 2
    err = capsys.readouterr().err
    assert "they import torchaudio, which this Python does not have: `pip install torchaudio`" in err
    # a trial: "must match torch 2.13.0+cpu", where PyPI has no torchaudio for it: say what then
    assert "where none is published for it, install a torch that has one" in err and "+cpu" not in err.split(
        "must match torch")[1].split(")")[0]
    assert "is missing" not in err and "as released" not in err and "is not v1.2.0" not in err


@pytest.mark.parametrize("name, said, not_said", [
    # an import name is not a pip name (PIL is Pillow's): no pip line for it (before: `pip install cv2`)
    ("cv2", "install the package that provides cv2 in this Python", "pip install cv2"),
    # a package that is there but lacks a submodule is not missing (before: "they import torch")
    ("torch._no_such_submodule", "ltx_pipelines.", "they import torch,")])
def test_a_missing_module_is_said_for_what_it_is(ltx2_pipelines, monkeypatch, capsys, name, said, not_said):
    real = gate._resolve

    def resolve(module, qualname):
        if module.startswith("ltx_pipelines."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(module, qualname)

    monkeypatch.setattr(gate, "_resolve", resolve)
    assert main(["run", "--dry-run", "--", "ltx_pipelines.distilled"]) == 2
    err = capsys.readouterr().err
    assert said in err and not_said not in err


def test_a_module_whose_parent_lacks_a_dependency_is_not_said_to_be_absent(ltx2_pipelines, monkeypatch):
    """Looking ltx_pipelines.a.b up imports ltx_pipelines.a: its own missing import (torchaudio) is
    not 'no such module' (before: it was, with the list of modules)."""
    from backends.launch import run as launch_run

    real = launch_run.importlib.util.find_spec

    def find_spec(name, *args):
        if name.startswith("ltx_pipelines.a"):
            raise ModuleNotFoundError("No module named 'torchaudio'", name="torchaudio")
        return real(name, *args)

    monkeypatch.setattr(launch_run.importlib.util, "find_spec", find_spec)
    assert launch_run._no_such_module("ltx_pipelines.a.b") is None


def test_no_such_pipeline_module_names_the_ones_there(ltx2_pipelines, capsys):
    for module in ("ltx_pipelines.nope", "ltx_pipelines.a.b"):
        assert main(["run", "--dry-run", "--", module]) == 2
        err = capsys.readouterr().err
        assert f"{module}: no such module in ltx-pipelines 1.2.0" in err and "distilled, " in err
        # a trial: helper modules were listed among them (and would run as if a pipeline, doing nothing)
        assert "its pipeline modules: a2vid_two_stage, dfr_pipeline, distilled," in err
        assert "iclora_utils" not in err and "dfr_layout" not in err
    assert main(["run", "--dry-run", "--", "ltx_pipelines.iclora_utils"]) == 2
    assert "ltx_pipelines.iclora_utils: a helper module, not a pipeline" in capsys.readouterr().err
