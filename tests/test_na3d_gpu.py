"""The Triton NA kernel on a CUDA device: DiffVAE shapes and the edge cases (run with -m gpu)."""

import math

import pytest
import torch

from kernels.na3d_eager import na3d_eager
from kernels.na3d_reference import na3d_reference

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def rand(shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(shape, generator=g, device="cuda").to(dtype) for _ in range(3)]


@pytest.fixture(scope="module")
def na3d_triton():
    from kernels.na3d_triton import na3d_triton
    return na3d_triton


@pytest.mark.parametrize("thw, heads, kernel", [
    ((18, 34, 60), 32, (3, 7, 7)),
    ((18, 68, 120), 16, (3, 7, 7)),
    ((35, 68, 120), 8, (3, 5, 5)),
    ((48, 128, 128), 4, (3, 7, 7)),
])
def test_diffvae_shapes_bf16(na3d_triton, thw, heads, kernel):
    q, k, v = rand((1, *thw, heads, 64), torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    out.copy_(na3d_triton(q, k, v, kernel))
    ref = na3d_eager(q.float(), k.float(), v.float(), kernel)
    assert not out.isnan().any()
    # bf16 cannot hold ref closer than half an ulp (7.8e-3 for |ref| in [2, 4)): the bound
    # is 4e-3 beyond that rounding, elementwise.
    rounding = (ref.to(torch.bfloat16).float() - ref).abs()
    assert ((out.float() - ref).abs() - rounding).max().item() <= 4e-3


@pytest.mark.parametrize("shape, kernel, causal", [
    ((2, 6, 11, 13, 3, 32), (3, 5, 7), False),          # B>1, head_dim 32
    ((1, 5, 9, 20, 2, 128), (3, 3, 5), False),          # head_dim 128
    ((1, 4, 10, 12, 2, 64), (2, 4, 6), False),          # even kernels
    ((1, 3, 7, 9, 1, 64), (3, 7, 9), False),            # kernel == axis length
    ((1, 1, 2, 3, 5, 64), (1, 2, 2), False),            # tiny axes
    ((1, 6, 9, 17, 2, 64), (3, 5, 7), (True, False, False)),  # causal in time
    ((1, 5, 6, 7, 2, 64), (2, 3, 3), True),
    ((1, 4, 5, 6, 3, 40), (3, 3, 3), False),            # head_dim 40, padded in the kernel
])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_edge_cases_against_reference(na3d_triton, shape, kernel, causal, dtype, tol):
    from kernels.na3d_triton import CONFIGS

    q, k, v = rand(shape, dtype)
    want = na3d_reference(q.float(), k.float(), v.float(), kernel, is_causal=causal)
    got = na3d_triton(q, k, v, kernel, is_causal=causal, config=CONFIGS[0])
    assert (got.float() - want).abs().max().item() < tol


@pytest.mark.parametrize("shape, kernel, causal, dtype", [
    ((2, 5, 19, 21, 2, 64), (3, 7, 7), (False, True, False), torch.float16),
    ((1, 4, 9, 11, 1, 32), (2, 4, 5), False, torch.float32),
])
def test_every_tile_config_is_correct(na3d_triton, shape, kernel, causal, dtype):
    """Autotuning may pick any config: each must compute the same function."""
    from kernels.na3d_triton import CONFIGS

    for index, config in enumerate(CONFIGS):
        q, k, v = rand(shape, dtype, seed=index)
        want = na3d_reference(q.float(), k.float(), v.float(), kernel, is_causal=causal)
        got = na3d_triton(q, k, v, kernel, is_causal=causal, config=config)
        err = (got.float() - want).abs().max().item()
        assert err < (1e-4 if dtype == torch.float32 else 2e-3), f"{config}: max error {err}"


def test_noncontiguous(na3d_triton):
    base = torch.randn(1, 4, 12, 10, 2, 64, device="cuda", dtype=torch.float16)
    q = base.transpose(2, 3)  # (1, 4, 10, 12, 2, 64), non-contiguous
    k, v = q.clone(), q.flip(1)
    want = na3d_reference(q.float(), k.float(), v.float(), (3, 3, 5))
    assert (na3d_triton(q, k, v, (3, 3, 5)).float() - want).abs().max().item() < 2e-3


def test_more_batch_heads_than_one_grid_axis(na3d_triton):
    from kernels.na3d_triton import CONFIGS

    q, k, v = rand((1, 1, 2, 4, 70000, 16), torch.float16)
    want = na3d_reference(q.float(), k.float(), v.float(), (1, 2, 3))
    assert (na3d_triton(q, k, v, (1, 2, 3), config=CONFIGS[0]).float() - want).abs().max().item() < 2e-3


def test_tuned_then_launched_straight_per_size_class(na3d_triton):
    """The first call of a key autotunes; later calls (and the grid's later bh chunks) launch the
    chosen tile directly. Both, and a second size class, compute the same function."""
    from kernels import na3d_triton as mod

    mod._CHOSEN.clear()
    for shape in ((1, 4, 9, 10, 2, 64), (1, 8, 16, 16, 4, 64), (1, 1, 2, 4, 70000, 16)):  # classes -4, 0, 4
        kernel = (1, 2, 3) if shape[1] == 1 else (3, 5, 5)
        q, k, v = rand(shape, torch.float16)
        want = na3d_reference(q.float(), k.float(), v.float(), kernel)
        for _ in range(2):
            assert (na3d_triton(q, k, v, kernel).float() - want).abs().max().item() < 2e-3
    assert len({key[-2] for key in mod._CHOSEN}) == 3  # three size keys, each tuned once


def test_repeated_calls_launch_straight_and_match_the_reference(na3d_triton):
    """From a key's third call on, the compiled kernel is launched straight (checked bit for bit
    against Triton's launch once): still right where Triton specializes an argument (T, heads = 1;
    a tensor off 16-byte alignment next to an aligned one of the same shape and strides; the
    general-strides kernel). New values every call: a launch that wrote nothing would keep the last."""
    from kernels import na3d_triton as mod

    def odd(shape, dtype):  # 2-byte aligned, contiguous
        n = math.prod(shape)
        return [torch.empty(n + 1, device="cuda", dtype=dtype)[1:].view(shape) for _ in range(3)]

    mod._PLANS.clear()
    mod._COMPILED.clear()
    cases = [rand((1, 1, 8, 8, 1, 64), torch.float16), rand((2, 4, 9, 10, 3, 32), torch.bfloat16),
             odd((2, 4, 9, 10, 3, 32), torch.bfloat16),
             [rand((1, 4, 10, 9, 2, 64), torch.float16)[0].transpose(2, 3),  # the general-strides kernel
              *rand((1, 4, 9, 10, 2, 64), torch.float16)[1:]]]
    for q, k, v in cases:
        kernel = (1, 3, 3) if q.shape[1] == 1 else (3, 3, 5)
        for _ in range(4):
            for t in (q, k, v):
                t.normal_()
            want = na3d_reference(q.float(), k.float(), v.float(), kernel)
            assert (na3d_triton(q, k, v, kernel).float() - want).abs().max().item() < 1.6e-2
    assert mod._FAST_OK == [True] and len(mod._PLANS) == len(cases)


def test_registry_auto_picks_triton_on_cuda():
    from backends.runtime.attention import available_backends, choose_backend, na3d

    q, k, v = rand((1, 4, 9, 10, 2, 64), torch.bfloat16)
    avail = available_backends(q)
    assert avail["triton"].available and avail["eager_sdpa"].available
    assert choose_backend(q) == "triton"
    want = na3d_reference(q.float(), k.float(), v.float(), (3, 5, 5))
    for backend in ("auto", "triton", "eager_sdpa"):
        assert (na3d(q, k, v, (3, 5, 5), backend=backend).float() - want).abs().max().item() < 1.6e-2


_FIRST_CALL = """
import torch
from kernels import na3d_triton as mod
calls, real = [], mod.precompile
mod.precompile = lambda *args: calls.append(1) or real(*args)
q = torch.randn(1, 6, 20, 24, 2, 64, device="cuda", dtype=torch.bfloat16)
mod.na3d_triton(q, q, q, (3, 7, 7))
torch.cuda.synchronize()
print(len(calls))
"""


def test_a_later_process_finds_the_tile_choice_on_disk_and_compiles_no_other_tile(tmp_path):
    """The first process autotunes (its tiles compiled in threads first); the next one, with the same
    Triton cache, takes the choice from disk: nothing is timed, so nothing is compiled ahead."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path))

    def first_call() -> str:
        done = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True,
                              timeout=180, cwd=Path(__file__).resolve().parents[1])
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-1]

    assert first_call() == "1"
    assert first_call() == "0"
