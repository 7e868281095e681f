"""The runtime on LTX-2's real modules on a CUDA device (-m gpu; ltx-core via LTX2_CORE_SRC).

Triton NA inside every DiffVAE layout (compiled ones included) against LTX-2's own
TritonNaAttention; the DiT with CUDA-graph compile, offload and FP8/INT8 linears against itself."""

import copy

import pytest
import torch

from backends.config.options import Profile
from backends.runtime import ltx2
from backends.runtime.apply import apply_profile

pytestmark = [pytest.mark.gpu, pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def decode(decoder, latent):
    with torch.inference_mode():
        return decoder(latent, generator=torch.Generator("cuda").manual_seed(1))


@pytest.fixture(scope="module")
def decoder_and_latent():
    decoder = ltx2.tiny_decoder().to("cuda", torch.bfloat16)
    latent = ltx2.decoder_latent(decoder, 3, 4, 5).to("cuda", torch.bfloat16)
    return decoder, latent


@pytest.mark.parametrize("mode", ["chunked_eager", "chunked_compile", "combined_compile"])
def test_triton_na_in_every_layout_matches_ltx2s_triton(decoder_and_latent, mode):
    from ltx_core.model.video_vae.transformer.apply import apply_diffvae_mode
    from ltx_core.model.video_vae.transformer.config import DiffVAEMode

    from ltx_core.model.video_vae.transformer.fallback_na import TritonNaAttention

    decoder, latent = decoder_and_latent
    if mode.startswith("chunked"):  # without natten, LTX-2's chunked_eager runs its TritonNaAttention
        reference = apply_diffvae_mode(copy.deepcopy(decoder), DiffVAEMode.CHUNKED_EAGER)
    else:  # the combined layout (the decoder as built), eager, with LTX-2's TritonNaAttention
        reference = copy.deepcopy(decoder)
        for m in reference.modules():
            if hasattr(m, "kernel_size") and hasattr(m, "attention_function"):
                m.attention_function = TritonNaAttention()
    ours = copy.deepcopy(decoder)
    report = apply_profile(ours, P(diffvae__mode=mode, diffvae__na_backend="triton"), device="cuda")
    assert report.change("diffvae.mode").action == "laid out"
    assert len(report.change("diffvae.na_backend").modules) == 6
    want = decode(reference, latent)
    for _ in range(2):
        got = decode(ours, latent)
        assert rel(got, want) < 3e-2, mode


@pytest.fixture(scope="module")
def dit():
    model = ltx2.tiny_transformer(layers=3).to("cuda", torch.bfloat16)
    return model, ltx2.transformer_inputs(tokens=37, device="cuda", dtype=torch.bfloat16)


def run(model, inputs):
    with torch.inference_mode():
        return model(*inputs)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_compiled_dit_chain_matches_eager(dit, mode):
    model, inputs = dit
    want = run(model, inputs)
    ours = copy.deepcopy(model)
    apply_profile(ours, P(compile__enabled=True, compile__mode=mode), device="cuda")
    first = run(ours, inputs)
    second = run(ours, inputs)  # with CUDA graphs: the first output must survive the replay
    for got in (first, second):
        assert rel(got[0], want[0]) < 2e-2 and rel(got[1], want[1]) < 2e-2, mode


def test_offloaded_dit_matches_resident(dit):
    model, inputs = dit
    want = run(model, inputs)
    ours = copy.deepcopy(model).cpu()
    report = apply_profile(ours, P(offload__mode="cpu", offload__gpu_slots=2), device="cuda")
    assert report.streamer is not None and len(report.streamer.blocks) == 3
    for _ in range(2):
        got = run(ours, inputs)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("method, bound", [("fp8-scaled-mm", 0.1), ("int8-w8a8", 0.1), ("fp8-cast", 0.1)])
def test_quantized_dit_blocks(dit, method, bound):
    model, inputs = dit
    want = run(model, inputs)
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(transformer__quantization=method), device="cuda")
    replaced = report.change("transformer.quantization").modules
    assert replaced and all(n.startswith("transformer_blocks.") for n in replaced)
    got = run(ours, inputs)
    assert rel(got[0], want[0]) < bound and rel(got[1], want[1]) < bound


def _skip_video_self_attention(blocks):
    from ltx_core.guidance.perturbations import BatchedPerturbationConfig, Perturbation, PerturbationConfig, \
        PerturbationType

    skip = PerturbationConfig([Perturbation(PerturbationType.SKIP_VIDEO_SELF_ATTN, [1])])
    return BatchedPerturbationConfig([skip], blocks, "cuda", torch.bfloat16)


@pytest.mark.parametrize("quantization", ["none", "fp8-scaled-mm"])
def test_captured_block_loop_matches_eager(dit, quantization):
    model, inputs = dit
    bigger = ltx2.transformer_inputs(tokens=45, seed=3, device="cuda", dtype=torch.bfloat16)
    perturbed = (*inputs[:2], _skip_video_self_attention(3))
    calls = (inputs, inputs, bigger, perturbed, inputs, bigger)
    wants = [run(model, c) for c in calls]
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(compile__enabled=True, compile__capture=True,
                                   transformer__quantization=quantization), device="cuda")
    graphs = report.loop_graphs
    assert graphs is not None and "captured as one CUDA graph" in report.change("compile.enabled").detail
    bound = 2e-2 if quantization == "none" else 0.1
    outs = [run(ours, c) for c in calls]
    for i, (got, want) in enumerate(zip(outs, wants)):  # earlier outputs survive later replays
        assert rel(got[0], want[0]) < bound and rel(got[1], want[1]) < bound, i
    assert not torch.equal(outs[3][0], outs[0][0])  # the perturbed pass ran its own graph
    assert graphs.reason is None and len(graphs.graphs) == 3 and graphs.replays == len(calls)
    assert report.compile_health().compiled


def test_a_loop_a_graph_cannot_hold_runs_eagerly_with_the_reason(dit):
    from backends.runtime.block_graph import LoopGraphs

    model, inputs = dit
    want = run(model, inputs)
    ours = copy.deepcopy(model)
    loop = ours._process_transformer_blocks

    def syncing(video, audio, perturbations):
        float(video.x.sum())  # a host sync: not allowed while a stream is captured
        return loop(video, audio, perturbations)

    ours._process_transformer_blocks = graphs = LoopGraphs(ours, syncing)
    with pytest.warns(UserWarning, match="capture failed"):
        got = run(ours, inputs)
    assert graphs.reason and not graphs.graphs
    assert torch.cuda.current_stream() == torch.cuda.default_stream()  # the failed capture gave the stream back
    assert torch.equal(got[0], want[0]) and torch.equal(run(ours, inputs)[0], want[0])


def test_fp8_feedforward_gelu_fused_matches_unfused(dit):
    from backends.runtime import quant

    model, inputs = dit
    fused, unfused = copy.deepcopy(model), copy.deepcopy(model)
    report = apply_profile(fused, P(transformer__quantization="fp8-scaled-mm"), device="cuda")
    assert "the GELU of 6 FeedForward(s)" in report.change("transformer.quantization").detail
    quant.GeluQuantized.enabled = False
    try:
        apply_profile(unfused, P(transformer__quantization="fp8-scaled-mm"), device="cuda")
    finally:
        quant.GeluQuantized.enabled = True
    assert not any(isinstance(m, quant.GeluQuantized) for m in unfused.modules())
    got, want = run(fused, inputs), run(unfused, inputs)
    assert rel(got[0], want[0]) < 2e-2 and rel(got[1], want[1]) < 2e-2
