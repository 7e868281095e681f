"""`kernels.fp8_small_mm`: few fp8 rows against an fp8 weight, split along K, against the definition
y = (x * sa) @ (w * sb).T + bias in float64 (Triton's interpreter on the CPU), and
`FP8ScaledMMLinear` sending few-row calls to it on CUDA."""

import pytest
import torch

from kernels.fp8_small_mm import MAX_ROWS, small_rows_mm, tiling


def _definition(x, sa, w, sb, bias):
    y = (x.double() * sa.double()[:, None]) @ (w.double() * sb.double()[:, None]).t()
    return y + (0.0 if bias is None else bias.double())


def _operands(m, n, k, device="cpu", dtype=torch.float16):
    g = torch.Generator().manual_seed(m * 7 + n + k)
    x = (torch.randn(m, k, generator=g) * 8).to(torch.float8_e4m3fn).to(device)
    sa = (torch.rand(m, generator=g) + 0.5).to(device)
    w = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn).to(device)
    sb = (torch.rand(n, generator=g) + 0.5).to(device)
    return x, sa, w, sb, torch.randn(n, generator=g).to(device, dtype)


@pytest.mark.parametrize("m, n, k, config", [
    (126, 96, 256, None),                      # one K slice: the epilogue in the same kernel
    (126, 96, 320, (64, 32, 64, 4, 4, 2)),     # K = 320 in slices of 128: the last one partly masked
    (5, 40, 512, (64, 64, 64, 8, 4, 2)),       # rows and columns short of a tile
])
def test_matches_definition(m, n, k, config):
    x, sa, w, sb, bias = _operands(m, n, k)
    y = small_rows_mm(x, sa, w, sb, bias, torch.float32, config=config)
    ref = _definition(x, sa, w, sb, bias)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-5


def test_no_bias_and_output_dtype():
    x, sa, w, sb, _ = _operands(16, 64, 128)
    y = small_rows_mm(x, sa, w, sb, out_dtype=torch.float16)
    assert y.dtype == torch.float16
    ref = _definition(x, sa, w, sb, None)
    assert float((y.double() - ref).norm() / ref.norm()) < 2e-3


def test_tiling_fills_the_gpu_and_splits_k_evenly():
    bm, bn, bk, split, _, _ = tiling(126, 2048, 2048)
    assert (bm, split) == (128, 4) and 2048 % (split * bk) == 0
    assert (2048 // bn) * split == 128
    assert tiling(126, 2048, 8192)[3] == 4 and tiling(126, 8192, 2048)[3] == 1


@pytest.mark.parametrize("args, match", [
    (lambda x, sa, w, sb: (x[:, :-1], sa, w, sb), "x must be"),
    (lambda x, sa, w, sb: (x.half(), sa, w, sb), "x and w must be float8_e4m3fn"),
    (lambda x, sa, w, sb: (x, sa, w.half(), sb), "x and w must be float8_e4m3fn"),
    (lambda x, sa, w, sb: (x, sa[:-1], w, sb), "one scale per row of x"),
])
def test_bad_operands_say_what_was_expected(args, match):
    x, sa, w, sb, _ = _operands(8, 32, 64)
    with pytest.raises(ValueError, match=match):
        small_rows_mm(*args(x, sa, w, sb))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [126, MAX_ROWS])
def test_linear_takes_few_rows_on_cuda(rows, monkeypatch):
    from backends.runtime import quant

    lin = torch.nn.Linear(2048, 1024).cuda().bfloat16()
    fp8 = quant.FP8ScaledMMLinear(lin)
    x = torch.randn(1, rows, 2048, device="cuda", dtype=torch.bfloat16)
    calls = []
    monkeypatch.setattr(quant, "small_rows_mm", lambda *a, **k: calls.append(a[0]) or small_rows_mm(*a, **k))
    few = fp8(x)
    compiled = torch.compile(fp8, fullgraph=True)(x)
    monkeypatch.setattr(quant.FP8ScaledMMLinear, "few_rows", 0)
    cublas = fp8(x)
    ref = lin(x).float()
    assert calls and calls[0].shape == (rows, 2048) and calls[0].dtype == torch.float8_e4m3fn
    for out in (few, compiled, cublas):
        assert out.shape == (1, rows, 1024)
        assert float((out.float() - ref).norm() / ref.norm()) < 0.05
    # the same fp8 rows and weight as cuBLAS's: only the order of the fp32 sums differs
    assert float((few.float() - cublas.float()).norm() / cublas.float().norm()) < 5e-3
    assert torch.equal(compiled, few)


@pytest.mark.gpu
def test_wide_k_on_cuda():
    x, sa, w, sb, bias = _operands(126, 2048, 8192, "cuda", torch.bfloat16)
    y = small_rows_mm(x, sa, w, sb, bias)
    ref = _definition(x, sa, w, sb, bias)
    assert float((y.double() - ref).norm() / ref.norm()) < 5e-3
