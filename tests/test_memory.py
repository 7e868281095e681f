"""The per-stage memory plan: LTX-2's parameter counts, the decode model against the H200
measurements it was fitted to and predicts, and the fixes."""

import pytest

from backends.config import memory as M
from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.machine.presets import preset

GIB = 1 << 30


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def on(profile, cap="h200"):
    """The plan of `profile` on a preset: what the memory plan reads."""
    return resolve(profile, preset(cap))


def test_block_parameters_follow_the_formulas():
    assert M.block_params() == (386_074_624, 385_875_968)
    assert M.upsampler_params() == 126_250_624


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_parameter_counts_are_ltx2s_own():
    import torch
    from ltx_core.model.transformer.model import LTXModel

    with torch.device("meta"):
        model = LTXModel()
    from backends.runtime.quant import in_scope

    block = model.transformer_blocks[0]
    linears = sum(m.weight.numel() for n, m in block.named_modules()  # what LTX-2's fp8-cast stores in fp8
                  if isinstance(m, torch.nn.Linear) and in_scope(f"transformer_blocks.0.{n}", "ltx2-blocks"))
    assert M.block_params() == (sum(p.numel() for p in block.parameters()), linears)
    assert len(model.transformer_blocks) == 48
    outside = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in model.transformer_blocks.parameters())
    assert outside == M.DIT_OUTSIDE_BLOCKS
    from ltx_core.model.upsampler.model import LatentUpsampler

    with torch.device("meta"):
        assert sum(p.numel() for p in LatentUpsampler().parameters()) == M.upsampler_params()


# bench/ltx2_decode.py on the H200 (bench/RESULTS.md): the decode's own memory (act GiB), per mode
MEASURED = {("chunked_eager", 768, 512): 4.31, ("chunked_eager", 1536, 1024): 17.24,
            ("chunked_compile", 768, 512): 4.31, ("chunked_compile", 1536, 1024): 17.24,
            ("combined_compile", 768, 512): 7.31, ("combined_compile", 1536, 1024): 29.23}


@pytest.mark.parametrize("mode, w, h", list(MEASURED))
def test_decode_model_matches_the_h200_measurements(mode, w, h):
    stage = next(s for s in M.plan_memory(on(P(diffvae__mode=mode)), RunShapes(w, h, 121), None).stages
                 if s.stage == "DiffVAE decode")
    predicted = (stage.peak_bytes - M.VAE_PARAMS * M.BF16) / GIB  # act GiB excludes the weights
    assert abs(predicted / MEASURED[mode, w, h] - 1) < 0.04, (predicted, MEASURED[mode, w, h])


# bench/memory.py on the H200 (bench/RESULTS.md): LTX-2's full LTXModel, one forward, peak GiB
DIT_MEASURED = {("none", 768, 512): 36.42, ("none", 1024, 576): 37.06, ("none", 1536, 1024): 40.29,
                ("fp8-cast", 768, 512): 19.25, ("fp8-cast", 1024, 576): 19.83, ("fp8-cast", 1536, 1024): 23.06}


def running(stage) -> int:
    """A stage's peak once its model is built (the DiT quantized by the runtime peaks higher while built)."""
    return stage.peak_bytes if stage.running_bytes is None else stage.running_bytes


@pytest.mark.parametrize("quantization, w, h", list(DIT_MEASURED))
def test_dit_model_matches_the_h200_measurements(quantization, w, h):
    stage = next(s for s in M.plan_memory(on(P(transformer__quantization=quantization)), RunShapes(w, h, 121),
                                          None).stages if s.stage == "DiT denoising")
    assert abs(running(stage) / GIB / DIT_MEASURED[quantization, w, h] - 1) < 0.02  # a built model's forward


def test_a_dit_the_runtime_quantizes_peaks_at_its_bf16_build():
    """LTX-2's builder puts the bf16 DiT on the GPU before ltx-tui quantizes it: the stage's peak,
    which decides "fits" (the H200 measured 36.53 GiB where the plan had said 18.48)."""
    shapes = RunShapes(768, 512, 121)
    bf16, fp8 = (next(s for s in M.plan_memory(on(p), shapes, None).stages if s.stage == "DiT denoising")
                 for p in (P(), P(transformer__quantization="fp8-scaled-mm")))
    assert fp8.peak_bytes == M.dit_weight_bytes(M.Effective()) < bf16.peak_bytes and "while built" in fp8.detail
    assert fp8.running_bytes < fp8.peak_bytes and bf16.running_bytes is None


def test_dit_weights_follow_quantization_and_offload():
    shapes = RunShapes(768, 512, 121)

    def dit(profile):
        return next(s for s in M.plan_memory(on(profile), shapes, None).stages if s.stage == "DiT denoising")

    bf16, fp8 = dit(P()), dit(P(transformer__quantization="fp8-cast"))
    saved = 48 * 385_875_968  # one byte less per block-linear weight, once built
    assert bf16.peak_bytes - running(fp8) == saved
    streamed = dit(P(offload__mode="cpu", offload__gpu_slots=2))
    assert streamed.peak_bytes < bf16.peak_bytes / 10 and "2 of 48 blocks resident" in streamed.detail
    graphs = dit(P(compile__enabled=True, compile__mode="reduce-overhead"))
    assert graphs.peak_bytes > bf16.peak_bytes and "CUDA-graph pool" in graphs.detail


def test_memory_counts_what_the_plan_runs_not_what_the_profile_asks():
    """Memory reads the plan's effective values (Effective.of), not the profile's: two GPUs with
    fp8-cast (what LTX-2's multi-GPU modules run; asking for anything else there is an error now)
    count fp8 weights on every rank, and fp8-cast is never offered as a fix; an offload fix is not
    offered where the plan would refuse it (several GPUs); offload drops reduce-overhead's CUDA graphs
    (it used to double the activations for them: 4.62 instead of 3.31 GiB)."""
    shapes = RunShapes(768, 512, 121)

    def dit(plan, free=None):
        memory = M.plan_memory(plan, shapes, free)
        return next(s for s in memory.stages if s.stage == "DiT denoising"), memory

    two_plan = on(P(parallel__gpus=2, transformer__quantization="fp8-cast"), "h100x2")
    assert M.Effective.of(two_plan).quantization == "fp8-cast" and M.Effective.of(two_plan).gpus == 2
    two, memory = dit(two_plan, 20 * GIB)
    replica = M.dit_weight_bytes(M.Effective(quantization="fp8-cast"))
    assert round(replica / GIB, 1) == 17.8 and "full DiT replica 17.8 GiB (fp8-cast)" in two.detail
    assert all("fp8-cast" not in change and "offload" not in change for change, _ in memory.fixes)
    # the plan's effective value, not the profile's: an error counts as asked (and fp8-cast is then the fix)
    none = M.plan_memory(on(P(parallel__gpus=2), "h100x2"), shapes, 20 * GIB)
    assert "(none)" in next(s for s in none.stages if s.stage == "DiT denoising").detail
    assert any(change == "transformer.quantization = fp8-cast" for change, _ in none.fixes)
    streamed, _ = dit(on(P(offload__mode="cpu", compile__enabled=True, compile__mode="reduce-overhead")))
    assert round(streamed.peak_bytes / GIB, 2) == 3.31 and "CUDA-graph pool" not in streamed.detail
    graphs, _ = dit(on(P(compile__enabled=True, compile__mode="reduce-overhead")))
    assert "CUDA-graph pool" in graphs.detail


def test_verdict_and_ranked_fixes():
    shapes = RunShapes(1536, 1024, 121, batch=2)
    plan = M.plan_memory(on(P(diffvae__mode="combined_compile")), shapes, 30 * GIB)
    assert plan.fits is False and plan.verdict().startswith("does not fit: DiffVAE decode needs 28.7 GiB more")
    (together, fits), *single = plan.fixes  # no single fix is enough: the ranked ones together first
    assert " + " in together and fits <= 30 * GIB
    changes = [c for c, _ in single]
    assert changes[0] == "batch 1" and "diffvae.mode = chunked_eager" in changes  # the DiT is next: 40.3 GiB
    assert any(c.startswith("tiled decode") for c in changes)
    assert "transformer.quantization = fp8-cast" not in changes  # it does not lower the peak stage
    assert [b for _, b in single] == sorted(b for _, b in single)
    assert all(b < plan.peak.peak_bytes for _, b in plan.fixes)
    # a newcomer trial: "lower: transformer.quantization = fp8-cast -> peak 35.1 GiB" with the peak at 35.1 GiB
    small = M.plan_memory(on(P()), RunShapes(224, 224, 9), 80 * GIB)
    assert [c for c, _ in small.fixes] == ["offload.mode = cpu (gpu_slots 2)"]
    assert all(round(b / GIB, 1) < round(small.peak.peak_bytes / GIB, 1) for _, b in small.fixes)
    roomy = M.plan_memory(on(P()), RunShapes(768, 512, 121), 140 * GIB)
    assert roomy.fits and roomy.verdict().startswith("fits with")
    unknown = M.plan_memory(on(P()), RunShapes(768, 512, 121), None)
    assert unknown.fits is None and "(free GPU memory unknown)" in unknown.verdict()
    cpu = M.plan_memory(resolve(P(), preset("cpu")), RunShapes(768, 512, 121), None)
    assert cpu.fits is None and cpu.verdict().endswith("(no GPU here to fit it on)")  # not "unknown"
    doc = plan.to_dict()
    assert set(doc) >= {"stages", "peak_bytes", "free_bytes", "fits", "fixes"}
    assert set(doc["stages"][0]) == {"stage", "peak_bytes", "detail"} and set(doc["fixes"][0]) == {"change", "peak_bytes"}


def test_check_with_a_run_plans_its_memory(capsys):
    import json

    from ltx_tui.cli import main

    assert main(["--check", "--capability", "rtx4090", "--resolution", "1536x1024", "--batch", "2", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    mem = doc["memory"]
    assert doc["exit_code"] == 1 and mem["fits"] is False and mem["peak_stage"] == "DiT denoising"
    assert [s["stage"] for s in mem["stages"]] == ["text encoder", "DiT denoising", "latent upsampler",
                                                   "DiffVAE decode"]
    assert mem["free_bytes"] == 24 * GIB and mem["fixes"][0]["peak_bytes"] <= mem["free_bytes"]  # fixes that fit
    assert " + " in mem["fixes"][0]["change"]
    assert main(["--check", "--capability", "h200", "--resolution", "768x512", "--frames", "121"]) == 0
    out = capsys.readouterr().out
    assert "Memory at 768x512x121" in out and "fits with" in out and "memory fits with" in out
    assert "fix:" not in out and "  lower: offload.mode = cpu" in out  # a run that fits has nothing to fix
    assert main(["--check", "--capability", "h200"]) == 0 and "Memory at" not in capsys.readouterr().out


def test_free_memory_is_what_other_processes_leave():
    import dataclasses

    from backends.machine.presets import preset
    from ltx_tui.check import free_bytes

    cap = preset("h100")
    busy = dataclasses.replace(cap, gpus=(dataclasses.replace(cap.gpus[0], memory_used=30 * GIB),))
    assert free_bytes(cap, P()) == cap.gpus[0].memory_total
    assert free_bytes(busy, P()) == cap.gpus[0].memory_total - 30 * GIB
    assert free_bytes(preset("cpu"), P()) is None


@pytest.mark.parametrize("argv, message", [(["--resolution", "768x512"], "--resolution goes with --tune or --check"),
                                           (["--frames", "9", "--batch", "2"], "--frames, --batch go with --tune"),
                                           (["--check", "--resolution", "768x500"], "multiples of 32"),
                                           (["--check", "--frames", "100"], "8k+1")])
def test_run_flags_are_checked(capsys, argv, message):
    from ltx_tui.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_upsampler_stage_counts_the_video_encoder_ltx2_builds_beside_it():
    """LTX-2's VideoUpsampler builds the video encoder with the upsampler: the H200 measured the
    stage's peak at 1.633 GiB in distilled at 768x512x121 (bench/results/h200_distilled_oneshot.jsonl)."""
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, plan_memory

    stage = next(s for s in plan_memory(on(Profile()), RunShapes(768, 512, 121), None).stages
                 if s.stage == "latent upsampler")
    assert abs(stage.peak_bytes / GIB - 1.633) / 1.633 < 0.10
    assert "video encoder" in stage.detail


# --- several GPUs: a plan per rank -----------------------------------------------------------------

def mgpu(gpus, cap, **kw):
    return on(P(parallel__gpus=gpus, transformer__quantization="fp8-cast", **kw), cap)


def test_every_rank_holds_a_full_dit_and_splits_its_activations():
    shapes = RunShapes(768, 512, 121)
    one = M.plan_memory(on(P(transformer__quantization="fp8-cast")), shapes, None)
    one_dit = running(next(s for s in one.stages if s.stage == "DiT denoising"))
    act_one = one_dit - M.dit_weight_bytes(M.Effective(quantization="fp8-cast"))
    for gpus, cap in ((2, "h200x2"), (4, "h200x4"), (8, "h100x8")):
        plan = M.plan_memory(mgpu(gpus, cap), shapes, None)
        assert plan.world_size == gpus and [r.rank for r in plan.ranks] == list(range(gpus))
        rank = plan.ranks[0]
        stage = {s.stage: s.peak_bytes for s in rank.stages}
        weights = M.dit_weight_bytes(M.Effective(quantization="fp8-cast"))
        gemma = -(-M.gemma_params() * M.BF16 // gpus)
        buffers = 4 * (32768 // gpus) * 4096 * 2
        act = stage["DiT denoising"] - weights - -(-weights // gpus) - buffers - gemma
        assert act == act_one // gpus  # 6144 tokens split evenly, N-th each
        assert stage["text encoder"] - gemma == M._text_encoder().peak_bytes - M.gemma_params() * M.BF16
        # models stay in each rank's registry: every later stage holds the DiT and Gemma's share
        assert stage["DiffVAE decode"] > stage["latent upsampler"] > stage["DiT denoising"] > weights


def test_decoder_tiles_per_rank_follow_ltx2s_split():
    """Rank r decodes tile r of a balanced height x width grid with 4 latent pixels of overlap: at
    224x224 the 7x7 latent splits 2 x 4 over 8 ranks, so the ranks' tiles differ."""
    assert [M.balanced_split(n) for n in (2, 4, 8)] == [(1, 2), (2, 2), (2, 4)]
    assert M.tile_extents(7, 2, 4) == (6, 5) and M.tile_extents(24, 4, 4) == (9, 9, 9, 9)
    assert M.tile_extents(3, 4, 4) is None  # LTX-2 refuses more tiles than pixels
    plan = M.plan_memory(mgpu(8, "h200x8"), RunShapes(256, 224, 121), None)
    decode = [next(s for s in r.stages if s.stage == "DiffVAE decode") for r in plan.ranks]
    assert "tile 0 of 2x4: 6x5 of the 7x8 latent" in decode[0].detail
    assert "tile 4 of 2x4: 5x5 of the 7x8 latent" in decode[4].detail
    assert decode[0].peak_bytes > decode[4].peak_bytes
    assert plan.peak_rank.rank == 0 and plan.stages == plan.ranks[0].stages


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_tile_split_is_ltx2s_own():
    from ltx_core.tiling import balanced_tile_split, split_by_count

    for n in range(1, 9):
        assert balanced_tile_split(n) == M.balanced_split(n)
        for size in range(1, 64):
            try:
                ltx2 = tuple(i.end - i.start for i in split_by_count(n, 4)(size).intervals)
            except ValueError:
                ltx2 = None
            assert M.tile_extents(size, n, 4) == ltx2, (n, size)


def test_memory_per_rank_in_json_and_text(capsys):
    import json

    from ltx_tui.cli import main

    argv = ["--check", "--capability", "h200x4", "--gpus", "4", "--resolution", "768x512", "--frames", "121"]
    assert main(argv + ["--json"]) == 1  # the default profile asks for no quantization: an error on 4 GPUs
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert mem["world_size"] == 4 and mem["peak_rank"] == 0 and len(mem["ranks"]) == 4
    assert {r["device"] for r in mem["ranks"]} == {0, 1, 2, 3}
    assert mem["ranks"][0]["peak_bytes"] == mem["peak_bytes"] and mem["fits"] is True
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "per rank, 4 ranks" in out and "rank 3 (GPU 3)" in out and "<- peak rank" in out
    assert "Rank 0 per stage, peak:" in out and "full DiT replica" in out
