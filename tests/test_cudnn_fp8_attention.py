"""cuDNN's fp8 attention (`sdpa_cudnn_fp8`) on an H100/H200 (run with -m gpu): against fp32 attention
written from its definition, through DenseFunction (which calls stay in bf16) and torch.compile."""

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
        small = qkv(126, FP8_MIN_TOKENS)  # the audio tokens' cross-attention: bf16, bit for bit
        assert torch.equal(fn(*small, heads), exact(*small, heads))
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

