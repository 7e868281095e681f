"""`runtime.dense_attention.QKBound`: static e4m3 scales for q and k after LTX-2's own pre-attention
(its q/k RMSNorm and RoPE), checked on LTX-2's real attention modules and the positional embeddings
its LTXModel makes."""

import copy

import pytest
import torch

from backends.runtime import dense_attention
from backends.runtime.dense_attention import QK_HEADROOM, DenseFunction, QKBound

FP8_MAX = 448.0


@pytest.fixture(scope="module")
def attn1_and_pe(ltx2_core):
    """A tiny LTXModel's first video self-attention and the RoPE it is called with."""
    from backends.runtime import ltx2

    model = ltx2.tiny_transformer(layers=1)
    attn = model.transformer_blocks[0].attn1
    seen = {}
    attn.register_forward_pre_hook(lambda m, args, kwargs: seen.update(kwargs), with_kwargs=True)
    with torch.inference_mode():
        model(*ltx2.transformer_inputs(tokens=23))
    return attn, seen["pe"]


def _pre(attn, q, k, pe):
    with torch.inference_mode():
        return attn.preattention_function(q, k, attn, None, pe, None)


def test_the_bound_holds_and_is_tight_for_ltx2s_pre_attention(attn1_and_pe):
    attn, pe = attn1_and_pe
    attn = copy.deepcopy(attn)
    g = torch.Generator().manual_seed(0)
    inner = attn.q_norm.normalized_shape[0]
    with torch.no_grad():
        attn.q_norm.weight.copy_(torch.randn(inner, generator=g) * 3)
        attn.k_norm.weight.copy_(torch.rand(inner, generator=g) * 0.1)
    bound = QKBound(attn)
    assert QKBound.applies(attn)
    dq, dk = bound.descale(torch.device("cpu")).tolist()
    tokens = pe[0].shape[-2]
    # random rows, rows with one large element (all of a row's energy in one place: the bound's case)
    spiky = torch.zeros(1, tokens, inner)
    spiky[0, torch.arange(tokens), torch.arange(tokens) % inner] = 1e3
    for x in (torch.randn(1, tokens, inner, generator=g) * 5, spiky):
        q, k = _pre(attn, x, x, pe)
        assert q.abs().max() <= dq * FP8_MAX / QK_HEADROOM * 1.01
        assert k.abs().max() <= dk * FP8_MAX / QK_HEADROOM * 1.01
    q, _ = _pre(attn, spiky, spiky, pe)  # a one-hot row reaches sqrt(n) * |w|: the bound is not loose
    peak = attn.q_norm.weight.abs().amax() * inner ** 0.5
    assert q.abs().max() >= 0.3 * peak


def test_the_scales_follow_the_weights_and_leave_other_pre_attention_alone(attn1_and_pe):
    attn = copy.deepcopy(attn1_and_pe[0])
    bound = QKBound(attn)
    cpu = torch.device("cpu")
    first = bound.descale(cpu)
    with torch.no_grad():
        attn.q_norm.weight.mul_(2)  # an in-place change (a state dict load) is seen
    assert bound.descale(cpu)[0] == pytest.approx(2 * first[0].item())
    attn.preattention_function = lambda q, k, *rest: (q * 100, k)  # someone else's: no static bound
    assert not QKBound.applies(attn) and bound.descale(cpu) is None


def test_for_module_binds_the_bound_only_for_fp8(attn1_and_pe, monkeypatch):
    attn = attn1_and_pe[0]
    plain = DenseFunction("sdpa_cudnn")
    assert plain.for_module(attn) is plain
    monkeypatch.setattr(plain, "_fp8", object())  # as sdpa_cudnn_fp8 would have it (cuDNN is CUDA's)
    bound = plain.for_module(attn)
    assert bound is not plain and isinstance(bound._qk, QKBound) and bound._qk.module is attn
    assert bound.name == plain.name and plain._qk is None
    other = copy.deepcopy(attn)
    other.preattention_function = lambda q, k, *rest: (q, k)
    assert plain.for_module(other) is plain
    monkeypatch.setattr(dense_attention, "STATIC_QK", False)  # the bench's `:amax-qk` ablation
    assert bound._qk.descale(torch.device("cpu")) is None


def test_the_scales_of_weights_loaded_under_inference_mode(attn1_and_pe):
    """LTX-2's pipelines load weights under torch.inference_mode: inference tensors have no version
    counter (a cache keyed on `_version` raised "Inference tensors do not track version counter" on the
    first fp8 call), and a change in place there is seen all the same."""
    with torch.inference_mode():
        attn = copy.deepcopy(attn1_and_pe[0])
        assert attn.q_norm.weight.is_inference()
        bound = QKBound(attn)
        first = bound.descale(torch.device("cpu"))
        want = attn.q_norm.weight.abs().amax() * attn.q_norm.normalized_shape[0] ** 0.5 * QK_HEADROOM / FP8_MAX
        attn.k_norm.weight.mul_(3)
        assert bound.descale(torch.device("cpu"))[1] == pytest.approx(3 * first[1].item())
    assert first[0].item() == pytest.approx(want.item())
