"""`kernels.fp8_fused_mm`: the FeedForward's first linear, GELU and fp8 rows in one GEMM. The kernels in
Triton's interpreter (float16 operands) against plain torch, the bound against what it bounds, and the
second linear's error with bound-scaled rows against amax-scaled ones (on the GPU: the fp8 kernels)."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels import fp8_fused_mm as G
from kernels.int8_gemm import FP8_MAX, quantize_rows

interpreter_only = pytest.mark.skipif(torch.cuda.is_available(), reason="Triton's interpreter runs on CPU machines")


def _ff(m=24, k=96, n=160, outliers=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 2
    if outliers:
        x[:, :3] *= 30  # a few outlier channels: amax far above the rms
    w = (torch.rand(n, k, generator=g) * 2 - 1) / math.sqrt(k)
    b = (torch.rand(n, generator=g) * 2 - 1) / math.sqrt(k)
    return x, w, b


def _quantized(x, w):
    xq, xs = quantize_rows(x, torch.float8_e4m3fn)
    wq, ws = quantize_rows(w, torch.float8_e4m3fn)
    return xq, xs, wq, ws


@pytest.mark.parametrize("outliers", [False, True])
def test_the_row_scales_bound_every_gelu_output(outliers):
    x, w, b = _ff(outliers=outliers)
    xq, xs, wq, ws = _quantized(x, w)
    s = G.row_scales(xq, xs, G.weight_bounds(wq, ws, b))
    y = F.gelu((xq.float() @ wq.float().t()) * xs[:, None] * ws[None, :] + b, approximate="tanh")
    amax = y.abs().amax(dim=1)
    assert bool((amax <= s * FP8_MAX).all())
    assert float((s * FP8_MAX / amax).max()) < 64  # a bound, not a wild guess


def test_bound_scaled_rows_cost_the_second_linear_no_accuracy():
    x, w, b = _ff(m=64, k=512, n=2048)
    w2 = (torch.rand(512, 2048) * 2 - 1) / math.sqrt(2048)
    xq, xs, wq, ws = _quantized(x, w)
    want = F.gelu(x @ w.t() + b, approximate="tanh") @ w2.t()
    h = F.gelu((xq.float() @ wq.float().t()) * xs[:, None] * ws[None, :] + b, approximate="tanh")
    hq, hs = quantize_rows(h, torch.float8_e4m3fn)  # amax-scaled rows (what the unfused path runs)
    s = G.row_scales(xq, xs, G.weight_bounds(wq, ws, b))
    q = G.gelu_mm(xq, xs, wq, ws, b, s)

    def err(rows, scale):
        got = (rows.float() * scale[:, None]) @ w2.t()
        return float((got - want).norm() / want.norm())

    assert err(q, s) < err(hq, hs) * 1.02


@interpreter_only
@pytest.mark.parametrize("shape", [(40, 64, 96), (33, 70, 50)])  # even K; a ragged M, N and K (the masks)
def test_the_kernels_in_the_interpreter_match_torch(shape):
    m, k, n = shape
    g = torch.Generator().manual_seed(1)
    xq = torch.randint(-8, 9, (m, k), generator=g).half()  # small integers: fp16 products are exact
    wq = torch.randint(-8, 9, (n, k), generator=g).half()
    xs, ws = torch.rand(m, generator=g) / 50, torch.rand(n, generator=g) / 50
    b = torch.randn(n, generator=g) / 10
    bounds = G.weight_bounds(wq, ws, b)
    s = G.row_scales_triton(xq, xs, bounds)
    torch.testing.assert_close(s, G.row_scales(xq, xs, bounds), rtol=1e-5, atol=0)
    got = G.gelu_mm_triton(xq, xs, wq, ws, b, s / 50, out_dtype=torch.float32)  # a scale so small that rows clamp
    want = G.gelu_mm_torch(xq, xs, wq, ws, b, s / 50, out_dtype=torch.float32)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    assert float(got.abs().max()) == FP8_MAX
    no_bias = G.gelu_mm_triton(xq, xs, wq, ws, None, s, out_dtype=torch.float32)
    torch.testing.assert_close(no_bias, G.gelu_mm_torch(xq, xs, wq, ws, None, s, torch.float32), rtol=1e-4, atol=1e-3)


def test_wrong_arguments_say_what_was_wrong():
    xq, wq = torch.zeros(4, 8, dtype=torch.float8_e4m3fn), torch.zeros(6, 8, dtype=torch.float8_e4m3fn)
    ones = torch.ones
    with pytest.raises(ValueError, match=r"xq must be \(M, K\) and w \(N, K\)"):
        G.gelu_mm(xq, ones(4), wq[:, :4], ones(6), None, ones(4))
    with pytest.raises(ValueError, match=r"ws must have shape \(6,\)"):
        G.gelu_mm(xq, ones(4), wq, ones(4), None, ones(4))
    with pytest.raises(TypeError, match="share a dtype"):
        G.gelu_mm(xq, ones(4), wq.half(), ones(6), None, ones(4))


@pytest.mark.gpu
def test_the_fp8_kernel_on_the_gpu_matches_torch_within_one_step():
    x, w, b = (t.cuda() for t in _ff(m=1000, k=4096, n=2048))
    xq, xs, wq, ws = _quantized(x.bfloat16(), w.bfloat16())
    bias = b.bfloat16()
    bounds = G.weight_bounds(wq, ws, bias)
    s = G.row_scales(xq, xs, bounds)
    want_s = G.row_scales(xq.cpu(), xs.cpu(), bounds.cpu())
    torch.testing.assert_close(s.cpu(), want_s, rtol=1e-4, atol=0)
    got = G.gelu_mm(xq, xs, wq, ws, bias, s).float() * s[:, None]
    want = G.gelu_mm_torch(xq, xs, wq, ws, bias, s).float() * s[:, None]
    step = want.abs().clamp(min=2.0 ** -6 * float(s.min())) / 8 + 2.0 ** -9 * s[:, None]
    assert float(((got - want).abs() > step * 1.05).float().mean()) < 1e-3  # fast accumulation, tanh.approx


def _residual_inputs(b=2, t=20, k=64, n=48, half=False, seed=2):
    g = torch.Generator().manual_seed(seed)
    if half:  # small integers: exact fp16 products in the interpreter
        xq, w = (torch.randint(-8, 9, s, generator=g).half() for s in ((b * t, k), (n, k)))
    else:
        xq, _ = quantize_rows(torch.randn(b * t, k, generator=g), torch.float8_e4m3fn)
        w, _ = quantize_rows(torch.randn(n, k, generator=g), torch.float8_e4m3fn)
    xs, ws = torch.rand(b * t, generator=g) / 50, torch.rand(n, generator=g) / 50
    x, gate = torch.randn(b, t, n, generator=g).bfloat16(), torch.randn(b, n, generator=g)
    return xq, xs, w, ws, torch.randn(n, generator=g).bfloat16(), x, gate


def test_the_residual_gemm_adds_the_gated_linear_to_x():
    xq, xs, w, ws, bias, x, gate = _residual_inputs()
    got = G.residual_mm(xq, xs, w, ws, bias, x, gate)
    y = ((xq.float() @ w.float().t()) * xs[:, None] * ws[None, :] + bias.float()).view(2, 20, 48)
    want = x.float() + gate[:, None, :] * y  # one gate row a sample
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


def test_the_residual_gemm_refuses_a_gate_it_cannot_read():
    xq, xs, w, ws, bias, x, gate = _residual_inputs()
    with pytest.raises(ValueError, match=r"gate must be \(G, 48\) with G dividing 40 rows"):
        G.residual_mm(xq, xs, w, ws, bias, x, torch.ones(3, 48))
    with pytest.raises(ValueError, match="x must hold the 40 x 48 output"):
        G.residual_mm(xq, xs, w, ws, bias, x[:1], gate)


@interpreter_only
@pytest.mark.parametrize("bias", [True, False])
def test_the_residual_kernel_in_the_interpreter_matches_torch(bias):
    xq, xs, w, ws, b, x, gate = _residual_inputs(t=19, k=70, n=50, half=True)  # ragged tiles: the masks
    b = b if bias else None
    got = G.residual_mm_triton(xq, xs, w, ws, b, x, gate)
    torch.testing.assert_close(got.float(), G.residual_mm_torch(xq, xs, w, ws, b, x, gate).float(), rtol=1e-2, atol=1e-2)


def _ff_residual(a, sa, w, sb, bias, x, gate):
    """As a compiled LTX-2 block runs `vx + ff(...) * vgate_mlp`: the fp8-scaled-mm linear's _scaled_mm,
    viewed (B, T, N), times the sample's gate, added to the residual."""
    y = torch._scaled_mm(a, w.t(), sa[:, None], sb[None, :], bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    return x + y.view(x.shape) * gate


def _fold(f, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from backends.runtime import quant, shared_rows  # noqa: F401  (quant defines the ops the pass reads)

    gm = make_fx(f, tracing_mode="fake")(*args)
    shared_rows.SharedRows()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_the_gated_residual_after_an_fp8_linear_goes_into_its_gemm():
    xq, xs, w, ws, bias, x, gate = _residual_inputs()
    args = (xq, xs, w, ws, bias, x, gate[:, None, :].bfloat16())
    gm, targets = _fold(_ff_residual, *args)
    assert "ltx_tui.fp8_mm_residual.default" in targets
    assert not {"aten._scaled_mm.default", "aten.add.Tensor", "aten.mul.Tensor"} & set(targets)
    got, want = gm(*args), _ff_residual(*args)
    assert float((got.float() - want.float()).norm() / want.float().norm()) < 1e-2


def test_a_residual_whose_gate_varies_by_token_or_whose_product_is_used_stays():
    xq, xs, w, ws, bias, x, gate = _residual_inputs()
    per_token = torch.rand(2, 20, 1)  # a gate a token: not one row a sample
    assert "aten._scaled_mm.default" in _fold(_ff_residual, xq, xs, w, ws, bias, x, per_token)[1]

    def used_twice(a, sa, w, sb, bias, x, gate):
        y = torch._scaled_mm(a, w.t(), sa[:, None], sb[None, :], bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
        return x + y.view(x.shape) * gate, y

    assert "aten._scaled_mm.default" in _fold(used_twice, xq, xs, w, ws, bias, x, gate[:, None, :])[1]
