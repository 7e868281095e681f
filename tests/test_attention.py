import pytest
import torch

from backends.runtime.attention import BackendUnavailable, available_backends, choose_backend, na3d
from backends.machine.presets import preset
from fakes import without
from kernels.na3d_reference import na3d_reference


def rand(shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]


def test_cpu_backends_and_reasons():
    q, _, _ = rand((1, 3, 4, 5, 2, 16))
    avail = available_backends(q, preset("cpu"))
    assert avail["eager_sdpa"].available and avail["reference"].available
    assert not avail["triton"].available and "cpu" in avail["triton"].reason
    assert avail["natten:flex-fna"].available
    assert not avail["natten:hopper-fna"].available and "libnatten" in avail["natten:hopper-fna"].reason


def test_auto_on_cpu_is_eager_and_matches_reference():
    q, k, v = rand((1, 3, 4, 5, 2, 16))
    assert choose_backend(q, "auto", preset("cpu")) == "eager_sdpa"
    torch.testing.assert_close(na3d(q, k, v, 3, capability=preset("cpu")), na3d_reference(q, k, v, 3))


def test_named_backends_match_reference():
    q, k, v = rand((2, 3, 4, 6, 2, 16))
    want = na3d_reference(q, k, v, (3, 3, 5), is_causal=(True, False, False))
    for backend in ("eager_sdpa", "reference", "natten:flex-fna"):
        if backend.startswith("natten"):
            pytest.importorskip("natten")
        got = na3d(q, k, v, (3, 3, 5), backend=backend, is_causal=(True, False, False))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_natten_picks_a_usable_kernel():
    pytest.importorskip("natten")
    q, _, _ = rand((1, 3, 4, 5, 2, 16))
    assert choose_backend(q, "natten", preset("cpu")) == "natten:flex-fna"


def test_unavailable_backends_raise_with_reason():
    q, k, v = rand((1, 3, 4, 5, 2, 16))
    with pytest.raises(BackendUnavailable, match="triton cannot run here: .*cpu"):
        na3d(q, k, v, 3, backend="triton")
    with pytest.raises(BackendUnavailable, match="natten cannot run here: natten is not importable"):
        choose_backend(q, "natten", without(preset("cpu"), "natten"))


def test_bad_requests():
    q, k, v = rand((1, 3, 4, 5, 2, 16))
    with pytest.raises(ValueError, match="unknown NA backend 'cuda'.*natten:hopper-fna"):
        na3d(q, k, v, 3, backend="cuda")
    with pytest.raises(ValueError, match="larger than the axis"):
        na3d(q, k, v, (5, 3, 3))
    with pytest.raises(ValueError, match="shapes must match"):
        na3d(q, k[:, :, :3], v, 3)
    with pytest.raises(TypeError, match="dtypes must match"):
        na3d(q, k.half(), v, 3)
