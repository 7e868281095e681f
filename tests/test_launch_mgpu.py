"""`ltx-tui run` on LTX-2's multi-GPU modules, on the CPU: what can run without NCCL and GPUs.

The flag policy and the ranks' records are pure. The rest uses LTX-2 v1.2.0's own classes
(`$LTX2_CORE_SRC` / `$LTX2_PIPELINES_SRC`): its sequence-parallel all2all attention wrappers on
its LTXModel (with a stand-in AttentionManager: the real one needs NCCL and ltx-kernels' CUDA
all2all), its SequenceParallelBuilder's timeout property down to the all2all objects, and the seam
itself: `distilled_mgpu` run as `ltx-tui run` runs it, its controller's runner class shipped by
LTX-2's own `_RunnerShipper` into a fresh `spawn` process (as LTX-2's fleet does), and ranks that
run a job there and record it.
"""

from __future__ import annotations

import importlib
import inspect
import io
import json
import multiprocessing

import pytest
import torch

from backends.config.options import Profile
from backends.launch import flags, gate, hooks
from backends.machine import runs
from backends.machine.runs import RunRecord, StageRecord
from fakes import decided
from ltx_tui.cli import main

ARGS = ["--distilled-checkpoint-path", "/m.safetensors", "--prompt", "a cat"]
FP8 = decided(**{"transformer.quantization": "fp8-cast"})


# --- the flag policy (pure) -------------------------------------------------------------------

@pytest.mark.parametrize("given, flag, words", [
    (["--quantization", "fp8-cast"], "--quantization", "build the DiT fp8-cast whatever it says"),
    (["--quant=fp8-scaled-mm"], "--quantization", "build the DiT fp8-cast whatever it says"),
    (["--offload", "cpu"], "--offload", "nothing is streamed"),
    (["--lora", "/l.safetensors", "0.5"], "--lora", "the LoRA would be left out"),
    (["--max-batch-size", "4"], "--max-batch-size", "never read it"),
])
def test_flags_the_multi_gpu_modules_would_drop_are_refused_saying_what_would_happen(given, flag, words):
    with pytest.raises(flags.FlagConflict) as e:
        flags.policy(ARGS + given, FP8, multi_gpu=True)
    assert not isinstance(e.value, flags.ProfileConflict)
    assert "silently drop" in str(e.value) and f"{flag}: " in str(e.value) and words in str(e.value)
    with pytest.raises(flags.FlagConflict):  # --as-built too: its record could not say what ran
        flags.equivalent_profile(ARGS + given, False, multi_gpu=True, world_size=2)


@pytest.mark.parametrize("values, words", [
    ({}, "transformer.quantization = none would silently run fp8-cast"),
    ({"transformer.quantization": "fp8-scaled-mm"}, "transformer.quantization = fp8-scaled-mm"),
    ({"transformer.quantization": "fp8-cast", "offload.mode": "cpu"}, "offload.mode = cpu would silently stream "
                                                                     "nothing"),
])
def test_a_profile_asking_what_the_ranks_would_not_do_is_refused(values, words):
    with pytest.raises(flags.ProfileConflict) as e:
        flags.policy(ARGS, decided(**values), multi_gpu=True)
    assert words in str(e.value)


def test_compile_and_the_decoder_layout_are_judged_and_ltx_tui_does_them_in_every_rank():
    prof = FP8.replace(**{"compile.enabled": True, "diffvae.mode": "chunked_compile"})
    p = flags.policy(ARGS + ["--compile", "--diffvae-optimization", "chunked_compile"], prof, multi_gpu=True)
    assert not p.conflicts and [v.verdict for v in p.verdicts] == ["agrees", "agrees"]
    assert p.dit_steps == ("dense_attention", "fast_norm", "compile", "capture")  # fp8-cast is the ranks' own: never quantized twice
    assert p.decoder_steps == ("diffvae_layout", "na_backend")
    assert p.ltx_argv == (*ARGS, "--diffvae-optimization", "chunked_compile")  # no --compile: ltx-tui compiles
    assert any("fp8-cast" in t for t in p.ltx2_does)
    (v,) = flags.policy(ARGS + ["--compile", "mode=max-autotune"], prof, multi_gpu=True).conflicts
    assert v.option == "compile.mode"


def test_as_built_says_what_the_ranks_do():
    prof = flags.equivalent_profile(ARGS + ["--compile"], False, multi_gpu=True, world_size=2)
    assert str(prof.transformer.quantization) == "fp8-cast" and prof.parallel.gpus == 2 and prof.compile.enabled


def test_more_than_one_gpu_with_a_single_gpu_module_names_the_multi_gpu_one(tmp_path, capsys):
    prof = tmp_path / "p.toml"
    prof.write_text('[parallel]\ngpus = 2\n[transformer]\nquantization = "fp8-cast"\n')
    assert main(["run", "--profile", str(prof), "--", "ltx_pipelines.distilled", "--prompt", "x"]) == 2
    assert "use ltx_pipelines.distilled_mgpu" in capsys.readouterr().err


def test_parallel_devices_select_the_ranks_gpus_within_cuda_visible_devices(monkeypatch):
    from backends.launch import run as launcher

    prof = FP8.replace(**{"parallel.gpus": 2, "parallel.devices": [1, 3]})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    (note,) = launcher._select_devices(prof, dry_run=False)
    assert "CUDA_VISIBLE_DEVICES=5,7" in note
    import os
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5,7"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(launcher.LaunchError):
        launcher._select_devices(prof, dry_run=False)


# --- the ranks' records in the ledger (pure) --------------------------------------------------

def _rank_record(run: str, rank: int, seconds: float) -> RunRecord:
    return RunRecord(id=f"{run}-r{rank}", started="2026-12-01T10:00:00+00:00", module="ltx_pipelines.distilled_mgpu",
                     status="ok", exit=0, wall_s=30.0, rank=rank,
                     plan={"as_built": False, "mgpu": {"rank": rank, "world_size": 2, "run": run,
                                                       "notes": ["all2all barrier timeout raised from 10 s to 600 s"]}},
                     stages=(StageRecord("denoising 1", "denoise", seconds, peak_allocated_gib=20.0),))


def test_runs_show_compare_and_list_the_ranks(tmp_path, capsys):
    ledger = tmp_path / "runs.jsonl"
    for rank, seconds in ((0, 4.0), (1, 4.5)):
        runs.append(_rank_record("20261201-100000-abcd", rank, seconds), ledger)
    assert main(["runs", "--ledger", str(ledger), "--show", "20261201-100000-abcd-r1"]) == 0
    out = capsys.readouterr().out
    assert "ltx_pipelines.distilled_mgpu (rank 1 of 2) ok" in out and "note: all2all barrier timeout raised" in out
    assert main(["runs", "--ledger", str(ledger), "--compare", "20261201-100000-abcd-r0", "-1"]) == 0
    out = capsys.readouterr().out
    assert "(rank 0 of 2)" in out and "(rank 1 of 2)" in out and "0.89x" in out
    assert main(["runs", "--ledger", str(ledger)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "rank" in lines[0].split() and lines[1].split()[3] == "1" and lines[2].split()[3] == "0"
    assert main(["runs", "--ledger", str(ledger), "--show", "20261201-100000-abcd"]) == 2  # two ranks: which?
    assert "2 runs" in capsys.readouterr().err


def test_a_ranks_stages_are_compared_with_that_ranks_memory_plan():
    from types import SimpleNamespace

    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, plan_memory
    from backends.config.plan import resolve
    from backends.launch.run import _predictions, full_size_params
    from backends.machine.presets import preset

    prof = FP8.replace(**{"parallel.gpus": 2})
    plan = resolve(prof, preset("h200x2"))
    prep = SimpleNamespace(profile=prof, plan=plan, shape={"width": 768, "height": 512, "frames": 121})
    built = [SimpleNamespace(model=m, params=n) for m, n in full_size_params().items() if m != "LTXGemmaTextEncoder"]
    memory = plan_memory(plan, RunShapes(768, 512, 121), None)
    for rank in (0, 1):
        predict = _predictions(prep, built, rank)
        want = next(s for s in memory.ranks[rank].stages if s.stage == "DiffVAE decode")
        assert predict("video_decode", {}) == (round(want.peak_bytes / GIB, 3), f"DiffVAE decode (rank {rank})")
        # the ranks' Gemma is loaded through Accelerate, never through the builders ltx-tui sees
        assert predict("text_encoder", {})[0] is None


# --- LTX-2's own classes ----------------------------------------------------------------------

@pytest.mark.ltx2
def test_v120_has_every_signature_the_multi_gpu_launch_relies_on(ltx2_pipelines):
    assert gate.signature_problems(gate.MGPU_WRAPPED) == []


class FakeManager:
    """LTX-2's AttentionManager for one rank of one (world size 1: the all2all moves nothing), counting
    the all2all calls. The real one needs NCCL and ltx-kernels' CUDA all2all."""

    rank, world_size, copy_out, group = 0, 1, False, None

    def __init__(self) -> None:
        self.calls = 0
        outer = self

        class Moves:
            def send_recv_heads(self, x, copy_out=False):
                outer.calls += 1
                return x
        self.all2all_k = self.all2all_v = Moves()

    def send_recv_qkv(self, q, k, v):
        self.calls += 1
        return q, k, v

    def gather_heads(self, heads_local):
        self.calls += 1
        return heads_local


def _sp_wrapper_classes():
    attention = importlib.import_module(hooks.SP_MODULE)
    return {name: cls for name, cls in vars(attention).items() if inspect.isclass(cls)
            and cls.__module__ == attention.__name__
            and tuple(inspect.signature(cls.__init__).parameters) == ("self", "manager", "original_attention")}


@pytest.mark.ltx2
def test_the_sp_wrappers_are_ltx2s_and_keep_the_function_they_call_as_original_attention(ltx2_pipelines):
    """If LTX-2 adds, renames or restructures an all2all wrapper, this breaks (not a silent wrong result)."""
    classes = _sp_wrapper_classes()
    assert set(classes) == set(hooks.SP_WRAPPERS)
    for cls in classes.values():
        function = object()
        wrapper = cls(FakeManager(), function)
        assert wrapper.original_attention is function and hooks.is_sp_wrapper(wrapper)
        assert "original_attention" in inspect.getsource(cls.__call__)  # the call goes through the attribute
    assert not hooks.is_sp_wrapper(lambda q, k, v, heads: q)


@pytest.fixture
def gloo_world_of_one():
    """LTX-2's audio all2all wrapper gathers with torch.distributed: a one-rank gloo group on the CPU."""
    import torch.distributed as dist

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _sp_model(manager):
    """LTX-2's tiny LTXModel with LTX-2's own sequence-parallel op applied (as its SP builder does)."""
    from backends.runtime import ltx2
    from ltx_core.multigpu.transformer.sequence_parallel import create_video_self_attention_module_ops

    model = ltx2.tiny_transformer()
    return create_video_self_attention_module_ops(manager).mutator(model)


def _slots(model):
    return [(name, slot, getattr(m, slot)) for name, m in model.named_modules() for slot in hooks.SP_SLOTS
            if hooks.is_sp_wrapper(getattr(m, slot, None))]


@pytest.mark.ltx2
def test_dense_attention_goes_inside_ltx2s_all2all_wrappers_never_over_them(ltx2_pipelines, gloo_world_of_one):
    from backends.config.plan import resolve
    from backends.launch.meter import Meter
    from backends.machine.presets import preset
    from backends.runtime import ltx2
    from backends.runtime.apply import apply_profile
    from backends.runtime.dense_attention import DenseFunction

    plan = resolve(Profile().replace(**{"transformer.attention": "sdpa_math"}), preset("cpu"))
    manager = FakeManager()
    model = _sp_model(manager)
    wrapped = _slots(model)
    assert len(wrapped) == 4 * 2  # 2 blocks: attn1 and video_to_audio_attn, plain and masked slots
    h = hooks.Hooks(plan, ("dense_attention",), (), Meter(None))
    build = h._wrap_single(lambda builder, device, dtype, **kw: model)
    builder = type("B", (), {"module_ops": (), "registry": None, "with_registry": lambda self, r: self,
                             "with_module_ops": lambda self, ops: self})()
    assert build(builder, torch.device("cpu")) is model
    (built,) = h.built
    assert built.applied and any("inside LTX-2's all2all wrappers" in c for c in built.changes)
    after = _slots(model)
    assert [(n, s) for n, s, _ in after] == [(n, s) for n, s, _ in wrapped]
    assert all(w is w0 for (_, _, w), (_, _, w0) in zip(after, wrapped))  # the same wrappers stay
    assert all(isinstance(w.original_attention, DenseFunction) for _, s, w in after if s == "attention_function")
    # the forward still moves heads through the all2all, and (world size 1) computes what the plan's
    # attention computes on the model without sequence parallelism
    plain = ltx2.tiny_transformer()
    apply_profile(plain, plan, device="cpu")
    inputs = ltx2.transformer_inputs()
    with torch.no_grad():
        expected = plain(*inputs)
        got = model(*inputs)
    assert manager.calls > 0
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    # why: the runtime's apply alone would install the dense function over the wrapper, and the
    # all2all would never run (each rank attending to its own tokens only)
    bare = _sp_model(FakeManager())
    apply_profile(bare, plan, device="cpu")
    assert _slots(bare) == []


@pytest.mark.ltx2
def test_a_refused_apply_leaves_the_wrappers_as_they_were(ltx2_pipelines):
    manager = FakeManager()
    model = _sp_model(manager)
    before = [(n, s, w, w.original_attention) for n, s, w in _slots(model)]
    with pytest.raises(RuntimeError):
        with hooks.inside_sp_wrappers(model):
            raise RuntimeError("refused")
    assert [(n, s, w, w.original_attention) for n, s, w in _slots(model)] == before


class FakeAll2All:
    def __init__(self) -> None:
        self.timeouts = []

    def set_timeout_seconds(self, seconds):
        self.timeouts.append(seconds)


@pytest.mark.ltx2
def test_the_barrier_timeout_is_raised_before_the_first_step_and_put_back(ltx2_pipelines, capsys):
    """LTX-2's SequenceParallelBuilder and AttentionManager (its timeout property fans out to its four
    all2all objects), with stand-in all2all objects and weight tracker."""
    from backends.config.plan import resolve
    from backends.launch import mgpu, run
    from backends.machine.presets import preset
    from backends.runtime import ltx2
    from ltx_core.multigpu.transformer.attention import AttentionManager
    from ltx_pipelines.multigpu.sp_builder import SequenceParallelBuilder

    manager = object.__new__(AttentionManager)
    a2a = [FakeAll2All() for _ in range(3)]
    manager.all2all_q, manager.all2all_k, manager.all2all_heads = a2a
    manager.all2all_v = manager.all2all_k
    manager._all2all_timeout_seconds = 10.0
    builder = object.__new__(SequenceParallelBuilder)
    builder._attn_mgr, builder._inner = manager, None
    seen = []
    builder._tracker = type("T", (), {"build": lambda self, inner, device=None, dtype=None, **kw:
                                      seen.append(manager.all2all_timeout_seconds) or ltx2.tiny_transformer()})()
    prof = FP8.replace(**{"compile.enabled": True})
    policy = flags.policy([], prof, multi_gpu=True)
    prep = run.Prepared("ltx_pipelines.distilled_mgpu", (), "p.toml", prof, "0" * 64, policy,
                        resolve(prof, preset("cpu")), {}, {})
    assert run.barrier_timeout(prep) == mgpu.BARRIER_TIMEOUT_S
    session = mgpu.RankSession(mgpu.RankSpec(prep, "run", (), None, run.barrier_timeout(prep))).open()
    try:
        builder.build(device="cpu")  # stage 1's DiT
        builder.build(device="cpu")  # stage 2's: raised once
    finally:
        session.close()
    assert seen == [mgpu.BARRIER_TIMEOUT_S] * 2  # raised before the model (and so its first step)
    assert [t.timeouts for t in a2a] == [[600.0, 10.0], [600.0, 600.0, 10.0, 10.0], [600.0, 10.0]]
    assert manager.all2all_timeout_seconds == 10.0  # put back
    assert not hasattr(vars(SequenceParallelBuilder)["build"], "__wrapped__")  # LTX-2's own build again
    err = capsys.readouterr().err
    assert "ltx-tui: rank 0: all2all barrier timeout raised from 10 s to 600 s before the first step" in err
    assert session.notes and session.raised == []


# --- the seam: the runner class crosses to a spawned process -----------------------------------

@pytest.fixture(scope="module")
def tiny(ltx2_pipelines, tmp_path_factory):
    import ltx2_checkpoints

    return ltx2_checkpoints.write_checkpoints(tmp_path_factory.mktemp("ltx2-tiny"), "tiny")


def _ship(runner_cls) -> bytes:
    """What LTX-2's fleet hands each spawned worker: its `_RunnerShipper`, pickled as multiprocessing does."""
    from multiprocessing.reduction import ForkingPickler

    from ltx_pipelines.multigpu.fleet import _RunnerShipper

    buf = io.BytesIO()
    ForkingPickler(buf).dump(_RunnerShipper(runner_cls))
    return buf.getvalue()


def _spawn(target, *args, timeout: float = 120):
    import mgpu_ranks

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    process = ctx.Process(target=getattr(mgpu_ranks, target), args=(*args, out))
    process.start()
    try:
        return out.get(timeout=timeout)
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


class _Started(Exception):
    """Stands in for the NCCL fleet: stops the module once its controller would start."""


@pytest.mark.ltx2
@pytest.mark.slow
def test_distilled_mgpus_runner_reaches_a_spawned_rank_with_the_hooks(ltx2_pipelines, tiny, tmp_path, monkeypatch):
    """`ltx-tui run -- ltx_pipelines.distilled_mgpu`: the module (run as __main__) hands
    DistilledRunner to MGPUController; the controller's start() is where LTX-2 would spawn ranks.
    Here it ships the class it holds with LTX-2's own shipper to a spawn child, which instantiates
    it as LTX-2's worker entry does: the child has ltx-tui's wrappers installed, and none after."""
    import ltx2_checkpoints

    from backends.launch import run as launcher

    controller = importlib.import_module("ltx_pipelines.multigpu.controller").MGPUController
    original_init = vars(controller)["__init__"]
    reports = []

    def start(self, **setup_kwargs):
        reports.append(_spawn("inspect_shipped", _ship(self._runner_cls), 0))
        raise _Started
    monkeypatch.setattr(controller, "start", start)
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 1)  # one rank; this machine has no GPU
    profile = tmp_path / "p.toml"
    profile.write_text('[transformer]\nquantization = "fp8-cast"\n[compile]\nenabled = true\n')
    ledger = tmp_path / "runs.jsonl"
    args = ltx2_checkpoints.pipeline_args(tiny, "distilled_mgpu", width=64, height=64, frames=9,
                                          output=tmp_path / "x.mp4")
    assert main(["run", "--profile", str(profile), "--ledger", str(ledger), "--", "ltx_pipelines.distilled_mgpu",
                 *args]) == 1  # the stand-in stopped it
    (report,) = reports
    assert "error" not in report, report.get("traceback")
    assert report["name"] == "DistilledRunner" and report["module"] == "__main__"  # as the module's own class
    assert report["bases"] == ["DistilledRunner", "MGPURunner"] and report["base_module"] == "__main__"
    assert report["main"] == "__mp_main__"  # the child imported the module as spawn does, not as __main__
    assert report["method_modules"] == ["backends.launch.mgpu"] * 3
    assert report["rank"] == 0 and report["dit_steps"] == ["dense_attention", "fast_norm", "compile", "capture"]
    assert report["before"] == dict.fromkeys(report["before"], False)  # a fresh process: nothing from the parent
    assert report["installed"] == dict.fromkeys(report["installed"], True)  # compile: the SP build wrapped too
    assert report["after"] == dict.fromkeys(report["after"], False)
    assert vars(controller)["__init__"] is original_init  # the parent's wrapper is gone too
    (record,) = runs.load(ledger).records  # no rank ran a job: the module's failure, recorded from here
    assert record.status == "failed" and record.rank is None and "_Started" in record.error


@pytest.mark.ltx2
@pytest.mark.slow
def test_each_rank_records_its_own_job_in_one_ledger(ltx2_pipelines, tiny, tmp_path, capsys):
    """Two spawned ranks run a job of a runner shipped as LTX-2 ships it (a stand-in for
    DistilledRunner that runs LTX-2's single-GPU DistilledPipeline: no NCCL here) and each appends
    its own record, stage by stage, with the plan applied to its DiT."""
    from backends.config.plan import resolve
    from backends.launch import mgpu, run
    from backends.machine.presets import preset
    from mgpu_ranks import CpuDistilledRunner

    prof = FP8
    policy = flags.policy([], prof, multi_gpu=True)
    prep = run.Prepared("ltx_pipelines.distilled_mgpu", (), "p.toml", prof, "0" * 64, policy,
                        resolve(prof, preset("cpu")), {"ltx-core": "1.2.0", "ltx-pipelines": "1.2.0"},
                        {"width": 64, "height": 64, "frames": 9})
    ledger = tmp_path / "runs.jsonl"
    spec = mgpu.RankSpec(prep, "20261201-100000-beef", ("ltx-tui", "run"), str(ledger), None)
    payload = _ship(mgpu.rank_runner(CpuDistilledRunner, spec))
    setup = {"checkpoint": str(tiny.checkpoint), "gemma_root": str(tiny.gemma_root),
             "spatial_upsampler_path": str(tiny.spatial_upsampler), "decode_budget": 8 << 30}
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    import mgpu_ranks

    children = [ctx.Process(target=mgpu_ranks.run_rank, args=(payload, rank, 2, setup,
                                                               {"output_path": str(tmp_path / f"r{rank}.mp4"),
                                                                "prompt": "a cat", "height": 64, "width": 64,
                                                                "num_frames": 9}, out)) for rank in (0, 1)]
    for c in children:
        c.start()
    try:
        results = sorted((out.get(timeout=300) for _ in children), key=lambda r: r["rank"])
    finally:
        for c in children:
            c.join(timeout=30)
    assert all("error" not in r for r in results), [r.get("traceback") for r in results]
    records = mgpu.rank_records(ledger, "20261201-100000-beef")
    assert [r.rank for r in records] == [0, 1] and [r.id for r in records] == [
        "20261201-100000-beef-r0", "20261201-100000-beef-r1"]
    for r in records:
        assert r.status == "ok" and r.plan["mgpu"] == {"rank": r.rank, "world_size": 2, "run": "20261201-100000-beef",
                                                       "notes": []}
        names = [s.name for s in r.stages]
        assert {"text encoding", "denoising 1", "upsampling", "denoising 2", "video decode"} <= set(names)
        dits = [m for m in r.models if m.model == "LTXModel"]
        assert len(dits) == 2 and all(m.applied for m in dits)
        assert any(c.startswith("transformer.attention: installed") for c in dits[0].changes)
    err = capsys.readouterr().err
    assert main(["runs", "--ledger", str(ledger), "--show", "20261201-100000-beef-r1"]) == 0
    assert "(rank 1 of 2)" in capsys.readouterr().out
    del err


# --- the parent: dry run, refusals, and what the ranks recorded -------------------------------

def _mgpu_args(tiny, tmp_path):
    import ltx2_checkpoints

    return ltx2_checkpoints.pipeline_args(tiny, "distilled_mgpu", width=64, height=64, frames=9,
                                          output=tmp_path / "x.mp4")


def test_a_flag_the_multi_gpu_module_would_drop_exits_2_before_anything_loads(tmp_path, capsys):
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nquantization = "fp8-cast"\n')
    assert main(["run", "--profile", str(prof), "--", "ltx_pipelines.distilled_mgpu", "--prompt", "x",
                 "--lora", "/l.safetensors"]) == 2
    err = capsys.readouterr().err
    assert "--lora: LTX-2's multi-GPU modules build their pipelines without LoRAs" in err


@pytest.mark.ltx2
def test_dry_run_of_a_multi_gpu_module_says_what_every_rank_gets(ltx2_pipelines, tiny, tmp_path, monkeypatch, capsys):
    from backends.launch import run as launcher

    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 1)
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nquantization = "fp8-cast"\n[compile]\nenabled = true\n')
    assert main(["run", "--profile", str(prof), "--dry-run", "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path), "--compile"]) == 0
    out = capsys.readouterr().out
    assert "one rank per visible GPU (1 here)" in out and "each LTXModel LTX-2 builds in every rank" in out
    assert "inside LTX-2's sequence-parallel all2all wrappers" in out
    assert "all2all barrier timeout raised to 600 s" in out and "--compile: agrees" in out
    command = out.split("LTX-2 command (what runs, in this process):\n")[1]
    assert "--compile" not in command and command.count("--diffvae-optimization") == 1
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 2)  # the profile says one GPU, two are visible
    # a user trial: the dry run said "the run exits 2" (or, no GPU, "it would fail") and exited 0
    assert main(["run", "--profile", str(prof), "--dry-run", "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "2 here, but the profile has parallel.gpus = 1: the run exits 2" in out and "would spawn 2 ranks" in err
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 0)
    assert main(["run", "--profile", str(prof), "--dry-run", "--json", "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 1 and "no CUDA GPU is visible here" in err
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 2)
    assert main(["run", "--profile", str(prof), "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 2
    assert "would spawn 2 ranks (one per visible GPU); set parallel.gpus = 2" in capsys.readouterr().err


@pytest.mark.parametrize("gpus, capability, words", [
    (3, "h200x4", "3 GPUs do not divide them"),
    (2, "without-all2all", "all2all"),
])
def test_the_launcher_refuses_what_the_multi_gpu_preflight_refuses(gpus, capability, words, tmp_path, monkeypatch):
    """ltx-tui run on a *_mgpu module decides the whole machine's plan as --check does (it used to plan
    one device, whose gpu-count error a pipeline option never blocks: every parallel.* rule was skipped)."""
    import dataclasses

    from backends.launch import run as launcher
    from backends.machine.presets import preset

    cap = preset("h200x4")
    if capability == "without-all2all":
        packages = dict(cap.packages)
        packages["ltx_kernels"] = dataclasses.replace(cap.package("ltx_kernels"), available=False, reason="not installed")
        cap = dataclasses.replace(cap, packages=packages)
    monkeypatch.setattr(launcher, "_gate", lambda module: {"ltx-core": "1.2.0", "ltx-pipelines": "1.2.0"})
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: gpus)
    prof = FP8.replace(**{"parallel.gpus": gpus})
    path = tmp_path / "p.toml"
    from backends.config.profile import save

    save(prof, path)
    with pytest.raises(launcher.LaunchError, match=words) as e:
        launcher.prepare(str(path), "ltx_pipelines.distilled_mgpu", ["--width", "768", "--height", "512",
                                                                     "--num-frames", "121"], capability=cap)
    assert e.value.code == 1 and "multi-GPU preflight" in str(e.value)


def _fake_fleet(monkeypatch, ranks: list[tuple[int, str]], world: int):
    """LTX-2's controller with a stand-in fleet: start() appends the records the given ranks would
    (each with the run id and ledger ltx-tui shipped with the runner class); the job does nothing."""
    from backends.launch import mgpu

    controller = importlib.import_module("ltx_pipelines.multigpu.controller").MGPUController

    def start(self, **setup_kwargs):
        spec = vars(mgpu._ours(self._runner_cls))[mgpu.SPEC_ATTR]
        for rank, status in ranks:
            runs.append(RunRecord(id=f"{spec.run_id}-r{rank}", started="2026-12-01T10:00:00+00:00",
                                  module=spec.prep.module, status=status, exit=0 if status == "ok" else 1, wall_s=1.0,
                                  rank=rank, plan={"mgpu": {"rank": rank, "world_size": world, "run": spec.run_id}},
                                  stages=(StageRecord("denoising 1", "denoise", 1.0 + rank),)), spec.ledger)
        self._started, self._num_gpus = True, world
    monkeypatch.setattr(controller, "start", start)
    monkeypatch.setattr(controller, "stream", lambda self, **kwargs: iter(()))
    monkeypatch.setattr(controller, "shutdown", lambda self, **kwargs: None)


@pytest.mark.ltx2
@pytest.mark.parametrize("ranks, code, says", [
    ([(0, "ok"), (1, "ok")], 0, "2 rank(s) recorded as runs"),
    ([(0, "ok"), (1, "not applied")], 1, "rank 1: not applied"),
    ([(0, "ok")], 1, "rank(s) 1 wrote no record"),
])
def test_the_run_is_what_its_ranks_recorded(ltx2_pipelines, tiny, tmp_path, monkeypatch, capsys, ranks, code, says):
    from backends.launch import run as launcher

    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 2)
    _fake_fleet(monkeypatch, ranks, world=2)
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nquantization = "fp8-cast"\n[parallel]\ngpus = 2\n')
    from backends.config.plan import resolve
    from backends.machine.presets import preset

    monkeypatch.setattr(launcher, "_plan", lambda profile, capability, run_shape=None, length=None:
                        resolve(profile, preset("h200x2"), length=length))
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--profile", str(prof), "--ledger", str(ledger), "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == code
    captured = capsys.readouterr()
    assert says in captured.err
    assert captured.out.count("ltx_pipelines.distilled_mgpu (rank ") == len(ranks)
    assert len(runs.load(ledger).records) == len(ranks)  # the ranks' records only: the parent adds none


@pytest.mark.ltx2
def test_a_multi_gpu_module_that_exits_before_its_ranks_start_is_recorded_as_failed(ltx2_pipelines, tiny, tmp_path,
                                                                                   monkeypatch, capsys):
    """A newcomer trial: the module's own exit before any rank started (a fleet that cannot start) said
    "no rank recorded a run (the ranks' own lines above say why)", with no rank lines, and recorded
    nothing; one GPU records such a run as failed."""
    from backends.launch import run as launcher
    from backends.config.plan import resolve
    from backends.machine.presets import preset

    controller = importlib.import_module("ltx_pipelines.multigpu.controller").MGPUController

    def start(self, **setup_kwargs):
        raise SystemExit("the fleet cannot start: no GPUs")
    monkeypatch.setattr(controller, "start", start)
    monkeypatch.setattr(launcher, "_visible_gpus", lambda: 2)
    monkeypatch.setattr(launcher, "_plan", lambda profile, capability, run_shape=None, length=None:
                        resolve(profile, preset("h200x2"), length=length))
    prof = tmp_path / "p.toml"
    prof.write_text('[transformer]\nquantization = "fp8-cast"\n[parallel]\ngpus = 2\n')
    ledger = tmp_path / "runs.jsonl"
    assert main(["run", "--profile", str(prof), "--ledger", str(ledger), "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 1
    err = capsys.readouterr().err
    (record,) = runs.load(ledger).records
    assert record.status == "failed" and "the fleet cannot start: no GPUs" in record.error and record.rank is None
    assert "the ranks' own lines above" not in err
    assert f"no rank recorded a run; recorded the module's exit as run {record.id} in {ledger}" in err
    # a ledger that cannot be written is refused before the run now; one that fails only when the record is
    # appended (a full disk): what happened is said all the same (it lost "no rank recorded a run")
    assert main(["run", "--profile", str(prof), "--ledger", str(tmp_path), "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 2
    assert "the run could not be recorded" in capsys.readouterr().err
    monkeypatch.setattr(runs, "unwritable", lambda path=None: None)
    assert main(["run", "--profile", str(prof), "--ledger", str(tmp_path), "--", "ltx_pipelines.distilled_mgpu",
                 *_mgpu_args(tiny, tmp_path)]) == 1
    assert f"no rank recorded a run; not recorded: the ledger {tmp_path} cannot be written" in capsys.readouterr().err
