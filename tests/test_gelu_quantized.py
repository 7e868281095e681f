"""The FeedForward's tanh GELU inside the fp8 row quantization (`kernels.int8_gemm.quantize_rows(gelu=True)`,
`backends.runtime.quant.GeluQuantized`): the kernel in Triton's interpreter against plain torch, and
LTX-2's real FeedForward fused against the unfused fp8 path (on the GPU: tests/test_ltx2_gpu.py)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from backends.runtime import ltx2, quant
from kernels.int8_gemm import quantize_rows, quantize_rows_torch, quantize_rows_triton


def test_quantizing_a_gelu_quantizes_its_tanh_gelu():  # the plain-torch path (the kernel: below)
    x = torch.randn(6, 40) * 3
    q, s = quantize_rows(x, torch.int8, gelu=True)
    want_q, want_s = quantize_rows(F.gelu(x, approximate="tanh"), torch.int8)
    assert torch.equal(q, want_q) and torch.allclose(s, want_s)


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton's interpreter runs on CPU machines (tests/conftest.py)")
@pytest.mark.parametrize("gelu", [False, True])
def test_the_kernel_in_the_interpreter_matches_torch(gelu):
    x = torch.randn(5, 300) * 3  # a row narrower than the kernel's block: the masked tail
    q, s = quantize_rows_triton(x, torch.int8, gelu)
    want_q, want_s = quantize_rows_torch(x, torch.int8, gelu)
    assert torch.equal(q, want_q) and torch.allclose(s, want_s)


@pytest.mark.gpu
def test_the_kernels_hardware_tanh_stays_within_one_fp8_step():
    x = torch.randn(512, 16384, device="cuda", dtype=torch.bfloat16) * 3
    q, s = quantize_rows_triton(x, torch.float8_e4m3fn, True)
    want_q, want_s = quantize_rows_torch(x, torch.float8_e4m3fn, True)
    torch.testing.assert_close(s, want_s, rtol=2e-3, atol=0)
    got, want = q.float() * s[:, None], want_q.float() * want_s[:, None]
    step = want.abs().clamp(min=2.0 ** -6 * want_s[:, None]) / 8  # e4m3: 3 mantissa bits
    assert bool(((got - want).abs() <= step * 1.02).all())
    assert float((q.float() != want_q.float()).float().mean()) < 1e-2


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_ltx2s_feedforwards_fused_compute_the_unfused_fp8_path():
    model = ltx2.tiny_transformer(layers=2)
    inputs = ltx2.transformer_inputs(tokens=23)
    fused, unfused = copy.deepcopy(model), copy.deepcopy(model)
    for m in (fused, unfused):
        quant.plan_quantization(m, "fp8-scaled-mm").apply(m)
    names = quant.fuse_gelu(fused)
    assert names == [f"transformer_blocks.{i}.{ff}.net" for i in range(2) for ff in ("ff", "audio_ff")]
    assert isinstance(fused.transformer_blocks[0].ff.net[0], quant.GeluQuantized)
    assert fused.state_dict().keys() == unfused.state_dict().keys()  # the linears keep their names
    with torch.inference_mode():
        got, want = fused(*inputs), unfused(*inputs)
    assert all(torch.equal(g, w) for g, w in zip(got, want))  # fp32 activations: the same GELU, the same rounding


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_only_fp8_row_scales_on_both_linears_fuse():
    from ltx_core.model.transformer.feed_forward import FeedForward

    ff = FeedForward(32, 32)
    quant.plan_quantization(ff, "fp8-scaled-mm", scope="all-linears").apply(ff)
    ff.net[2] = quant.FP8ScaledMMLinear(torch.nn.Linear(128, 32), scales="tensor")
    assert quant.fuse_gelu(ff) == []
    other = torch.nn.Sequential(torch.nn.GELU(), torch.nn.Identity(), torch.nn.Linear(4, 4))  # not LTX-2's GELUApprox
    assert quant.fuse_gelu(other) == []


def test_quantized_rows_only_feed_a_linear_with_row_scales():
    lin = quant.FP8ScaledMMLinear(torch.nn.Linear(32, 16), scales="tensor")
    q, s = quantize_rows(torch.randn(4, 32), torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="row scales"):
        lin(quant.QuantizedRows(q, s, (4,), torch.float32))
