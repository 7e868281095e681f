"""The runtime on LTX-2's real modules on a CUDA device (-m gpu; ltx-core via LTX2_CORE_SRC).

Triton NA inside every DiffVAE layout (compiled ones included) against LTX-2's own
TritonNaAttention; the DiT with CUDA-graph compile, offload and FP8/INT8 linears against itself."""

import copy
import dataclasses

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


@pytest.mark.parametrize("blocks", ["compiled", "eager", "eager+fast_norm"])
@pytest.mark.parametrize("quantization", ["none", "fp8-scaled-mm"])
def test_captured_block_loop_matches_eager(dit, quantization, blocks):
    model, inputs = dit
    bigger = ltx2.transformer_inputs(tokens=45, seed=3, device="cuda", dtype=torch.bfloat16)
    perturbed = (*inputs[:2], _skip_video_self_attention(3))
    # a signature's first call runs the loop as it is, its second captures it, later ones replay;
    # `other` has the inputs' signature and other values: its replay must read them
    other = ltx2.transformer_inputs(tokens=37, seed=5, device="cuda", dtype=torch.bfloat16)
    calls = (inputs, inputs, other, bigger, perturbed, perturbed, inputs, bigger)
    wants = [run(model, c) for c in calls]
    ours = copy.deepcopy(model)
    compiled = blocks == "compiled"
    report = apply_profile(ours, P(compile__enabled=compiled, compile__capture=True, transformer__quantization=quantization,
                                   transformer__fast_norm=blocks.endswith("fast_norm")), device="cuda")
    graphs = report.loop_graphs
    detail = report.change("compile.enabled" if compiled else "compile.capture").detail
    assert graphs is not None and "one CUDA graph per input shape" in detail
    bound = 2e-2 if quantization == "none" else 0.1
    outs = [run(ours, c) for c in calls]
    for i, (got, want) in enumerate(zip(outs, wants)):  # earlier outputs survive later replays
        assert rel(got[0], want[0]) < bound and rel(got[1], want[1]) < bound, i
    assert not torch.equal(outs[5][0], outs[0][0])  # the perturbed pass ran its own graph
    assert rel(wants[2][0], wants[0][0]) > 0.2  # other values, other outputs: a stale replay would fail
    assert graphs.reason is None and len(graphs.graphs) == 3 and graphs.replays == 5
    assert all(g.graph is not None for g in graphs.graphs.values())
    # LTX-2's two prepare calls: the inputs' signature replayed from call 2 on (5 calls), bigger's at call 8
    assert [(p.replays, len(p.graphs), p.failed) for p in graphs.prepares] == [(6, 2, {}), (6, 2, {})]
    if compiled:
        assert report.compile_health().compiled


def _masked_batch(call):
    """(video, audio, perturbations), a batch of two for the `dit` model, whose masks' values depend on
    `call` (0 or 1) but never their shapes, dtypes or which attention branches they select. The masks
    LTX-2's block loop reads as tensors: each modality's text mask (`context_mask`, the additive bias
    the preprocessor makes of `Modality.context_mask`), the video self-attention mask
    (`self_attention_mask`, from `Modality.attention_mask`) and the perturbation keep-masks
    (`block_masks`, of which the blocks read per-sample slices). Of the perturbations, only what the
    block specialises on is in the signature (LTX-2's `graph_signature`: per block, whether some, all
    or none of the batch skips each attention), so each perturbed attention here skips one sample of
    two: swapping the samples between the calls keeps the signature and changes the mask values."""
    from ltx_core.guidance.perturbations import BatchedPerturbationConfig, Perturbation, PerturbationConfig, \
        PerturbationType as T

    samples = [ltx2.transformer_inputs(tokens=37, seed=s, device="cuda", dtype=torch.bfloat16) for s in (0, 1)]
    video, audio = (dataclasses.replace(m[0], **{f.name: torch.cat([getattr(x, f.name) for x in m])
                                                  for f in dataclasses.fields(m[0])
                                                  if isinstance(getattr(m[0], f.name), torch.Tensor)})
                    for m in ([s[0] for s in samples], [s[1] for s in samples]))

    def text_mask(lengths):  # 1: a text token attended, 0: padding; every sample keeps some
        return (torch.arange(7, device="cuda")[None] < torch.tensor(lengths, device="cuda")[:, None]).long()

    g = torch.Generator().manual_seed(10 + call)
    attention = torch.rand(2, 37, 37, generator=g)
    attention[attention < 0.8] = 0  # most pairs not attended (fewer barely move this model), the rest attenuated
    attention.diagonal(dim1=1, dim2=2).fill_(1)  # no query left without a key
    video = dataclasses.replace(video, context_mask=text_mask([(7, 3), (4, 6)][call]),
                                attention_mask=attention.to("cuda"))
    audio = dataclasses.replace(audio, context_mask=text_mask([(2, 6), (5, 1)][call]))
    one = PerturbationConfig([Perturbation(T.SKIP_VIDEO_SELF_ATTN, [1]), Perturbation(T.SKIP_A2V_CROSS_ATTN, [2])])
    other = PerturbationConfig([Perturbation(T.SKIP_AUDIO_SELF_ATTN, [0]), Perturbation(T.SKIP_V2A_CROSS_ATTN, [1])])
    per_sample = [one, other] if call == 0 else [other, one]
    return video, audio, BatchedPerturbationConfig(per_sample, 3, "cuda", torch.bfloat16)


def test_a_replayed_block_loop_reads_each_calls_masks(dit):
    """Calls of one signature whose masks differ only in value: the first runs the loop as it is, the
    second captures it with its own masks, the third replays that graph with the first call's masks
    and matches eager on them: the graph reads the masks from the static buffers each call fills,
    not as they were at the capture."""
    model = dit[0]
    batches = [_masked_batch(0), _masked_batch(1)]
    wants = [run(model, c) for c in batches]
    for i in (0, 1):  # each call's masks matter well beyond the tolerance: a replay of stale ones would fail
        assert rel(wants[1][i], wants[0][i]) > 0.2, i
    ours = copy.deepcopy(model)
    graphs = apply_profile(ours, P(compile__enabled=True, compile__capture=True), device="cuda").loop_graphs
    assert graphs is not None
    outs = [run(ours, batches[0])]
    assert len(graphs.graphs) == 1 and graphs.replays == 0
    with pytest.warns(UserWarning, match="prepare runs without a CUDA graph"):  # the video's self-attention
        outs.append(run(ours, batches[1]))  # mask: LTX-2 asks the host whether any pair is attended
    assert graphs.replays == 1
    video, audio = graphs.prepares
    assert len(video.failed) == 1 and not video.graphs and not audio.failed and audio.replays == 1
    captured = next(iter(graphs.graphs.values())).graph
    outs.append(run(ours, batches[0]))
    assert graphs.reason is None and graphs.replays == 2
    assert len(graphs.graphs) == 1 and next(iter(graphs.graphs.values())).graph is captured  # no new capture
    for i, (got, want) in enumerate(zip(outs, wants + wants[:1])):
        assert rel(got[0], want[0]) < 2e-2 and rel(got[1], want[1]) < 2e-2, i


def test_captured_prepare_reads_each_calls_values(dit):
    """LTX-2's prepare captured (its second call of a signature) and replayed on other latents, timesteps,
    text and positions gives what LTX-2's eager prepare gives on them, the RoPE tables from its frequency
    grid on the device included."""
    from backends.runtime.prepare_graph import capture_prepare

    model, inputs = dit
    ours = copy.deepcopy(model)
    prepares = capture_prepare(ours)
    other = ltx2.transformer_inputs(tokens=37, seed=5, device="cuda", dtype=torch.bfloat16)
    moved = tuple(dataclasses.replace(m, positions=m.positions + 3) for m in other[:2])
    calls = (inputs[:2], inputs[:2], other[:2], moved, inputs[:2])
    for i, (video, audio) in enumerate(calls):
        with torch.inference_mode():
            want = [model.video_args_preprocessor.prepare(video, audio), model.audio_args_preprocessor.prepare(audio, video)]
            got = [ours.video_args_preprocessor.prepare(video, audio), ours.audio_args_preprocessor.prepare(audio, video)]
        for w, g in zip(want, got):
            for f in dataclasses.fields(w):
                a, b = getattr(g, f.name), getattr(w, f.name)
                for x, y in zip(a, b) if isinstance(b, tuple) else ((a, b),):
                    assert rel(x, y) < 1e-2 if isinstance(y, torch.Tensor) else x == y, (i, f.name)
    assert rel(calls[3][0].positions, calls[2][0].positions) > 0  # the RoPE tables had other positions to read
    assert [(p.replays, p.failed) for p in prepares] == [(4, {}), (4, {})]


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
    first = run(ours, inputs)  # a signature's first call runs the loop as it is; its second captures
    assert graphs.reason is None and len(graphs.graphs) == 1
    with pytest.warns(UserWarning, match="capture failed"):
        got = run(ours, inputs)
    assert graphs.reason and not graphs.graphs and torch.equal(first[0], want[0])
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


def test_fast_norm_kernels_run_in_the_eager_dit_and_match_ltx2s_norms(dit):
    from backends.runtime import fast_norm

    model, inputs = dit
    want = run(model, inputs)
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(transformer__fast_norm=True), device="cuda")
    assert report.change("transformer.fast_norm").action == "installed"
    got = run(ours, inputs)
    runs, own = fast_norm.counts(ours)
    assert runs > 0 and own == 0  # bf16 blocks on CUDA take the kernels, never the fallback
    assert rel(got[0], want[0]) < 2e-2 and rel(got[1], want[1]) < 2e-2  # fp32 inside, one rounding: not bit-equal
