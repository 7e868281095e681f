"""`kernels.lt_ff` and `runtime.fused_ff`: LTX-2's FeedForward in two fp8 GEMMs, its input rows
written by the AdaLN norm by one bounded scale, its gated residual in the second GEMM. On the CPU
`feed_forward` runs its torch form (the same e4m3 operands, the bias in W2's extra columns); the
cuBLASLt calls run in tests/test_runtime_gpu.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backends.runtime import fused_ff, ltx2
from kernels import adaln, lt_ff

OPS = torch.ops.ltx_tui
D, H = 64, 256


def _weights(seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(H, D, generator=g) * 0.05 * (1 + torch.rand(H, 1, generator=g))
    w2 = torch.randn(D, H, generator=g) * 0.03 * (1 + torch.rand(D, 1, generator=g))
    b1, b2 = (torch.randn(n, generator=g) * 0.1 if bias else None for n in (H, D))
    return w1, b1, w2, b2


def _adaln_rows(t, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, t, D, generator=g) * 2
    scale, shift = torch.randn(1, 1, D, generator=g) * 0.3, torch.randn(1, 1, D, generator=g) * 0.2
    y = adaln.ada_zero_torch(x, 1e-6, scale, shift).reshape(t, D)
    s, norm = adaln.bound_scale(scale, shift, D)
    return y, (y / s).to(lt_ff.E4M3), s.expand(t).contiguous(), norm


def _ff(x, w1, b1, w2, b2):
    return F.gelu(x @ w1.t() + (0 if b1 is None else b1), approximate="tanh") @ w2.t() + (0 if b2 is None else b2)


@pytest.mark.parametrize("bias", [True, False])
def test_the_feed_forward_is_its_definition_to_fp8_error(bias):
    w1, b1, w2, b2 = _weights(bias=bias)
    w = lt_ff.prepare(w1, b1, w2, b2, torch.float32)
    y, q, xs, norm = _adaln_rows(96)
    gate = torch.rand(D) + 0.5
    resid = torch.randn(96, D)
    want = _ff(y, w1, b1, w2, b2)
    got = lt_ff.feed_forward(q, xs, norm, w)
    assert got.shape == (96, D) and ((got - want).norm() / want.norm()) < 0.06
    summed = lt_ff.feed_forward(q, xs, norm, w, resid.view(1, 96, D), gate.view(1, 1, D))
    assert summed.shape == (1, 96, D)
    torch.testing.assert_close(summed[0], resid + gate * got, rtol=1e-5, atol=1e-5)


def test_the_bias_rides_in_w2s_extra_columns():
    """x = 0 leaves the bias terms alone: gelu(b1) through W2, then b2 from the two extra K columns
    (c exactly in h, b2 / (c * channel scale) as an e4m3 pair in W2) to about e4m3's error of gelu(b1)."""
    w1, b1, w2, b2 = _weights()
    b2 = b2 * 40  # a bias far above W2's channels: their scales grow to hold it, c stays
    w = lt_ff.prepare(w1, b1, w2, b2, torch.float32)
    assert float(w.c) == lt_ff.C and w.w2.shape == (D, H + lt_ff.EXTRA)
    assert not w.w2[:, H + 2:].float().any()
    _, q, xs, norm = _adaln_rows(8)
    got = lt_ff.feed_forward(torch.zeros_like(q), xs, norm, w)
    want = F.gelu(b1, approximate="tanh") @ w2.t() + b2
    assert ((got[0] - want).norm() / want.norm()) < 2e-3
    only_b2 = lt_ff.prepare(torch.zeros_like(w1), None, w2, b2, torch.float32)
    torch.testing.assert_close(lt_ff.feed_forward(torch.zeros_like(q), xs, norm, only_b2)[0], b2, rtol=2**-6, atol=0)


def test_a_channel_of_zero_weights_keeps_the_others():
    """A W2 row of zeros with a bias (before: its scale floored at 1e-12 made c ~2**38, FF1's bound with
    it, and every GELU value rounded to zero: rel error 0.998)."""
    w1, b1, w2, b2 = _weights()
    w2[5] = 0
    w = lt_ff.prepare(w1, b1, w2, b2, torch.float32)
    y, q, xs, norm = _adaln_rows(96)
    want = _ff(y, w1, b1, w2, b2)
    got = lt_ff.feed_forward(q, xs, norm, w)
    assert ((got - want).norm() / want.norm()) < 0.06
    torch.testing.assert_close(got[:, 5], torch.full((96,), float(b2[5])), rtol=2**-5, atol=0)


def test_arguments_are_checked_up_front():
    w1, b1, w2, b2 = _weights()
    w = lt_ff.prepare(w1, b1, w2, b2, torch.bfloat16)
    _, q, xs, norm = _adaln_rows(8)
    with pytest.raises(ValueError, match=r"x must be contiguous \(tokens, 64\) float8_e4m3fn"):
        lt_ff.feed_forward(q.float(), xs, norm, w)
    with pytest.raises(ValueError, match="the residual must be contiguous, 8 rows of 64 in torch.bfloat16"):
        lt_ff.feed_forward(q, xs, norm, w, torch.zeros(8, D))
    with pytest.raises(ValueError, match="the gate must be one row of 64 values"):
        lt_ff.feed_forward(q, xs, norm, w, torch.zeros(8, D, dtype=torch.bfloat16), torch.ones(8, D))
    with pytest.raises(ValueError, match="the gate must be one row of 64 values"):  # 64 values, one per token
        lt_ff.feed_forward(q, xs, norm, w, None, torch.ones(1, D, 1))
    with pytest.raises(ValueError, match="the activations' dtype must be bfloat16, float16"):
        lt_ff.prepare(w1, b1, w2, b2, torch.int8)
    with pytest.raises(ValueError, match=r"W2 must be \(64, 256\)"):
        lt_ff.prepare(w1, b1, w2.t(), b2, torch.bfloat16)
    assert lt_ff.available() is not None  # no CUDA here: the torch form runs


def _block_tail(x, y, gate_a, scale, shift, gate_ff, *weights):
    """As a compiled LTX-2 block's end: vx + a2v * gate, the FF's AdaLN of it, the FeedForward's
    one-scale rows, and vx + ff * gate."""
    vx = x + y * gate_a
    n = OPS.ada_zero(vx, 1e-6, scale, shift)
    q, s, norm = OPS.fp8_tensor_rows(n.view(-1, D))
    ff = OPS.ff_fp8(q, s, norm, *weights, None, None).view(vx.shape)
    return vx + ff * gate_ff


def _tail_inputs():
    g = torch.Generator().manual_seed(3)
    x, y = (torch.randn(1, 12, D, generator=g) for _ in range(2))
    mods = [torch.randn(1, 1, D, generator=g) * 0.3 for _ in range(4)]
    return (x, y, *mods, *lt_ff.prepare(*_weights(), torch.float32))


def test_the_pass_folds_the_rows_into_the_norm_and_the_residual_into_ff2():
    from test_fast_norm import _graph, _targets

    args = _tail_inputs()
    gm = _graph(_block_tail, *args)
    targets = _targets(gm)
    assert targets.count(OPS.add_ada_zero_rows.default) == 1 and OPS.ada_bound.default in targets
    assert targets.count(OPS.ff_fp8.default) == 1
    assert not {OPS.fp8_tensor_rows.default, OPS.ada_zero.default} & set(targets)
    assert not {"aten.add.Tensor", "aten.mul.Tensor"} & set(map(str, targets))
    (node,) = [n for n in gm.graph.nodes if n.target is OPS.ff_fp8.default]
    assert node.args[11] is not None and node.args[12] is not None  # the residual and the gate
    got, want = gm(*args), _block_tail(*args)
    assert ((got - want).norm() / want.norm()) < 0.02  # fp8 rows by the bound's scale against the amax's


def test_a_gate_per_token_keeps_the_residual_apart():
    from test_fast_norm import _graph, _targets

    x, y, ga, sc, sh, gf, *w = _tail_inputs()
    gm = _graph(_block_tail, x, y, ga, sc, sh, gf.expand(1, 12, D).contiguous() * 1.5, *w)
    (node,) = [n for n in gm.graph.nodes if n.target is OPS.ff_fp8.default]
    assert node.args[11:] == (None, None) and "aten.add.Tensor" in map(str, _targets(gm))
    assert OPS.ada_bound.default in _targets(gm)  # the rows are the norm's all the same


def test_a_gate_per_token_of_d_values_or_a_product_used_twice_stays_apart():
    """A (1, T, 1) gate with T == D has D values but one per token (before: folded, applied per channel,
    error 0.14); a product `ff * gate` used elsewhere too keeps the add (before: a second ff_fp8)."""
    from test_fast_norm import _graph

    x, y, ga, sc, sh, gf, *w = _tail_inputs()
    x, y = (torch.randn(1, D, D) for _ in range(2))  # T == D tokens
    gm = _graph(_block_tail, x, y, ga, sc, sh, torch.rand(1, D, 1) + 0.5, *w)
    (node,) = [n for n in gm.graph.nodes if n.target is OPS.ff_fp8.default]
    assert node.args[11:] == (None, None)

    def product_twice(x, y, gate_a, scale, shift, gate_ff, *weights):
        vx = x + y * gate_a
        n = OPS.ada_zero(vx, 1e-6, scale, shift)
        q, s, norm = OPS.fp8_tensor_rows(n.view(-1, D))
        gated = OPS.ff_fp8(q, s, norm, *weights, None, None).view(vx.shape) * gate_ff
        return vx + gated, gated * 2

    gm = _graph(product_twice, *_tail_inputs())
    assert [n.args[11] for n in gm.graph.nodes if n.target is OPS.ff_fp8.default] == [None]


def test_it_replaces_the_video_feed_forwards_only(ltx2_core):
    from backends.runtime import quant

    model = ltx2.tiny_transformer(layers=1).to(torch.bfloat16)
    plan = quant.plan_quantization(model, "fp8-scaled-mm")
    names = fused_ff.fuse_ff(model, plan.targets)
    assert names == ["transformer_blocks.0.ff.net"]
    assert isinstance(model.transformer_blocks[0].ff.net, fused_ff.FusedFeedForward)
    assert type(model.transformer_blocks[0].audio_ff.net[2]) is torch.nn.Linear
    assert fused_ff.fuse_ff(ltx2.tiny_transformer(layers=1).to(torch.bfloat16), ()) == []  # not fp8 targets


@pytest.mark.slow
def test_a_compiled_ltx2_block_runs_its_feed_forward_in_two_gemms(ltx2_core):
    """LTX-2's real DiT block with fp8-scaled-mm, fast_norm and the fused FeedForward, compiled by
    Inductor on the CPU with `runtime.shared_rows`: the FF's AdaLN writes its rows by the bound's scale,
    the residual goes into ff_fp8, and the output is the eager model's."""
    from test_fast_norm import compiled_block_run

    from backends.runtime import fast_norm, quant, timestep_rows

    model = ltx2.tiny_transformer(layers=1)
    plan = quant.plan_quantization(model, "fp8-scaled-mm")
    fused = fused_ff.fuse_ff(model.to(torch.bfloat16), plan.targets)
    quant.QuantizationPlan("fp8-scaled-mm", tuple(t for t in plan.targets if not t.startswith(fused[0])),
                           ()).apply(model)
    fast_norm.install(model, traced=True)
    assert timestep_rows.install(model)  # one gate row: what lets the residual into FF2
    want, got, text = compiled_block_run(model, ltx2.transformer_inputs(tokens=23, padded=0, dtype=torch.bfloat16))
    assert text.count("torch.ops.ltx_tui.ff_fp8.default(") == 1 and "ltx_tui.fp8_tensor_rows" not in text
    assert text.count("torch.ops.ltx_tui.ada_bound.default(") == 1
    call = text[text.index("torch.ops.ltx_tui.ff_fp8.default("):].split(")", 1)[0]
    assert not call.replace(" ", "").endswith("None,None")  # the residual and its gate went in
    for g, w in zip(got, want):
        assert ((g.float() - w.float()).norm() / w.float().norm()) < 0.05


@pytest.mark.gpu
def test_cublaslt_computes_the_torch_form_and_replays_in_a_cuda_graph(monkeypatch):
    """On Hopper with nvmath-python: both cuBLASLt calls (GELU_BIAS to e4m3, outer vectors with the
    residual) against the torch form of the same operands, eagerly and replayed from a CUDA graph."""
    why = lt_ff.available()
    if why is not None:
        pytest.skip(why)
    dev, t, d, h = "cuda", 1024, 512, 2048
    g = torch.Generator().manual_seed(0)
    w1, w2 = torch.randn(h, d, generator=g) * 0.04, torch.randn(d, h, generator=g) * 0.02
    b1, b2 = torch.randn(h, generator=g) * 0.1, torch.randn(d, generator=g) * 0.1
    w = lt_ff.prepare(w1.to(dev), b1.to(dev), w2.to(dev), b2.to(dev), torch.bfloat16)
    x = torch.randn(1, t, d, generator=g).to(dev)
    scale, shift = (torch.randn(1, 1, d, generator=g).to(dev) * 0.3 for _ in range(2))
    y = adaln.ada_zero_torch(x, 1e-6, scale, shift).reshape(t, d)
    s, norm = adaln.bound_scale(scale, shift, d)
    q, xs = (y / s).to(lt_ff.E4M3), s.expand(t).contiguous()
    resid = torch.randn(1, t, d, generator=g).to(dev, torch.bfloat16)
    gate = (torch.rand(1, 1, d, generator=g) + 0.5).to(dev, torch.bfloat16)
    got = lt_ff.feed_forward(q, xs, norm, w, resid, gate)
    plain = lt_ff.feed_forward(q, xs, norm, w)
    with monkeypatch.context() as m:
        m.setattr(lt_ff, "available", lambda device=None: "the torch form, for the comparison")
        want = lt_ff.feed_forward(q, xs, norm, w, resid, gate)
        want_plain = lt_ff.feed_forward(q, xs, norm, w)
    assert got.shape == resid.shape and got.dtype == torch.bfloat16
    assert ((got.float() - want.float()).norm() / (want.float() - resid.float()).norm()) < 2e-2
    assert ((plain.float() - want_plain.float()).norm() / want_plain.float().norm()) < 2e-2
    ref = resid.float() + gate.float() * _ff(y.float(), w1.to(dev), b1.to(dev), w2.to(dev), b2.to(dev))
    assert ((got.float() - ref).norm() / (ref - resid.float()).norm()) < 0.06
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = lt_ff.feed_forward(q, xs, norm, w, resid, gate)
    graph.replay()
    torch.testing.assert_close(replayed, got, rtol=0, atol=0)
