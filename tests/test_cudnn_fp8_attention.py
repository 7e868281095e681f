"""cuDNN's fp8 attention (`sdpa_cudnn_fp8`) on an H100/H200 (run with -m gpu): against fp32 attention
written from its definition, through DenseFunction (which calls stay in bf16) and torch.compile."""

import copy

import pytest
import torch

from backends.runtime import cudnn_fp8_attention as fp8
from backends.runtime.dense_attention import FP8_MIN_TOKENS, DenseFunction, takes_fp8

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs an SM 9.0 GPU"),
              pytest.mark.skipif(fp8.unavailable_reason() is not None, reason=str(fp8.unavailable_reason()))]

BOUND = 0.1  # rel L2 against fp32 attention: e4m3 q, k, v, P and O (~6e-2 measured at scores of std 1)


def reference(q, k, v):
    """softmax(q k^T / sqrt(d)) v per head, in fp32, on (B, S, H, D)."""
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * q.shape[-1] ** -0.5
    return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v.float())


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_fp8_attention_under_cuda_graphs():
    """First in this file on purpose: a first call inside a compiled CUDA-graph step left cached scale
    tensors in the graph's pool ("tensor(s) in the cudagraph pool not tracked as outputs")."""
    fp8._GRAPHS.clear()
    fn = DenseFunction("sdpa_cudnn_fp8")
    g = torch.Generator("cuda").manual_seed(3)
    q, k, v = (torch.randn(1, 2048, 2 * 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    torch._dynamo.reset()
    step = torch.compile(lambda q, k, v: fn(q, k, v, 2) * 2, mode="reduce-overhead")
    with torch.inference_mode():
        for _ in range(3):  # the first calls of this process: warm-up, then recording, then a replay
            torch.compiler.cudagraph_mark_step_begin()
            got = step(q, k, v).clone()
        want = fn(q, k, v, 2) * 2
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("sq, skv, heads, d", [(1024, 1024, 4, 128), (2048, 1024, 2, 128), (1100, 1300, 2, 64)])
def test_fp8_attention_matches_fp32(sq, skv, heads, d):
    g = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn(1, n, heads, d, device="cuda", generator=g).to(torch.bfloat16) for n in (sq, skv, skv))
    v = v * 30  # O's scale follows v's: large values do not saturate
    out = fp8.sdpa_fp8(q, k, v)
    assert out.shape == q.shape and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert rel_l2(out, reference(q, k, v)) < BOUND


def test_dense_function_keeps_small_and_masked_calls_in_bf16():
    fn, exact = DenseFunction("sdpa_cudnn_fp8"), DenseFunction("sdpa_cudnn")
    g = torch.Generator("cuda").manual_seed(1)
    heads, d = 4, 128

    def qkv(nq, nk):
        return [torch.randn(1, n, heads * d, device="cuda", generator=g).to(torch.bfloat16) for n in (nq, nk, nk)]

    with torch.inference_mode():
        small = qkv(126, FP8_MIN_TOKENS)  # the audio tokens' cross-attention: bf16 (flash first: few queries)
        # bf16 on both sides, not bit for bit on the H200 (3e-4 apart on values ~1e-2): within bf16's
        # rounding (~3e-3), far below fp8's (~5e-2)
        assert rel_l2(fn(*small, heads), exact(*small, heads)) < 1e-2
        stage_1 = qkv(1536, 1536)  # distilled's stage 1 at 768x512: bf16
        assert not takes_fp8(1536, 1536) and torch.equal(fn(*stage_1, heads), exact(*stage_1, heads))
        big = qkv(2048, 2048)
        mask = torch.zeros(1, 2048, 2048, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(fn(*big, heads, mask), exact(*big, heads, mask))
        got, want = fn(*big, heads), exact(*big, heads)
        assert not torch.equal(got, want) and rel_l2(got, want) < BOUND


def test_fp8_attention_compiles_as_one_op():
    fn = DenseFunction("sdpa_cudnn_fp8")
    g = torch.Generator("cuda").manual_seed(2)
    q, k, v = (torch.randn(1, 2048, 2 * 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: fn(q * 1.5, k, v, 2) + 1, fullgraph=True)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(q, k, v), fn(q * 1.5, k, v, 2) + 1)



def test_static_q_k_scales_and_o_rows_match_fp32():
    """q and k handed over in e4m3 with given scales (or in bf16 with them), O left in e4m3 with its
    descale a row: dequantized, the same attention as the amax-scaled one."""
    from kernels import fp8_qkv
    from kernels.scale_cast import scale_cast

    g = torch.Generator("cuda").manual_seed(4)
    q, k, v = (torch.randn(1, n, 4, 128, device="cuda", generator=g).to(torch.bfloat16) for n in (2048, 3000, 3000))
    scales = torch.tensor([8 / 448, 6 / 448], device="cuda")  # above every |q|, |k| of these (~5 at most)
    want = reference(q, k, v)
    for qq, kk in ((q, k), (fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, qk_descale=scales)[:2])):
        o8, rows = fp8.sdpa_fp8_rows(qq, kk, v, qk_descale=scales)
        assert o8.dtype == torch.float8_e4m3fn and o8.shape == q.shape and rows.shape == (2048,)
        assert torch.all(rows == rows[0])
        got = scale_cast(o8.view(2048, -1), rows, torch.bfloat16, False).view(q.shape)
        assert rel_l2(got, want) < BOUND
    assert rel_l2(fp8.sdpa_fp8(q, k, v), want) < BOUND


def _ltx2_attention(heads=4, dim=64):
    from ltx_core.model.transformer.attention import Attention

    torch.manual_seed(0)
    attn = Attention(query_dim=heads * dim, heads=heads, dim_head=dim).to("cuda", torch.bfloat16).eval()
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.2, 2.0)
        attn.k_norm.weight.uniform_(0.2, 2.0)
    return attn


def _pe(tokens, heads, dim):
    """A rotation a head's pairs by angles, as LTX-2's SPLIT RoPE tables (B, heads, T, dim / 2)."""
    ang = torch.rand(1, heads, tokens, dim // 2, device="cuda") * 6.28
    return ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)


def _self_attention_case():
    """(x, pe, LTX-2's output, a copy of its attention to change): 2048 tokens of 4 heads x 64."""
    attn = _ltx2_attention()
    x = torch.randn(1, 2048, 256, device="cuda", dtype=torch.bfloat16)
    pe = _pe(2048, 4, 64)
    with torch.inference_mode():
        want = attn(x, pe=pe)
    return x, pe, want, copy.deepcopy(attn)


@pytest.mark.usefixtures("ltx2_core")
@pytest.mark.parametrize("fast_pre", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_ltx2_attention_with_fp8_to_out_and_static_q_k(compiled, fast_pre):
    """LTX-2's real Attention with fp8-scaled-mm linears and sdpa_cudnn_fp8 bound to it: q and k take
    QKBound's static scales (with fast_norm's pre-attention, which then writes them in e4m3 itself);
    compiled with runtime.shared_rows, to_out takes cuDNN's e4m3 O as it is (no dequantization, no row
    quantization left)."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    from backends.runtime import fast_norm, quant, shared_rows

    x, pe, want, ours = _self_attention_case()
    quant.quantize_linears(ours, "fp8-scaled-mm")
    ours.attention_function = DenseFunction("sdpa_cudnn_fp8").for_module(ours)
    assert ours.attention_function._qk is not None
    if fast_pre:
        # traced: its op in the compiled graph, as the plan has it for blocks that CUDA graphs replay
        ours.preattention_function = fast_norm.FastPreAttention(ours.preattention_function, traced=compiled)
        with torch.inference_mode():
            q8, _ = ours.preattention_function(ours.to_q(x), ours.to_k(x), ours, None, pe, None)
        assert q8.dtype == torch.float8_e4m3fn
    torch._dynamo.reset()
    with config.patch(post_grad_custom_post_pass=None, fx_graph_cache=False), torch.inference_mode():
        if compiled:
            assert shared_rows.install()
            got, code = run_and_get_code(torch.compile(ours), x, pe=pe)
            text = "\n".join(code)
            assert "ltx_tui.sdpa_fp8_rows.default(" in text
            assert "fp8_dequant_rows" not in text and text.count("ltx_tui.fp8_rows.default(") == 1  # x, once
            assert ("ltx_tui.dit_qk.default(" in text) == fast_pre
        else:
            got = ours(x, pe=pe)
    assert rel_l2(got, want) < BOUND



@pytest.mark.usefixtures("ltx2_core")
def test_ltx2_text_cross_attention_takes_fp8_with_static_q_k():
    """The video-text cross-attention (1024 context tokens, no RoPE) takes fp8 once q's and k's scales
    are static (only v is reduced), with fast_norm's pre-attention writing q and k in e4m3."""
    from ltx_core.model.transformer.attention import Attention

    from backends.runtime import fast_norm, quant

    torch.manual_seed(1)
    attn = Attention(query_dim=256, context_dim=128, heads=4, dim_head=64).to("cuda", torch.bfloat16).eval()
    x = torch.randn(1, 2048, 256, device="cuda", dtype=torch.bfloat16)
    context = torch.randn(1, 1024, 128, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        want = attn(x, context=context)
        ours = copy.deepcopy(attn)
        quant.quantize_linears(ours, "fp8-scaled-mm")
        plain = DenseFunction("sdpa_cudnn_fp8")
        ours.attention_function = plain.for_module(ours)
        ours.preattention_function = fast_norm.FastPreAttention(ours.preattention_function)
        q8, k8 = ours.preattention_function(ours.to_q(x), ours.to_k(context), ours, None, None, None)
        assert q8.dtype == k8.dtype == torch.float8_e4m3fn
        got = ours(x, context=context)
        ours.attention_function = plain  # no static scales: bf16 cuDNN at 1024 kv tokens
        ours.preattention_function = ours.preattention_function.own
        bf16 = ours(x, context=context)
    assert rel_l2(got, want) < BOUND and rel_l2(bf16, want) < BOUND and not torch.equal(got, bf16)


@pytest.mark.usefixtures("ltx2_core")
def test_ltx2_attention_with_v_in_e4m3_from_its_gemm():
    """to_v a `v_e4m3.VProjection`: compiled with runtime.shared_rows, its GEMM writes v in e4m3 by the
    bounded scale and the attention takes it as it is (no v quantization left); eagerly, bf16 v."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    from backends.runtime import quant, shared_rows, v_e4m3

    x, pe, want, ours = _self_attention_case()
    ours.attention_function = DenseFunction("sdpa_cudnn_fp8").for_module(ours)
    ours.to_v = v_e4m3.VProjection(ours.to_v)
    quant.quantize_linears(ours, "fp8-scaled-mm")
    torch._dynamo.reset()
    with config.patch(post_grad_custom_post_pass=None, fx_graph_cache=False), torch.inference_mode():
        eager = ours(x, pe=pe)
        assert shared_rows.install()
        got, code = run_and_get_code(torch.compile(ours), x, pe=pe)
    text = "\n".join(code)
    assert "ltx_tui.fp8_tensor_mm_e4m3.default(" in text and "ltx_tui.fp8_tensor_mm.default(" not in text
    assert rel_l2(got, want) < BOUND and rel_l2(eager, want) < BOUND
