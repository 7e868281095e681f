"""The fused stage-5 MLP (x += swiglu(modulate(rms_norm(x)))) against LTX-2's own chunked op."""

import pytest
import torch

from kernels import swiglu_residual as K
from kernels.na3d_triton import interpreting

needs_triton = pytest.mark.skipif(not (torch.cuda.is_available() or interpreting()),
                                  reason="the kernel needs a CUDA device or TRITON_INTERPRET=1")


def case(dtype, n=300, c=64, hidden=256, lead=(1,), seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, generator=g) * std).to(device=device, dtype=dtype)

    return (rnd(*lead, n, c), 1 + rnd(c, std=0.1), rnd(1, 1, c, std=0.1), rnd(1, 1, c, std=0.1),
            rnd(hidden, c, std=c**-0.5), rnd(hidden, c, std=c**-0.5), rnd(c, hidden, std=hidden**-0.5))


def ltx2s(ltx2_core, x, nw, sc, sh, wg, wu, wd, use_triton=False):
    """LTX-2's `ltx_core::swiglu_tiled_residual_modulated` body, in place on a copy of x."""
    from ltx_core.model.video_vae.transformer.chunked.mlp import _chunked_residual_modulated_impl
    from ltx_core.model.video_vae.transformer.swiglu import SwiGLUTileSpec, token_intervals

    out = x.clone()
    n = x.numel() // x.shape[-1]
    _chunked_residual_modulated_impl(out, nw, sc, sh, wg, wu, wd, token_intervals(n, SwiGLUTileSpec(tile_size=128)),
                                     use_triton=use_triton)
    return out


@pytest.mark.ltx2
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1 / 32), (torch.float16, 1 / 256)])
def test_torch_version_is_ltx2s_op(ltx2_core, dtype, tol):
    """fp32: LTX-2's numbers up to summation order; half: within one rounding step of the output
    (|x| < 8). More tokens than the torch version's tile, so its tiling is crossed too."""
    args = case(dtype, n=K.TORCH_TILE + 300)
    want = ltx2s(ltx2_core, *args)
    got = K.swiglu_residual_torch(args[0].clone(), *args[1:])
    assert want.abs().max() < 8
    assert (got.float() - want.float()).abs().max().item() <= tol


@needs_triton
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("n,hidden,config", [(300, 256, "m64h64w4s3"), (77, 200, "m128h64w8s2"),
                                             (129, 128, "m64h128w4s2")])
def test_kernel_matches_torch_version(dtype, tol, n, hidden, config):
    """Tokens not a multiple of the block, hidden not a multiple of BLOCK_H (masked), each config's
    tiles (Triton's interpreter off CUDA); in place: the returned tensor is x."""
    args = case(dtype, n=n, hidden=hidden, lead=(1, 1))
    x = args[0].clone()
    want = K.swiglu_residual_torch(args[0].clone(), *args[1:])
    got = K.swiglu_residual_triton(x, *args[1:], config=config)
    assert got is x
    assert (got.float() - want.float()).abs().max().item() < tol * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("change,message", [
    (lambda a: {**a, "x": a["x"].transpose(0, 1)}, "contiguous"),
    (lambda a: {**a, "w_down": a["w_down"].t()}, "w_down"),
    (lambda a: {**a, "scale": torch.zeros(2, 1, 64)}, "scale must hold one value per channel"),
])
@pytest.mark.parametrize("run", [K.swiglu_residual_torch, K.swiglu_residual_triton])
def test_bad_arguments_say_what_is_expected(change, message, run):
    x, nw, sc, sh, wg, wu, wd = case(torch.float32, n=8, lead=(2,))
    args = change(dict(x=x, norm_weight=nw, scale=sc, shift=sh, w_gate=wg, w_up=wu, w_down=wd))
    with pytest.raises(ValueError, match=message):
        run(**args)


@pytest.mark.parametrize("c,config", [(48, K.DEFAULT_CONFIG), (256, K.DEFAULT_CONFIG), (64, "m1")])
def test_what_the_kernel_cannot_run_is_refused_before_a_launch(c, config):
    """Widths outside 16-128 (256's weight tiles do not fit shared memory) and unknown tiles."""
    args = case(torch.float32, n=8, c=c, hidden=64)
    message = f"takes 16, 32, 64, 128 channels; got {c}" if config != "m1" else "unknown config 'm1'"
    assert K.supports(c) is (c in (16, 32, 64, 128))
    with pytest.raises(ValueError, match=message):
        K.swiglu_residual_triton(*args, config=config)


@pytest.mark.gpu
@pytest.mark.ltx2
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("config", list(K.CONFIGS))
def test_cuda_bf16_stage5_shape_matches_ltx2s_triton_op(ltx2_core, config):
    """The decoder's stage-5 widths (128 -> 512), bf16, against LTX-2's op with its own Triton
    kernels: within two rounding steps of the output."""
    args = case(torch.bfloat16, n=70_001, c=128, hidden=512, device="cuda")
    want = ltx2s(ltx2_core, *args, use_triton=True)
    got = K.swiglu_residual_(args[0].clone(), *args[1:], config=config)
    torch.cuda.synchronize()
    assert (got.float() - want.float()).abs().max().item() <= 2 * 2.0**-7 * want.abs().max().item()


def test_runtime_mlp_runs_inference_only():
    """The kernel writes x outside autograd: with gradients wanted it refuses, saying how to run."""
    from types import SimpleNamespace

    from backends.runtime.diffvae_mlp import residual_mlp

    x, nw, sc, sh, wg, wu, wd = case(torch.float32, n=8)
    mlp = SimpleNamespace(w_gate=SimpleNamespace(weight=wg), w_up=SimpleNamespace(weight=wu),
                          w_down=SimpleNamespace(weight=wd))
    norm = SimpleNamespace(weight=nw)
    with pytest.raises(RuntimeError, match="inference"):
        residual_mlp(x.clone().requires_grad_(), mlp, norm, sc, sh)
    with torch.inference_mode():
        want = K.swiglu_residual_torch(x.clone(), nw, sc, sh, wg, wu, wd)
        torch.testing.assert_close(residual_mlp(x.clone(), mlp, norm, sc, sh), want)
