"""`kernels.dit_qk`: LTX-2's DiT pre-attention (q/k RMSNorm over all heads, SPLIT RoPE) in one pass,
in Triton's interpreter, against LTX-2's own `PytorchPreAttention` on its real attention modules
with the RoPE tables its LTXModel makes, and against its definition in float64."""

import pytest
import torch
import triton
import triton.language as tl

from kernels import dit_qk
from kernels.na3d_triton import interpreting

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


@pytest.fixture(scope="module")
def calls():
    """Each attention of a tiny LTXModel block with the (x, context, pe, k_pe) it is called with."""
    from backends.runtime import ltx2

    torch.manual_seed(0)
    model = ltx2.tiny_transformer(layers=1)
    block = model.transformer_blocks[0]
    seen = {}
    for name in ("attn1", "attn2", "audio_attn1", "audio_to_video_attn", "video_to_audio_attn"):
        attn = getattr(block, name)
        with torch.no_grad():  # norm weights that are not all ones
            attn.q_norm.weight.uniform_(0.5, 1.5)
            attn.k_norm.weight.uniform_(0.2, 2.0)
        attn.register_forward_pre_hook(lambda m, a, kw, name=name: seen.setdefault(name, (m, a, kw)) and None,
                                       with_kwargs=True)
    with torch.inference_mode():
        model(*ltx2.transformer_inputs(tokens=23, padded=0))
    return seen


def _qk(attn, args, kwargs):
    x = args[0]
    context = kwargs.get("context")
    context = x if context is None else context
    return attn.to_q(x), attn.to_k(context), kwargs.get("pe"), kwargs.get("k_pe")


@pytest.mark.parametrize("name", ["attn1", "attn2", "audio_attn1", "audio_to_video_attn", "video_to_audio_attn"])
def test_it_is_ltx2s_pre_attention(calls, name):
    attn, args, kwargs = calls[name]
    with torch.inference_mode():
        q, k, pe, k_pe = _qk(attn, args, kwargs)
        want = attn.preattention_function(q, k, attn, None, pe, k_pe)
        got = dit_qk.qk_norm_rope(q, k, attn.q_norm.weight, attn.k_norm.weight, attn.q_norm.eps, attn.heads, pe, k_pe)
    assert (pe is None) == (name == "attn2")  # the text cross-attention has no RoPE
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _rotate_f64(x, w, eps, cos, sin, heads):
    y = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps) * w.double()
    b, n, dim = x.shape
    y = y.view(b, n, heads, 2, dim // heads // 2)
    c, s = (t.double().transpose(1, 2) for t in (cos, sin))
    y1, y2 = y[:, :, :, 0], y[:, :, :, 1]
    return torch.stack([y1 * c - y2 * s, y2 * c + y1 * s], dim=3).view(b, n, dim)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_it_is_its_definition_for_batches_and_odd_sizes(dtype, tol):
    g = torch.Generator().manual_seed(0)
    heads, half = 3, 5  # not powers of two: masked lanes
    q, k = (torch.randn(2, n, heads * 2 * half, generator=g).to(dtype) for n in (7, 4))
    wq, wk = (torch.rand(heads * 2 * half, generator=g).to(dtype) + 0.5 for _ in range(2))
    ang_q, ang_k = (torch.rand(2, heads, n, half, generator=g) * 6 for n in (7, 4))
    pe, k_pe = ((a.cos().to(dtype), a.sin().to(dtype)) for a in (ang_q, ang_k))
    gq, gk = dit_qk.qk_norm_rope(q, k, wq, wk, 1e-6, heads, pe, k_pe)
    torch.testing.assert_close(gq.double(), _rotate_f64(q, wq, 1e-6, *pe, heads), rtol=tol, atol=tol)
    torch.testing.assert_close(gk.double(), _rotate_f64(k, wk, 1e-6, *k_pe, heads), rtol=tol, atol=tol)
    tq, tk = (dit_qk.norm_rope_torch(t, w, 1e-6, p, heads, torch.float64) for t, w, p in ((q, wq, pe), (k, wk, k_pe)))
    torch.testing.assert_close(tq, _rotate_f64(q, wq, 1e-6, *pe, heads), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tk, _rotate_f64(k, wk, 1e-6, *k_pe, heads), rtol=1e-5, atol=1e-5)


@triton.jit
def _to_e4m3(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n).to(tl.float8e4nv), mask=i < n)


def _e4m3_where_it_runs(x):
    """`x` cast to e4m3 as `qk_norm_rope` casts on its device: Triton's cast on a GPU or in the interpreter
    (whose cast rounds some values just below a power of two down to half of it: its mantissa carry is
    lost), torch's where the function takes its torch form (CPU tensors beside a GPU)."""
    x = x.float().contiguous()
    if not (x.is_cuda or interpreting()):
        return x.to(torch.float8_e4m3fn)
    y = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    _to_e4m3[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def test_with_scales_it_writes_e4m3(calls):
    attn, args, kwargs = calls["attn1"]
    with torch.inference_mode():
        q, k, pe, _ = _qk(attn, args, kwargs)
        want = dit_qk.qk_norm_rope(q, k, attn.q_norm.weight, attn.k_norm.weight, 1e-6, attn.heads, pe)
        scales = torch.stack([w.abs().amax() / 400 for w in want])
        got = dit_qk.qk_norm_rope(q, k, attn.q_norm.weight, attn.k_norm.weight, 1e-6, attn.heads, pe, scales=scales)
    for g, w, s in zip(got, want, scales):
        assert g.dtype == torch.float8_e4m3fn
        cast = _e4m3_where_it_runs(w.float() / s).float()
        # the same values as the cast of the float32 result, but for a few that sit at a rounding boundary
        # and land one e4m3 step (1/8 of their power of two) away
        near = (g.float() - cast).abs() <= cast.abs() / 8 + 2.0**-9
        assert near.all() and (g.float() != cast).float().mean() < 0.01


@torch.inference_mode()
def test_arguments_are_checked_up_front(calls):
    attn, args, kwargs = calls["attn1"]
    q, k, pe, _ = _qk(attn, args, kwargs)
    w = attn.q_norm.weight
    with pytest.raises(dit_qk.Refused, match="contiguous"):
        dit_qk.qk_norm_rope(torch.cat([q, q], -1)[..., ::2], k, w, w, 1e-6, attn.heads, pe)
    with pytest.raises(dit_qk.Refused, match="even head_dim"):
        dit_qk.qk_norm_rope(q, k, w, w, 1e-6, 5, pe)
    with pytest.raises(dit_qk.Refused, match="do not fit"):
        dit_qk.qk_norm_rope(q, k, w, w, 1e-6, attn.heads, (pe[0][:, :, :-1], pe[1][:, :, :-1]))
    with pytest.raises(dit_qk.Refused, match="weight must be"):
        dit_qk.qk_norm_rope(q, k, w[:-1], w, 1e-6, attn.heads, pe)
    with pytest.raises(dit_qk.Refused, match="float tensor"):
        dit_qk.qk_norm_rope(q.double(), k, w, w, 1e-6, attn.heads, pe)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_e4m3_outputs_match_torchs_rounding_on_the_gpu():
    """On the GPU (where Triton rounds to e4m3 as torch does; the interpreter does not), the fused
    kernels' e4m3 outputs are torch's e4m3 of the same fp32 values, but for values on a rounding tie:
    dit_qk's q/k, and fast_norm's ada_zero_rows / post_sa_rows; add_ada_zero_rows is ada_zero_rows of its
    stored sum, bit for bit."""
    from backends.runtime import fast_norm  # noqa: F401  (the ltx_tui ops)
    from kernels import adaln
    from kernels.int8_gemm import quantize_rows_torch
    from kernels.scale_cast import to_e4m3

    def same(got, want):
        g, w = got.float(), want.float()
        assert got.dtype == torch.float8_e4m3fn and (g == w).float().mean() > 0.999
        step = torch.where(w.abs() < 2**-6, 2**-9, w.abs() / 8)  # one e4m3 step (subnormals: 2^-9)
        worst = ((g - w).abs() / step).max()
        assert worst <= 1, f"{worst:.2f} e4m3 steps apart at most"

    g = torch.Generator("cuda").manual_seed(0)
    heads, half = 32, 64
    q, k = (torch.randn(1, 2048, heads * 2 * half, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    wq, wk = (torch.rand(heads * 2 * half, device="cuda", generator=g).to(torch.bfloat16) + 0.5 for _ in range(2))
    ang = torch.rand(1, 2048, heads, half, device="cuda", generator=g) * 6
    pe = tuple(f(ang).to(torch.bfloat16).transpose(1, 2) for f in (torch.cos, torch.sin))
    scales = torch.tensor([0.02, 0.03], device="cuda")
    got = dit_qk.qk_norm_rope(q, k, wq, wk, 1e-6, heads, pe, scales=scales)
    for o, t, w, s in zip(got, (q, k), (wq, wk), scales):
        same(o, to_e4m3(dit_qk.norm_rope_torch(t, w, 1e-6, pe, heads, torch.float32), s))
    ops = torch.ops.ltx_tui
    x, y = (torch.randn(1, 2048, 4096, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    scale, shift, gate = (torch.randn(1, 1, 4096, device="cuda", generator=g).to(torch.bfloat16) * 0.3
                          for _ in range(3))
    rows, row_scales = ops.ada_zero_rows(x, 1e-6, scale, shift)
    want, want_scales = quantize_rows_torch(adaln.ada_zero_torch(x, 1e-6, scale, shift).view(-1, 4096),
                                            torch.float8_e4m3fn)
    torch.testing.assert_close(row_scales, want_scales, rtol=8e-3, atol=0)  # a row max one bf16 step apart
    same(rows, want)
    mask = torch.tensor([0.0], device="cuda", dtype=torch.bfloat16).view(1, 1, 1) + 1
    res, rows, row_scales, rows2, row_scales2 = ops.add_ada_zero_rows(x, y, [gate, mask], 1e-6, [scale, shift],
                                                                      [shift, scale], [None, None])
    torch.testing.assert_close(res, (x.float() + y.float() * gate.float()).to(torch.bfloat16), rtol=0, atol=0)
    for (sc, sh), q, qs in (((scale, shift), rows, row_scales), ((shift, scale), rows2, row_scales2)):
        want, want_scales = ops.ada_zero_rows(res, 1e-6, sc, sh)
        assert torch.equal(qs, want_scales) and torch.equal(q.float(), want.float())
    res, rows, row_scales = ops.post_sa_rows(x, y, None, 1e-6, gate)
    want_res, normed = adaln.post_sa_torch(x, y, None, 1e-6, gate)
    want, want_scales = quantize_rows_torch(normed.view(-1, 4096), torch.float8_e4m3fn)
    torch.testing.assert_close(res, want_res)  # bf16's tolerance: an fma may round otherwise
    torch.testing.assert_close(row_scales, want_scales, rtol=8e-3, atol=0)  # a row max one bf16 step apart
    same(rows, want)
