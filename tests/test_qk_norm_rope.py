"""The fused q/k RMSNorm + 3-axis RoPE kernel against a brute-force reference of its definition."""

import math

import pytest
import torch

from kernels import qk_norm_rope as K


def brute_force(qkv, heads, norm_weight, thw, split, w_pos, inv, q_scale, eps=1e-6):
    """Per token, head and pair, as the module docstring says it (loops over axes, no tables)."""
    t, h, w = thw
    head_dim = qkv.shape[-1] // (3 * heads)
    x = qkv.double().reshape(-1, t, h, w, 3, heads, head_dim)
    outs = []
    for which, scale in ((0, q_scale), (1, 1.0)):
        y = x[..., which, :, :]
        y = y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps) * norm_weight[which].double() * scale
        out = y.clone()
        start = 0
        for axis, (d, positions) in enumerate(zip(split, (torch.arange(t), torch.arange(h), w_pos))):
            for i in range(d // 2):
                shape = [1, 1, 1, 1, 1]
                shape[axis + 1] = -1
                ang = (positions.double() * inv[axis][i].double()).reshape(shape)
                a, b = y[..., start + 2 * i], y[..., start + 2 * i + 1]
                out[..., start + 2 * i] = a * torch.cos(ang) - b * torch.sin(ang)
                out[..., start + 2 * i + 1] = a * torch.sin(ang) + b * torch.cos(ang)
            start += d
        outs.append(out.reshape(*qkv.shape[:-1], heads, head_dim))
    return outs


def case(dtype, thw=(3, 4, 5), heads=2, head_dim=16, split=(4, 6, 6), batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(batch, *thw, 3 * heads * head_dim, generator=g).to(dtype)
    norm_weight = torch.rand(2, head_dim, generator=g) + 0.5
    inv = [1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d) for d in split]
    w_pos = torch.arange(thw[2], dtype=torch.float32) - 2 + 7  # a slab's global columns (halo 2, start 7)
    cos, sin = K.rope_tables(thw[0], thw[1], w_pos, *inv)
    return qkv, heads, norm_weight, cos, sin, thw, split, w_pos, inv


@pytest.mark.parametrize("impl", [K.qk_norm_rope_torch, K.qk_norm_rope_triton])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 4e-3)])
def test_matches_brute_force(impl, dtype, tol):
    qkv, heads, nw, cos, sin, thw, split, w_pos, inv = case(dtype)
    q, k = impl(qkv, heads, nw, cos, sin, thw, split, q_scale=0.25)
    ref_q, ref_k = brute_force(qkv, heads, nw, thw, split, w_pos, inv, 0.25)
    assert q.shape == k.shape == (2, *thw, heads, 16) and q.dtype == dtype and q.is_contiguous()
    for got, ref in ((q, ref_q), (k, ref_k)):
        assert (got.double() - ref).abs().max().item() < tol * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("impl", [K.qk_norm_rope_split_torch, K.qk_norm_rope_split_triton])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 4e-3)])
def test_split_form_matches_brute_force(impl, dtype, tol):
    """q and k given as two tensors (LTX-2's det stages project them apart): the same results."""
    qkv, heads, nw, cos, sin, thw, split, w_pos, inv = case(dtype)
    q_in, k_in, _ = (x.unflatten(-1, (heads, -1)).contiguous() for x in qkv.chunk(3, dim=-1))
    q, k = impl(q_in, k_in, nw, cos, sin, thw, split, q_scale=0.25)
    ref_q, ref_k = brute_force(qkv, heads, nw, thw, split, w_pos, inv, 0.25)
    assert q.shape == k.shape == (2, *thw, heads, 16) and q.dtype == dtype and q.is_contiguous()
    for got, ref in ((q, ref_q), (k, ref_k)):
        assert (got.double() - ref).abs().max().item() < tol * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("q_k,message", [
    (lambda q, k: (q, k[..., :-2]), "one shape and dtype"),
    (lambda q, k: (q, k.double()), "one shape and dtype"),
    (lambda q, k: (q.transpose(-1, -2).contiguous().transpose(-1, -2), k), "contiguous"),
    (lambda q, k: (q[:, :2].contiguous(), k[:, :2].contiguous()), "whole number"),
])
def test_split_form_bad_arguments_say_what_is_expected(q_k, message):
    qkv, heads, nw, cos, sin, thw, split, _, _ = case(torch.float32)
    q, k, _ = (x.unflatten(-1, (heads, -1)).contiguous() for x in qkv.chunk(3, dim=-1))
    q, k = q_k(q, k)
    with pytest.raises(ValueError, match=message):
        K.qk_norm_rope_split(q, k, nw, cos, sin, thw, split)


def test_triton_odd_sizes_and_head_dim_not_a_power_of_two():
    """head_dim 24 (12 pairs, padded to 16 lanes), tokens not a multiple of the block."""
    qkv, heads, nw, cos, sin, thw, split, w_pos, inv = case(torch.float32, thw=(2, 3, 7), heads=3, head_dim=24,
                                                            split=(8, 8, 8), batch=1)
    q, k = K.qk_norm_rope_triton(qkv, heads, nw, cos, sin, thw, split, q_scale=1 / math.sqrt(24))
    ref_q, ref_k = brute_force(qkv, heads, nw, thw, split, w_pos, inv, 1 / math.sqrt(24))
    assert (q.double() - ref_q).abs().max() < 1e-5 and (k.double() - ref_k).abs().max() < 1e-5


@pytest.mark.parametrize("change,message", [
    (dict(heads=5), "3 \\* heads \\* head_dim"),
    (dict(split=(4, 6, 8)), "sum to head_dim"),
    (dict(split=(5, 5, 6)), "even"),
    (dict(thw=(3, 4, 4)), "whole number"),
    (dict(norm_weight=torch.ones(16)), "norm_weight must be"),
])
def test_bad_arguments_say_what_is_expected(change, message):
    qkv, heads, nw, cos, sin, thw, split, _, _ = case(torch.float32)
    args = dict(qkv=qkv, heads=heads, norm_weight=nw, cos=cos, sin=sin, thw=thw, split=split) | change
    with pytest.raises(ValueError, match=message):
        K.qk_norm_rope_torch(**args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_stage5_slab():
    """LTX-2's stage-5 slab shape class (head_dim 64, split 16/24/24, 2 heads), bf16, on the GPU."""
    qkv, heads, nw, cos, sin, thw, split, w_pos, inv = case(torch.bfloat16, thw=(9, 16, 54), heads=2,
                                                            head_dim=64, split=(16, 24, 24), batch=1)
    qkv, nw, cos, sin = (x.cuda() for x in (qkv, nw, cos, sin))
    q, k = K.qk_norm_rope_triton(qkv, heads, nw, cos, sin, thw, split, q_scale=0.125)
    ref_q, ref_k = brute_force(qkv.cpu(), heads, nw.cpu(), thw, split, w_pos, inv, 0.125)
    for got, ref in ((q, ref_q), (k, ref_k)):
        assert (got.cpu().double() - ref).abs().max().item() < 2e-2 * ref.abs().max().item()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_split_form_det_stage():
    """The two-tensor form at a det stage's shape class (head_dim 64, 4 heads), bf16, on the GPU."""
    qkv, heads, nw, cos, sin, thw, split, w_pos, inv = case(torch.bfloat16, thw=(5, 12, 20), heads=4,
                                                            head_dim=64, split=(16, 24, 24), batch=1)
    q_in, k_in, _ = (x.unflatten(-1, (heads, -1)).contiguous().cuda() for x in qkv.chunk(3, dim=-1))
    q, k = K.qk_norm_rope_split_triton(q_in, k_in, nw.cuda(), cos.cuda(), sin.cuda(), thw, split, q_scale=0.125)
    ref_q, ref_k = brute_force(qkv, heads, nw, thw, split, w_pos, inv, 0.125)
    for got, ref in ((q, ref_q), (k, ref_k)):
        assert (got.cpu().double() - ref).abs().max().item() < 2e-2 * ref.abs().max().item()
