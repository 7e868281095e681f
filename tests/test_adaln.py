"""`kernels.adaln`: LTX-2's ada_zero and post_sa norms in one pass each, in the Triton interpreter,
against their definition in float64 and against LTX-2's own PytorchAdaZeroFunction /
PytorchPostSAFunction."""

import pytest
import torch

from kernels import adaln


def rms(x, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def inputs(dtype, b=2, t=5, d=48, per_token=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(b, t, d, generator=g) * 3).to(dtype)
    rows = t if per_token else 1
    scale, shift, gate = ((torch.randn(b, rows, d, generator=g) * 0.5).to(dtype) for _ in range(3))
    return x, scale, shift, gate


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("per_token", [False, True])
def test_ada_zero_is_its_definition(dtype, tol, per_token):
    x, scale, shift, _ = inputs(dtype, per_token=per_token)
    want = rms(x.double(), 1e-6) * (1 + scale.double()) + shift.double()
    for run in (adaln.ada_zero, adaln.ada_zero_torch):  # the kernel, and the ops off CUDA
        got = run(x, 1e-6, scale, shift)
        assert got.dtype == dtype and got.shape == x.shape
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
@pytest.mark.parametrize("weighted, per_token", [(False, False), (True, True), (True, False)])
def test_post_sa_is_its_definition(dtype, tol, weighted, per_token):
    x, _, _, gate = inputs(dtype, per_token=per_token, d=40)  # a dim that is not a power of two
    y = torch.randn_like(x.float()).to(dtype)
    weight = (torch.rand(x.shape[-1]) + 0.5).to(dtype) if weighted else None
    want_res = x.double() + y.double() * gate.double()
    for run in (adaln.post_sa, adaln.post_sa_torch):
        res, normed = run(x, y, weight, 1e-6, gate)
        want = rms(res.double(), 1e-6) * (1 if weight is None else weight.double())  # the stored residual's norm
        torch.testing.assert_close(res.double(), want_res, rtol=tol, atol=tol)
        torch.testing.assert_close(normed.double(), want, rtol=tol, atol=tol)


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_they_match_ltx2s_own_ops():
    from ltx_core.model.transformer.ops import PytorchAdaZeroFunction, PytorchPostSAFunction

    x, scale, shift, gate = inputs(torch.float32, per_token=True)
    y = torch.randn_like(x)
    torch.testing.assert_close(adaln.ada_zero(x, 1e-6, scale, shift), PytorchAdaZeroFunction()(x, 1e-6, scale, shift))
    for got, want in zip(adaln.post_sa(x, y, None, 1e-6, gate), PytorchPostSAFunction()(x, y, None, 1e-6, gate)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("rows", [1, 5])
def test_modulation_as_ltx2_slices_it(rows):
    """LTX-2's get_ada_values hands over slices of one (B, rows, k, D) tensor (table + timestep
    embedding): strided in tokens, one row per batch or one per token."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 24, generator=g)
    ada = torch.randn(3, rows, 9, 24, generator=g) * 0.5
    shift, scale, gate = ada.unbind(2)[:3]
    want = rms(x.double(), 1e-6) * (1 + scale.double()) + shift.double()
    torch.testing.assert_close(adaln.ada_zero(x, 1e-6, scale, shift).double(), want, rtol=1e-5, atol=1e-5)
    y = torch.randn_like(x)
    torch.testing.assert_close(adaln.post_sa(x, y, None, 1e-6, gate)[0].double(),
                               x.double() + y.double() * gate.double(), rtol=1e-5, atol=1e-5)


def test_arguments_are_checked_up_front():
    x, scale, shift, gate = inputs(torch.float32)
    with pytest.raises(ValueError, match="does not broadcast"):
        adaln.ada_zero(x, 1e-6, scale[..., :-1], shift)
    with pytest.raises(ValueError, match=r"\(batch, tokens, dim\)"):
        adaln.ada_zero(x[0], 1e-6, scale, shift)
    with pytest.raises(ValueError, match="contiguous"):
        adaln.ada_zero(x.transpose(0, 1), 1e-6, scale, shift)
    with pytest.raises(ValueError, match="y must be"):
        adaln.post_sa(x, x[:, :-1], None, 1e-6, gate)
    with pytest.raises(ValueError, match="weight must be"):
        adaln.post_sa(x, x, torch.ones(3), 1e-6, gate)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        adaln.ada_zero(x.double(), 1e-6, scale, shift)
    with pytest.raises(ValueError, match="in x's dtype"):  # eager torch would promote the output instead
        adaln.ada_zero(x.half(), 1e-6, scale, shift)


@pytest.mark.parametrize("keep", [False, True])
def test_ada_zero_fp8_is_ada_zero_then_its_row_quantization(keep):
    """One pass: the fp8 rows and scales `quantize_rows`'s kernel makes of ada_zero's (rounded) output
    (its kernel, not the torch ops: the interpreter's float8 conversion rounds its own way)."""
    from kernels.int8_gemm import quantize_rows_triton

    x, scale, shift, _ = inputs(torch.float16, t=6, d=40, per_token=keep)
    q, s, out = adaln.ada_zero_fp8(x, 1e-6, scale, shift, keep=keep)
    ref = adaln.ada_zero(x, 1e-6, scale, shift)
    want_q, want_s = quantize_rows_triton(ref.reshape(-1, 40), torch.float8_e4m3fn)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (12, 40) and s.shape == (12,)
    torch.testing.assert_close(s, want_s, rtol=1e-6, atol=0)
    assert torch.equal(q.float(), want_q.float())
    assert (out is None) != keep
    if keep:
        torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("weighted", [False, True])
def test_post_sa_fp8_is_post_sa_then_its_norms_row_quantization(weighted):
    """One pass: the residual, and the fp8 rows `quantize_rows`'s kernel makes of the (rounded) norm."""
    from kernels.int8_gemm import quantize_rows_triton

    x, _, _, gate = inputs(torch.float16, t=6, d=40, per_token=weighted)
    y = torch.randn_like(x.float()).to(torch.float16)
    weight = (torch.rand(40) + 0.5).half() if weighted else None
    res, q, s = adaln.post_sa_fp8(x, y, weight, 1e-6, gate)
    want_res, normed = adaln.post_sa(x, y, weight, 1e-6, gate)
    want_q, want_s = quantize_rows_triton(normed.reshape(-1, 40), torch.float8_e4m3fn)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (12, 40) and s.shape == (12,)
    torch.testing.assert_close(res, want_res, rtol=0, atol=0)
    torch.testing.assert_close(s, want_s, rtol=1e-6, atol=0)
    assert torch.equal(q.float(), want_q.float())
    with pytest.raises(ValueError, match="post_sa_fp8: y must be"):
        adaln.post_sa_fp8(x, x[:, :-1], None, 1e-6, gate)


@pytest.mark.parametrize("gates, norms", [(0, 1), (1, 2), (2, 1), (2, 2)])
def test_add_ada_zero_fp8_is_the_residual_add_then_ada_zero_fp8(gates, norms):
    """One pass: x + y * gates (LTX-2's gate (B, 1, D) and perturbation mask (B, 1, 1)) as stored, and the
    fp8 rows of ada_zero of it for each (scale, shift): what ada_zero_fp8 makes of the stored sum."""
    x, scale, shift, gate = inputs(torch.float16, t=6, d=40)
    g = torch.Generator().manual_seed(1)
    y = torch.randn(x.shape, generator=g).half()
    mask = torch.tensor([1.0, 0.0]).half().view(2, 1, 1)
    factors = [gate, mask][:gates]
    pairs = [(scale, shift), (shift * 0.5, scale)][:norms]
    res, *rows = adaln.add_ada_zero_fp8(x, y, factors, 1e-6, [p[0] for p in pairs], [p[1] for p in pairs])
    want = y.float()
    for f in factors:
        want = want * f.float()
    torch.testing.assert_close(res, (x.float() + want).half(), rtol=0, atol=0)
    assert len(rows) == 2 * norms
    for (sc, sh), q, s in zip(pairs, rows[::2], rows[1::2]):
        want_q, want_s, _ = adaln.ada_zero_fp8(res, 1e-6, sc, sh)
        assert q.dtype == torch.float8_e4m3fn and q.shape == (12, 40)
        torch.testing.assert_close(s, want_s, rtol=0, atol=0)
        assert torch.equal(q.float(), want_q.float())
    torch_res, *normed = adaln.add_ada_zero_torch(x, y, factors, 1e-6, [p[0] for p in pairs], [p[1] for p in pairs])
    torch.testing.assert_close(torch_res, res, rtol=0, atol=1e-3)
    assert len(normed) == norms


def test_add_ada_zero_checks_its_arguments_up_front():
    x, scale, shift, gate = inputs(torch.float32)
    with pytest.raises(ValueError, match="does not broadcast"):
        adaln.add_ada_zero_fp8(x, x, [gate[..., :-1]], 1e-6, [scale], [shift])
    with pytest.raises(ValueError, match="one or two"):
        adaln.add_ada_zero_fp8(x, x, [], 1e-6, [scale] * 3, [shift] * 3)
    with pytest.raises(ValueError, match="y must be"):
        adaln.add_ada_zero_fp8(x, x.transpose(1, 2).contiguous().transpose(1, 2), [], 1e-6, [scale], [shift])


def _by_one_scale(q, s, want):
    """e4m3 rows by the one scale `s` against the values they stand for: e4m3's half-ulp, or its
    smallest subnormal step (the interpreter's float8 conversion keeps only the power of two below)."""
    from kernels.na3d_triton import interpreting

    err = (q.float() * s - want.float()).abs()
    rel = 0.5 if interpreting() else 2**-4
    assert bool((err <= want.float().abs() * rel + s * 2**-9).all()), err.max()


def test_a_fixed_scale_writes_every_row_by_it_and_bounds_hold():
    """`bound_scale` bounds ada_zero's output whatever x is (rows of one spike, where |n_j| = sqrt(D),
    included), and the kernels with `fixed` write each row by that scale, in each row's scale."""
    x, scale, shift, gate = inputs(torch.float16, t=6, d=40)
    x[0, 0] = 0
    x[0, 0, 3] = 50.0  # one spike: the norm's largest value, sqrt(40)
    s, norm = adaln.bound_scale(scale, shift, 40)
    ref = adaln.ada_zero(x, 1e-6, scale, shift)
    assert s.shape == norm.shape == (1,) and float(torch.log2(s)) == round(float(torch.log2(s)))
    assert float(ref.float().abs().amax() / s) <= 448 and float(ref.float().norm(dim=-1).amax()) <= float(norm)
    assert float(ref.float().abs().amax() / s) > 448 / 4  # a bound, not a gross one: the spike row is near it
    q, rows, _ = adaln.ada_zero_fp8(x, 1e-6, scale, shift, fixed=s)
    assert torch.equal(rows, s.expand(12))
    _by_one_scale(q, s, ref.reshape(12, 40))
    y = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).half()
    res, q1, s1, q2, s2 = adaln.add_ada_zero_fp8(x, y, [gate], 1e-6, [scale, shift], [shift, scale], [None, s])
    want1, want_s1, _ = adaln.ada_zero_fp8(res, 1e-6, scale, shift)
    assert torch.equal(q1.float(), want1.float()) and torch.equal(s1, want_s1)  # the first keeps its row scales
    assert torch.equal(s2, s.expand(12))
    _by_one_scale(q2, s, adaln.ada_zero(res, 1e-6, shift, scale).reshape(12, 40))
    with pytest.raises(ValueError, match="a fixed scale must be one float32 value"):
        adaln.ada_zero_fp8(x, 1e-6, scale, shift, fixed=s.half())
    with pytest.raises(ValueError, match="1 fixed scales for 2 norms"):
        adaln.add_ada_zero_fp8(x, y, [gate], 1e-6, [scale, shift], [shift, scale], [s])
