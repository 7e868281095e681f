"""`runtime.v_e4m3`: the video self-attention's v in e4m3 from its GEMM by a scale bounded before it runs,
the norm before it writing x's rows by one bounded scale, and `kernels.fp8_qkv` taking such a v as it is.
On the CPU torch._scaled_mm runs the GEMMs; cuDNN's attention (CUDA only) is its fp32 definition here."""

from __future__ import annotations

import math
import operator

import pytest
import torch

from backends.runtime import cudnn_fp8_attention, fast_norm, v_e4m3  # noqa: F401 - the ops the graphs call
from kernels import adaln, fp8_qkv

OPS = torch.ops.ltx_tui
E4M3 = torch.float8_e4m3fn
T, D, HEADS = 40, 64, 2


def _linear(seed=0, bias=True, out=D):
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(D, out, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(out, D, generator=g) * 0.05 * (1 + 3 * torch.rand(out, 1, generator=g)))
        if bias:
            lin.bias.copy_(torch.randn(out, generator=g) * 0.1)
    return lin.to(torch.bfloat16)


def _adaln(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, T, D, generator=g) * 2
    scale, shift = torch.randn(1, 1, D, generator=g) * 0.3, torch.randn(1, 1, D, generator=g) * 0.2
    return x.to(torch.bfloat16), scale.to(torch.bfloat16), shift.to(torch.bfloat16)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_v_in_e4m3_is_the_linear_to_fp8_error_and_never_saturates():
    """From the AdaLN's rows by the bound's scale: v8 * s_v is the float linear to e4m3's error, and a
    row along W's largest row (where Cauchy-Schwarz is tight) stays within 448."""
    lin = _linear()
    proj = v_e4m3.VProjection(lin)
    x, scale, shift = _adaln()
    y = adaln.ada_zero_torch(x, 1e-6, scale, shift).reshape(T, D)
    s, norm = adaln.bound_scale(scale, shift, D)
    q = (y.float() / s).to(E4M3)
    v8, s_v = v_e4m3.mm_e4m3(q, s.expand(T), norm, proj.weight, proj.weight_scale, proj.weight_bound, proj.bias)
    want = lin(y)
    assert v8.dtype == E4M3 and s_v.shape == (1,) and s_v.dtype == torch.float32
    assert _rel(v8.float() * s_v, want) < 0.08
    assert float(v8.float().abs().max()) <= 448 and not v8.float().isnan().any()

    w = proj.weight.float() * proj.weight_scale
    j = int(w.norm(dim=1).argmax())
    worst = (w[j] / w[j].norm() * float(norm)).reshape(1, D)  # ||x|| at the bound, along W's largest row
    wq = (worst / s).to(E4M3)
    v8, s_v = v_e4m3.mm_e4m3(wq, s.expand(1), norm, proj.weight, proj.weight_scale, proj.weight_bound, proj.bias)
    true = wq.float() * s @ w.t() + proj.bias.float()
    assert not v8.float().isnan().any() and float(v8.float().abs().max()) <= 448
    assert float(v8.float()[0, j].abs()) > 448 / 1.3  # the bound is tight there: the scale is no looser
    assert abs(float(v8.float()[0, j] * s_v) / float(true[0, j]) - 1) < 2**-3  # e4m3's rounding, not a clamp


def test_the_projection_computes_its_linear_eagerly():
    lin = _linear(bias=False, out=96)
    proj = v_e4m3.VProjection(lin)
    x = torch.randn(2, 7, D).to(torch.bfloat16)
    assert proj.weight.dtype == E4M3 and proj.weight_scale.shape == (1,)
    w = lin.weight.detach().float()
    c1 = float(w.norm(dim=1).max()) * v_e4m3.X_ROUNDING * v_e4m3.MARGIN / 448
    assert proj.weight_bound[0].item() == pytest.approx(c1, rel=0.07) and proj.weight_bound[1].item() < 1e-29
    got = proj(x)
    assert got.shape == (2, 7, 96) and got.dtype == torch.bfloat16 and _rel(got, lin(x)) < 0.08


def test_fp8_qkv_takes_v_in_e4m3_with_its_scale():
    """No reduction and no cast of v: v8 comes back as it is, its scale in the scalars and O's descales."""
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 37, 2, 16, generator=g), torch.randn(1, 70, 2, 16, generator=g)
    v = (torch.randn(1, 70, 2, 16, generator=g) * 40).to(E4M3)
    qk, s_v = torch.tensor([0.01, 0.02]), torch.tensor([0.125])
    q8, k8, v8, scalars, rows = fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, rows=300, qk_descale=qk, v_descale=s_v)
    assert v8 is v and q8.dtype == k8.dtype == E4M3
    got = [fp8_qkv.scalar(scalars, i).item() for i in range(7)]
    assert got == pytest.approx([0.01, 0.02, 0.125, 1 / 256, 256.0, 1 / 0.25, 0.25], rel=1e-6)
    assert torch.equal(rows, torch.full((300,), 0.25))
    # q and k reduced, v given
    _, _, v8, scalars, _ = fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, v_descale=s_v)
    assert v8 is v and fp8_qkv.scalar(scalars, fp8_qkv.Q).item() == pytest.approx(float(q.abs().max()) / 448)
    assert fp8_qkv.scalar(scalars, fp8_qkv.V).item() == 0.125
    with pytest.raises(TypeError, match="v only with v_descale"):
        fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, qk_descale=qk)
    with pytest.raises(TypeError, match="v only with v_descale"):
        fp8_qkv.quantize_qkv(q, k, v.float(), 256.0, 2.0, v_descale=s_v)
    with pytest.raises(ValueError, match="v_descale must be 1 fp32"):
        fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, v_descale=torch.tensor([0.1, 0.2]))


def _attention(q, k, v, qk_descale, scale, v_descale=None):
    """cuDNN's fp8 attention by its definition (its output as e4m3 rows, the descale a row), for the
    graphs run on the CPU."""
    qf = q.float() * qk_descale[0] if q.dtype == E4M3 else q.float()
    kf = k.float() * qk_descale[1] if k.dtype == E4M3 else k.float()
    vf = v.float() * v_descale if v_descale is not None else v.float()
    p = (torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale).softmax(-1)
    o = torch.einsum("bhqk,bkhd->bqhd", p, vf)
    s = o.abs().amax().clamp(min=1e-12) / 448
    return (o / s).to(E4M3).contiguous(), s.expand(o.shape[0] * o.shape[1]).clone()


class _Run(torch.fx.Interpreter):
    def call_function(self, target, args, kwargs):
        if target is OPS.sdpa_fp8_rows.default:
            return _attention(*args, **kwargs)
        return super().call_function(target, args, kwargs)


def _parts(x, scale, shift, wq, wqs, w, ws, wb, bias):
    """As a compiled LTX-2 video self-attention after fast_norm and the quantization: the AdaLN norm,
    to_q / to_k's row-scaled fp8 rows (one op once shared), to_v a VProjection, cuDNN's attention:
    (its output, v)."""
    n = OPS.ada_zero(x, 1e-6, scale, shift)
    rq, rs = OPS.fp8_rows(n.view(-1, D), False)
    qv = torch._scaled_mm(rq, wq.t(), scale_a=rs[:, None], scale_b=wqs[None, :], out_dtype=torch.bfloat16)
    tq, ts, tn = OPS.fp8_tensor_rows(n.view(-1, D))
    v = OPS.fp8_tensor_mm(tq, ts, tn, w, ws, wb, bias, torch.bfloat16).view(1, T, HEADS, D // HEADS)
    qh = qv.view(1, T, HEADS, D // HEADS)
    o, rows = OPS.sdpa_fp8_rows(qh, qh, v, None, (D // HEADS) ** -0.5)
    return o.float().view(T, D) * rows[:, None], v


def _self_attention(x, scale, shift, wq, wqs, w, ws, wb, bias):
    return _parts(x, scale, shift, wq, wqs, w, ws, wb, bias)[0]


def _blended(x, scale, shift, wq, wqs, w, ws, wb, bias, blend):
    """With LTX-2's perturbation blend, which reads v too."""
    out, v = _parts(x, scale, shift, wq, wqs, w, ws, wb, bias)
    return out * blend + v.view(T, D).float() * (1 - blend)


def _inputs():
    from backends.runtime import quant

    x, scale, shift = _adaln()
    wq = quant.FP8ScaledMMLinear(_linear(seed=3))
    proj = v_e4m3.VProjection(_linear())
    return x, scale, shift, wq.weight, wq.weight_scale, proj.weight, proj.weight_scale, proj.weight_bound, proj.bias


def _graph(f, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from backends.runtime import shared_rows

    gm = make_fx(f, tracing_mode="fake")(*args)
    want = _Run(gm).run(*args)
    shared_rows.SharedRows()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, want


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_the_pass_has_the_norm_write_one_scale_and_the_gemm_write_v_in_e4m3():
    args = _inputs()
    gm, want = _graph(_self_attention, *args)
    targets = _targets(gm)
    assert targets.count(OPS.ada_bound.default) == 1 and targets.count(OPS.ada_zero_rows.default) == 1
    assert targets.count(OPS.fp8_tensor_mm_e4m3.default) == 1
    assert not {OPS.ada_zero.default, OPS.fp8_rows.default, OPS.fp8_tensor_rows.default,
                OPS.fp8_tensor_mm.default} & set(targets)
    (norm,) = [n for n in gm.graph.nodes if n.target is OPS.ada_zero_rows.default]
    assert norm.args[4] is not None  # one fixed scale, from ada_bound
    (attention,) = [n for n in gm.graph.nodes if n.target is OPS.sdpa_fp8_rows.default]
    v, s_v = attention.args[2], attention.args[5]
    assert v.meta["val"].dtype == E4M3 and s_v.target is operator.getitem
    assert _rel(_Run(gm).run(*args), want) < 0.1


def test_v_read_by_the_perturbation_blend_stays_in_bf16():
    args = _inputs()
    gm, want = _graph(_blended, *args, torch.full((1,), 0.75))
    targets = _targets(gm)
    assert OPS.fp8_tensor_mm.default in targets and OPS.fp8_tensor_mm_e4m3.default not in targets
    assert OPS.ada_bound.default in targets  # the rows are the norm's by one scale all the same
    assert _rel(_Run(gm).run(*args, torch.full((1,), 0.75)), want) < 0.1


def test_a_norm_also_read_elsewhere_keeps_its_own_rows():
    def also_summed(x, scale, shift, wq, wqs, w, ws, wb, bias):
        return (_self_attention(x, scale, shift, wq, wqs, w, ws, wb, bias),
                OPS.ada_zero(x, 1e-6, scale, shift).sum())

    args = _inputs()
    gm, _ = _graph(also_summed, *args)
    # make_fx traced two ada_zero calls: each its own node, the attention's one folded, the other kept
    targets = _targets(gm)
    assert targets.count(OPS.ada_zero.default) == 1 and OPS.fp8_tensor_mm_e4m3.default in targets

    def n_twice(x, scale, shift):
        n = OPS.ada_zero(x, 1e-6, scale, shift)
        tq, ts, tn = OPS.fp8_tensor_rows(n.view(-1, D))
        return tq.float() * ts[:, None], n * 2

    gm, _ = _graph(n_twice, *args[:3])
    assert OPS.ada_bound.default not in _targets(gm) and OPS.fp8_tensor_rows.default in _targets(gm)


def test_it_takes_the_video_self_attentions_v_only(ltx2_core, monkeypatch):
    """On LTX-2's real DiT with sdpa_cudnn_fp8 bound to its attentions (cuDNN faked present): attn1's
    to_v of each block, not the text, audio or audio-video attentions'."""
    from backends.runtime import cudnn_fp8_attention, ltx2, quant
    from backends.runtime.dense_attention import DenseFunction

    monkeypatch.setattr(cudnn_fp8_attention, "unavailable_reason", lambda: None)
    monkeypatch.setattr(v_e4m3, "ENABLED", True)
    model = ltx2.tiny_transformer(layers=2).to(torch.bfloat16)
    function = DenseFunction("sdpa_cudnn_fp8")
    for m in model.modules():
        if hasattr(m, "attention_function") and hasattr(m, "heads"):
            m.attention_function = function.for_module(m)
    plan = quant.plan_quantization(model, "fp8-scaled-mm")
    names = v_e4m3.targets(model, plan.targets)
    assert names == [f"transformer_blocks.{i}.attn1.to_v" for i in range(2)]
    assert v_e4m3.install(model, names) == names
    assert isinstance(model.transformer_blocks[1].attn1.to_v, v_e4m3.VProjection)
    monkeypatch.setattr(v_e4m3, "ENABLED", False)
    assert v_e4m3.targets(model, plan.targets) == []
    plain = ltx2.tiny_transformer(layers=1).to(torch.bfloat16)  # LTX-2's own attention: no static scales
    assert v_e4m3.targets(plain, quant.plan_quantization(plain, "fp8-scaled-mm").targets) == []
    # a review: where the pass cannot fold the rows into the norm, the projection only adds a pass over x
    monkeypatch.setattr(v_e4m3, "ENABLED", True)
    fresh = ltx2.tiny_transformer(layers=1).to(torch.bfloat16)
    for m in fresh.modules():
        if hasattr(m, "attention_function") and hasattr(m, "heads"):
            m.attention_function = function.for_module(m)
    names = quant.plan_quantization(fresh, "fp8-scaled-mm").targets
    assert v_e4m3.targets(fresh, names) == ["transformer_blocks.0.attn1.to_v"]
    monkeypatch.setattr(fresh.transformer_blocks[0].attn1, "to_gate_logits", torch.nn.Linear(D, 2))
    assert v_e4m3.targets(fresh, names) == []  # a gate's linear reads x too
    monkeypatch.delattr(fresh.transformer_blocks[0].attn1, "to_gate_logits")
    from backends.runtime import dense_attention, shared_rows

    monkeypatch.setattr(shared_rows, "FOLD", False)
    assert v_e4m3.targets(fresh, names) == []
    monkeypatch.setattr(shared_rows, "FOLD", True)
    monkeypatch.setattr(dense_attention, "STATIC_QK", False)  # the :amax-qk ablation: q and k by their amax
    assert not fresh.transformer_blocks[0].attn1.attention_function.static_qk
    assert v_e4m3.targets(fresh, names) == []


def test_the_bound_is_cauchy_schwarz_over_the_rows_norms():
    """s_v * 448 = (||x|| max_j ||w_j|| X_ROUNDING + max|b|) MARGIN, from the weights as quantized."""
    lin = _linear()
    proj = v_e4m3.VProjection(lin)
    w = proj.weight.float() * proj.weight_scale
    want = (10 * float(w.norm(dim=1).max()) * v_e4m3.X_ROUNDING + float(lin.bias.detach().float().abs().max())) * v_e4m3.MARGIN
    q = torch.zeros(3, D, dtype=E4M3)
    _, s_v = v_e4m3.mm_e4m3(q, torch.ones(3), torch.tensor([10.0]), proj.weight, proj.weight_scale,
                            proj.weight_bound, proj.bias)
    assert float(s_v) * 448 == pytest.approx(want, rel=1e-5) and math.isfinite(float(s_v))
