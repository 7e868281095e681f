"""The runtime on LTX-2 v1.2.0's real modules (CPU, fp32, random weights, AdaLN tables given weight).

Each comparison is against LTX-2's own callables on the same model: its EagerSdpaAttention and
NattenAttention in the DiffVAE decoder's layouts, its PytorchAttention in the DiT (both slots,
the masked one exercised by a text mask), its own fp8-cast. Needs ltx-core: set LTX2_CORE_SRC
to the src/ folder of ltx-core v1.2.0 (`.ci/run` does); without it these tests skip and say so.
"""

import copy
import dataclasses
import json
import logging

import pytest
import torch

from backends.config.options import Profile
from backends.machine.capability import probe
from backends.runtime import ltx2
from backends.runtime.apply import apply_profile

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


@pytest.fixture(scope="module")
def cap():
    return probe()


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def decode(decoder, latent):
    with torch.inference_mode():
        return decoder(latent, generator=torch.Generator().manual_seed(1))


def ltx2_na(decoder, mode, callable_):
    """LTX-2's own layout for `mode` (its apply_diffvae_config) with its own NA callable."""
    from ltx_core.model.video_vae.transformer.apply import apply_diffvae_config
    from ltx_core.model.video_vae.transformer.config import DiffVAEMode, NAttentionKind

    if mode is not None:
        apply_diffvae_config(decoder, dataclasses.replace(DiffVAEMode(mode).resolve(),
                                                          attention=NAttentionKind.EAGER_SDPA, natten_backend=None))
    for m in decoder.modules():
        if type(m).__name__ == "NeighborhoodAttention3D":
            m.attention_function = callable_
    return decoder


@pytest.fixture(scope="module")
def decoder():
    return ltx2.tiny_decoder()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["chunked_eager", None])  # None: the combined layout the decoder is built with
def test_decoder_eager_sdpa_matches_ltx2s_eager_sdpa(decoder, cap, mode, monkeypatch):
    """ltx-tui's NA (and, chunked, its fused stage-5 MLP) give LTX-2's decode."""
    from backends.runtime import diffvae_mlp
    from ltx_core.model.video_vae.transformer.fallback_na import EagerSdpaAttention

    from kernels import qk_norm_rope

    mlps, dets = [], []
    monkeypatch.setattr(diffvae_mlp, "swiglu_residual_", (lambda f: lambda *a, **k: mlps.append(1) or f(*a, **k))(
        diffvae_mlp.swiglu_residual_))
    for name in ("qk_norm_rope_split_torch", "qk_norm_rope_split_triton"):
        monkeypatch.setattr(qk_norm_rope, name, (lambda f: lambda *a, **k: dets.append(1) or f(*a, **k))(
            getattr(qk_norm_rope, name)))
    latent = ltx2.decoder_latent(decoder, 2, 3, 5)
    want = decode(ltx2_na(copy.deepcopy(decoder), mode, EagerSdpaAttention()), latent)
    assert not dets, "LTX-2's own decoder ran ltx-tui's det-stage q/k step"
    ours = copy.deepcopy(decoder)
    profile = P(diffvae__na_backend="eager_sdpa", **({"diffvae__mode": mode} if mode else {}))
    report = apply_profile(ours, profile, cap)
    assert len(report.change("diffvae.na_backend").modules) == 6
    if mode is None:  # ltx-tui's own default mode lays the decoder out chunked: undo for this comparison
        ours = ltx2_na(copy.deepcopy(decoder), None, ours.det_stages[0][0].attn.attention_function)
    got = decode(ours, latent)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(mlps) == (2 * len(ours.diff_blocks) if mode else 0)  # 2 steps a decode
    det_na = sum(type(m).__name__ == "NeighborhoodAttention3D" for m in ours.det_stages.modules())
    assert len(dets) == (det_na if mode else 0), "the det stages' NA did not run ltx-tui's fused q/k step"
    # the q-prescaled protocol matters: the kernel's default scale would be far off
    assert (got - decode(ltx2_na(copy.deepcopy(decoder), mode, _default_scale), latent)).abs().max() > 1e-2


def _default_scale(attn, q, k, v):
    from backends.runtime.attention import na3d

    return na3d(q, k, v, attn.kernel_size, backend="eager_sdpa")  # scale head_dim ** -0.5 on a pre-scaled q


@pytest.mark.slow
def test_decoder_natten_matches_ltx2s_natten_attention(decoder, cap):
    pytest.importorskip("natten")
    from ltx_core.model.video_vae.transformer.attention import NattenAttention

    latent = ltx2.decoder_latent(decoder, 2, 3, 3)
    want = decode(ltx2_na(copy.deepcopy(decoder), None, NattenAttention("flex-fna")), latent)
    ours = copy.deepcopy(decoder)
    apply_profile(ours, P(diffvae__na_backend="natten", diffvae__natten_kernel="flex-fna"), cap)
    function = ours.det_stages[0][0].attn.attention_function
    assert repr(function) == "NAFunction('natten:flex-fna')"
    torch.testing.assert_close(decode(ltx2_na(copy.deepcopy(decoder), None, function), latent), want,
                               atol=1e-5, rtol=1e-5)


def test_decoder_report_says_what_applies_to_a_decoder(decoder, cap):
    ours = copy.deepcopy(decoder)
    report = apply_profile(ours, P(diffvae__na_backend="eager_sdpa", transformer__quantization="fp8-cast",
                                   compile__enabled=True, compile__backend="aot_eager"), cap)
    assert report.change("diffvae.mode").action == "laid out"
    from ltx_core.model.video_vae.transformer.chunked.block import ChunkedDiffusionNABlock
    assert all(type(b) is ChunkedDiffusionNABlock for b in ours.diff_blocks)
    assert report.change("transformer.quantization").action == "no target"
    assert report.change("compile.enabled").action == "no target"


def test_decoder_refuses_a_training_forward(decoder, cap):
    ours = copy.deepcopy(decoder)
    apply_profile(ours, P(diffvae__na_backend="eager_sdpa"), cap)
    with pytest.raises(RuntimeError, match="inference only"):
        ours(ltx2.decoder_latent(decoder, 2, 3, 3), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def dit():
    return ltx2.tiny_transformer(layers=2), ltx2.transformer_inputs(tokens=23)


def forward(model, inputs):
    with torch.inference_mode():
        return model(*inputs)


@pytest.mark.parametrize("attention", ["automatic", "pytorch", "sdpa_math"])
def test_dit_attention_matches_ltx2s_pytorch_attention(dit, cap, attention):
    model, inputs = dit
    want = forward(model, inputs)  # the model as built: LTX-2's own PytorchAttention in both slots
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(transformer__attention=attention), cap)
    names = report.change("transformer.attention").modules
    assert len(names) == 2 * 6  # attn1, attn2, audio_attn1, audio_attn2, a2v, v2a per block
    for name in names:
        module = ours.get_submodule(name)
        assert type(module.attention_function).__name__ == "DenseFunction"
        assert module.masked_attention_function is module.attention_function
    got = forward(ours, inputs)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_dit_fp8_cast_takes_ltx2s_linears_with_comparable_error(dit, cap):
    from ltx_core.quantization import fp8_cast

    model, inputs = dit
    want = forward(model, inputs)
    theirs = copy.deepcopy(model)
    floats = {n: (m.weight.detach().clone(), m.bias.detach().clone()) for n, m in theirs.named_modules()
              if isinstance(m, torch.nn.Linear)}
    fp8_cast.UPCAST_DURING_INFERENCE.mutator(theirs)  # retypes LTX-2's fp8-cast linears (weights from a checkpoint)
    their_names = sorted(n for n, m in theirs.named_modules() if isinstance(m, fp8_cast.Fp8CastLinear))
    with torch.no_grad():
        for n in their_names:  # what LTX-2's loader does: the checkpoint's weights cast to float8_e4m3fn
            m = theirs.get_submodule(n)
            m.weight.copy_(floats[n][0].to(torch.float8_e4m3fn))
            m.bias.copy_(floats[n][1].to(torch.float8_e4m3fn))
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(transformer__quantization="fp8-cast"), cap)
    assert sorted(report.change("transformer.quantization").modules) == their_names
    assert type(ours.patchify_proj) is torch.nn.Linear and type(ours.proj_out) is torch.nn.Linear
    their_err = max((a - b).abs().max().item() for a, b in zip(forward(theirs, inputs), want))
    our_err = max((a - b).abs().max().item() for a, b in zip(forward(ours, inputs), want))
    # per-channel scales (ours) vs a plain cast (LTX-2's): both round to 3 mantissa bits
    assert 0 < our_err <= 2 * their_err and 0 < their_err <= 2 * our_err, (our_err, their_err)


@pytest.mark.slow
def test_dit_compile_per_real_block(dit, cap):
    model, inputs = dit
    want = forward(model, inputs)
    ours = copy.deepcopy(model)
    report = apply_profile(ours, P(compile__enabled=True, compile__backend="aot_eager"), cap)
    assert report.change("compile.enabled").modules == ("transformer_blocks.0", "transformer_blocks.1")
    assert "passed as one AdaLN row" in report.change("compile.enabled").detail  # runtime.timestep_rows
    seen = []  # the blocks run under LTX-2's recompile limit, not Dynamo's 8
    ours.transformer_blocks[0].register_forward_pre_hook(lambda m, a: seen.append(torch._dynamo.config.recompile_limit))
    torch.testing.assert_close(forward(ours, inputs), want, atol=1e-5, rtol=1e-5)
    assert seen == [256]


@pytest.mark.slow
def test_smoke_checks_run_ltx2s_real_modules(tmp_path, capsys):
    from ltx_tui.cli import main

    path = tmp_path / "p.toml"
    path.write_text('[diffvae]\nna_backend = "eager_sdpa"\n[transformer]\nquantization = "fp8-cast"\n')
    main(["--check", "--json", "--smoke", "--profile", str(path)])
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["smoke"]}
    assert all(r["status"] == "pass" for r in rows.values()), rows
    assert "LTX-2 DiffusionVideoDecoder" in rows["na3d eager_sdpa"]["message"]
    assert "LTX-2 LTXModel" in rows["linear fp8-cast"]["message"]


@pytest.mark.slow
def test_chunked_compile_compiles_ltx2s_slab_bodies_det_stages_and_inject(decoder, cap, monkeypatch, caplog,
                                                                           request):
    """ltx-tui's chunked_compile: the decode matches LTX-2's chunked layout, run eagerly; the slab
    bodies (ltx-tui's, with the fused q/k norm + RoPE kernel), det stages and inject ran compiled,
    the stage-5 MLPs as ltx-tui's fused op,
    none left eager by Dynamo's recompile limit; LTX-2's own decoder in the same process does not."""
    from torch._dynamo.utils import counters

    from backends.runtime import diffvae_mlp
    from kernels import qk_norm_rope
    from ltx_core.model.video_vae.transformer.fallback_na import EagerSdpaAttention

    from backends.runtime import diffvae_inject, diffvae_slab

    def counted(f, calls):
        return lambda *a, **k: calls.append(1) or f(*a, **k)

    fused, mlps, dets, steps, adds, injects = [], [], [], [], [], []
    for name, calls in (("qk_norm_rope_torch", fused), ("qk_norm_rope_triton", fused),
                        ("qk_norm_rope_split_torch", dets), ("qk_norm_rope_split_triton", dets)):
        monkeypatch.setattr(qk_norm_rope, name, counted(getattr(qk_norm_rope, name), calls))
    monkeypatch.setattr(diffvae_mlp, "swiglu_residual_", counted(diffvae_mlp.swiglu_residual_, mlps))
    slab_parts, inject_add = diffvae_slab._compiled(), diffvae_inject._compiled()  # compiled, counted
    monkeypatch.setattr(diffvae_slab, "_compiled",
                        lambda: (counted(slab_parts[0], steps), counted(slab_parts[1], adds)))
    monkeypatch.setattr(diffvae_inject, "_compiled", lambda: counted(inject_add, injects))
    # the tiny decoder's 4 det blocks share one code object: with a limit of 2, blocks past it ran eager
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    dynamo_log = logging.getLogger("torch._dynamo.convert_frame")  # torch's loggers do not propagate
    dynamo_log.addHandler(caplog.handler)
    request.addfinalizer(lambda: dynamo_log.removeHandler(caplog.handler))
    latent = ltx2.decoder_latent(decoder, 2, 3, 4)
    ours = copy.deepcopy(decoder)
    report = apply_profile(ours, P(diffvae__mode="chunked_compile", diffvae__na_backend="eager_sdpa"), cap)
    assert "blocks compiled" in report.change("diffvae.mode").detail
    assert not ours.mark_dynamic_shapes
    assert all(hasattr(b.forward, "_torchdynamo_orig_callable") for stage in ours.det_stages for b in stage)
    assert all(b.context_proj.weight.ltx_tui_compiled for b in ours.diff_blocks)
    counters.clear()
    got = decode(ours, latent)
    frames = counters["stats"]["calls_captured"]
    graphs = set(counters["stats"]) and counters["stats"]["unique_graphs"]
    assert graphs >= 3, dict(counters["stats"])  # at least slab body, det block, inject
    assert fused, "the slab bodies did not run ltx-tui's fused q/k norm + RoPE"
    assert len(mlps) == 2 * len(ours.diff_blocks), "the stage-5 blocks did not run ltx-tui's fused MLP"
    slabs = 2 * len(ours.diff_blocks) * ours.diff_blocks[0].attn.w_chunks  # 2 steps a decode
    assert len(steps) == len(adds) == slabs, "the stage-5 blocks did not run ltx-tui's slab loop"
    assert len(injects) == slabs, "the stage-4 inject did not add inside ltx-tui's compiled region"
    det_na = sum(type(m).__name__ == "NeighborhoodAttention3D" for m in ours.det_stages.modules())
    assert len(dets) == det_na, "the compiled det stages did not run ltx-tui's fused q/k step"
    assert "recompile_limit" not in caplog.text
    theirs = ltx2_na(copy.deepcopy(decoder), "chunked_eager", EagerSdpaAttention())
    counters.clear()
    ran = len(mlps)
    want = decode(theirs, latent)
    assert counters["stats"]["unique_graphs"] == 0, "LTX-2's own chunked_eager decoder was compiled"
    assert len(mlps) == ran, "LTX-2's own chunked_eager decoder ran ltx-tui's MLP"
    assert len(dets) == det_na and len(steps) == len(injects) == slabs, "LTX-2's own decoder ran ltx-tui's parts"
    assert (got - want).abs().max() < 1e-4 and frames


@pytest.mark.parametrize("w,w_chunks,halo,want", [
    (192, 4, 3, [(0, 48), (48, 48), (96, 48), (144, 48)]),
    (10, 4, 1, [(0, 3), (3, 3), (6, 3), (9, 1)]),
    (5, 1, 3, [(0, 5)]),
    (13, 4, 3, None),  # the last slab (1 column) is narrower than the halo: LTX-2 pads it apart
    (3, 4, 1, None),  # an empty slab
    (4, 3, 0, None),  # an empty slab without halos (its buffer is zeros in LTX-2's loop)
])
def test_w_slabs_says_where_ltx2s_buffers_are_clamped_gathers(w, w_chunks, halo, want):
    from backends.runtime.diffvae_slab import w_slabs

    assert w_slabs(w, w_chunks, halo) == want


@pytest.mark.parametrize("w,w_chunks,kw", [
    (8, 4, 3), (10, 4, 3),  # halo 1; the last slab 1 column
    (12, 4, 5), (8, 1, 5),  # halo 2; one slab, both edges replicated
    (3, 4, 3), (10, 4, 5),  # LTX-2's loop: an empty slab; the last slab narrower than the halo
])
def test_slab_residual_matches_ltx2s_w_chunked_loop(decoder, w, w_chunks, kw, monkeypatch):
    """ltx-tui's W-slab loop (gathered slab inputs, each core added after the next slab's body has
    read its halo) against LTX-2's `_run_w_chunked_residual`, with the same body, in place on x;
    compile left out (the loop is what is tested)."""
    from ltx_core.model.video_vae.transformer.chunked import attn as chunked

    from backends.runtime import diffvae_slab
    from backends.runtime.attention import NAFunction

    monkeypatch.setattr(diffvae_slab, "_compiled", lambda: (diffvae_slab._slab_step, diffvae_slab._add))
    block = copy.deepcopy(decoder.diff_blocks[0])
    block.attn.kernel_size = (*block.attn.kernel_size[:2], kw)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(1, 3, 4, w, block.attn.dim, generator=g)
    scale, shift = (torch.randn(1, 1, 1, 1, block.attn.dim, generator=g) * 0.1 for _ in range(2))
    packed = chunked._pack_residual_weights(block.attn, block.norm1, x)
    fn = NAFunction("eager_sdpa")

    def body(buf, w_pos, scale_, shift_, *rest):
        return diffvae_slab.slab_attention(fn, block.attn, buf, w_pos, scale_, shift_, *rest)

    halo = block.attn.kernel_size[2] // 2
    want, got = x.clone(), x.clone()
    with torch.inference_mode(), chunked._bound_chunked_attention(fn, block.attn):
        chunked._run_w_chunked_residual(want, scale, shift, packed, w_chunks, halo, body)
        assert diffvae_slab.slab_residual(got, scale, shift, packed, w_chunks, halo, body) is got
    assert (want - x).abs().max() > 1e-3  # the residual did change x
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("w_chunks", [4, 1])
def test_inject_context_matches_ltx2s_deferred_inject(decoder, w_chunks, monkeypatch):
    """ltx-tui's stage-4 inject (each W slab's context added inside its compiled region) against
    LTX-2's `deferred`, in place on x; compile left out (the slabs and adds are what is tested)."""
    from ltx_core.model.video_vae.transformer.chunked.context import deferred
    from ltx_core.model.video_vae.transformer.fallback_na import EagerSdpaAttention

    from backends.runtime import diffvae_inject

    monkeypatch.setattr(diffvae_inject, "_compiled", lambda: diffvae_inject._add_context)
    block = ltx2_na(copy.deepcopy(decoder), "chunked_eager", EagerSdpaAttention()).diff_blocks[0]
    up = block.stage4_upsample
    stride = tuple(up.stride)
    g = torch.Generator().manual_seed(9)
    feat = torch.randn(1, 2, 3, 8, up.proj.in_features, generator=g)
    x = torch.randn(1, 2 * stride[0] - 1, 3 * stride[1], 8 * stride[2], block.context_proj.out_features, generator=g)
    want, got = x.clone(), x.clone()
    with torch.inference_mode():
        deferred(want, feat, up.proj, block.context_proj, stride, w_chunks=w_chunks, drop_leading_frame=True)
        assert diffvae_inject.inject_context(got, feat, up.proj, block.context_proj, stride, w_chunks=w_chunks,
                                             drop_leading_frame=True) is got
    assert (want - x).abs().max() > 1e-3
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("rope_bf16", [False, True])
def test_det_qkv_rope_matches_ltx2s_det_step(decoder, rope_bf16, monkeypatch):
    """ltx-tui's det-stage q/k step (LTX-2's projections, then norms, scale and RoPE in one kernel)
    against LTX-2's `det_qkv_rope` on a det NA module; called eagerly it skips the custom op's
    dispatch; a module set to bf16 RoPE gets LTX-2's own step, exactly."""
    from ltx_core.model.video_vae.transformer.det_attn_rope import det_qkv_rope as ltx2_step

    from backends.runtime import diffvae_det

    monkeypatch.setattr(diffvae_det, "_qk_norm_rope_split_op", None)  # an eager call must not reach it
    attn = copy.deepcopy(decoder.det_stages[1][0].attn)
    if rope_bf16:
        attn.rope_compute_dtype = torch.bfloat16
    x = torch.randn(1, 3, 4, 9, attn.dim, generator=torch.Generator().manual_seed(6))
    with torch.inference_mode():
        want = ltx2_step(attn, x)
        got = diffvae_det.det_qkv_rope(attn, x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.is_contiguous()
        if rope_bf16:
            assert torch.equal(g, w)
        else:
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("change", ["k_eps", "no_weight"])
def test_det_qkv_rope_keeps_ltx2s_step_where_its_kernel_would_differ(decoder, change, monkeypatch):
    """Norms of different eps, or without a weight: LTX-2's own det step runs, exactly."""
    from ltx_core.model.video_vae.transformer.det_attn_rope import det_qkv_rope as ltx2_step

    from backends.runtime import diffvae_det

    monkeypatch.setattr(diffvae_det, "qk_norm_rope_split", None)  # the kernel must not be reached
    attn = copy.deepcopy(decoder.det_stages[1][0].attn)
    if change == "k_eps":
        attn.k_norm.eps = 1e-5
    else:
        attn.q_norm = torch.nn.RMSNorm(attn.head_dim, eps=1e-6, elementwise_affine=False)
    x = torch.randn(1, 3, 4, 9, attn.dim, generator=torch.Generator().manual_seed(6))
    assert not diffvae_det.fusable(attn)
    with torch.inference_mode():
        for g, w in zip(diffvae_det.det_qkv_rope(attn, x), ltx2_step(attn, x)):
            assert torch.equal(g, w)


@pytest.mark.parametrize("rope_bf16", [False, True])
def test_slab_attention_matches_ltx2s_slab_body(decoder, rope_bf16, monkeypatch):
    """ltx-tui's W-slab body (one QKV projection, fused q/k norm + RoPE) against LTX-2's own, on
    the same packed arguments of a stage-5 block, for a slab whose W columns start inside the volume.
    Called eagerly, it runs the fused kernel without the custom op's dispatch (kept for compile)."""
    from ltx_core.model.video_vae.transformer.chunked import attn as chunked

    from backends.runtime import diffvae_slab
    from backends.runtime.attention import NAFunction
    from backends.runtime.diffvae_slab import slab_attention

    monkeypatch.setattr(diffvae_slab, "_qk_norm_rope_op", None)  # an eager call must not reach it

    block = decoder.diff_blocks[0]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 3, 4, 6, block.attn.dim, generator=g)
    scale, shift = (torch.randn(1, 1, 1, 1, block.attn.dim, generator=g) * 0.1 for _ in range(2))
    w_pos = torch.arange(6, dtype=torch.float32) + 5
    packed = list(chunked._pack_residual_weights(block.attn, block.norm1, x))
    packed[-1] = rope_bf16
    fn = NAFunction("eager_sdpa")
    with torch.inference_mode():
        want = chunked._attn_on_chunk_impl(fn, block.attn, x, w_pos, scale, shift, *packed)
        got = slab_attention(fn, block.attn, x, w_pos, scale, shift, *packed)
    assert got.shape == want.shape
    # LTX-2's bf16 RoPE option rounds its angles' cos/sin; ltx-tui's stays in fp32
    torch.testing.assert_close(got, want, atol=2e-2 if rope_bf16 else 1e-5, rtol=1e-2 if rope_bf16 else 1e-5)


@pytest.mark.slow
def test_a_graph_inductor_cannot_build_runs_eagerly_and_says_so(decoder, cap, monkeypatch, caplog, request):
    """Inductor failing to build a graph (seen once on the H200: a SyntaxError in its generated
    code) must not end the decode nor change it: that graph runs eagerly, Dynamo's log says why."""
    import torch._inductor.compile_fx as compile_fx
    from ltx_core.model.video_vae.transformer.fallback_na import EagerSdpaAttention

    def broken(*args, **kwargs):
        raise RuntimeError("Failed to import /tmp/x.py: SyntaxError: unterminated string literal")

    dynamo_log = logging.getLogger("torch._dynamo")  # torch's loggers do not propagate
    dynamo_log.addHandler(caplog.handler)
    request.addfinalizer(lambda: dynamo_log.removeHandler(caplog.handler))
    latent = ltx2.decoder_latent(decoder, 2, 3, 6)  # a shape no other test compiled
    ours = copy.deepcopy(decoder)
    apply_profile(ours, P(diffvae__mode="chunked_compile", diffvae__na_backend="eager_sdpa"), cap)
    monkeypatch.setattr(compile_fx, "compile_fx", broken)
    got = decode(ours, latent)
    want = decode(ltx2_na(copy.deepcopy(decoder), "chunked_eager", EagerSdpaAttention()), latent)
    assert (got - want).abs().max() < 1e-4
    assert "unterminated string literal" in caplog.text
