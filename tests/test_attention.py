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


def test_the_runtime_path_decides_once_and_skips_the_op_dispatch_when_eager(monkeypatch):
    """The decoder makes hundreds of NA calls a decode: neither the backend choice nor the custom
    op's dispatch may be paid on every eager call (bench/na3d.py's per-call row)."""
    import types

    from backends.runtime import attention

    q, k, v = rand((1, 3, 4, 5, 2, 16))
    decided = []
    real = attention._choose
    monkeypatch.setattr(attention, "_CHOSEN", {})
    monkeypatch.setattr(attention, "_choose", lambda *a: decided.append(a[1]) or real(*a))

    def no_dispatch(*args):
        raise AssertionError("the custom op was dispatched on an eager call")
    monkeypatch.setattr(attention, "_na3d_eager_op", no_dispatch)
    attention.implementation.cache_clear()
    try:
        fn = attention.NAFunction("auto")
        attn = types.SimpleNamespace(kernel_size=(3, 3, 3))
        with torch.inference_mode():
            outs = [fn(attn, q, k, v) for _ in range(3)] + [na3d(q, k, v, 3, scale=1.0) for _ in range(3)]
    finally:
        attention.implementation.cache_clear()
    assert decided == ["auto"]
    for out in outs:
        torch.testing.assert_close(out, na3d_reference(q, k, v, 3, scale=1.0), atol=1e-4, rtol=1e-4)


def test_compiled_callers_keep_the_na_call_in_one_graph():
    """Under torch.compile the NA call is the custom op (one graph, no break into the kernel)."""
    import types

    from backends.runtime.attention import NAFunction

    q, k, v = rand((1, 3, 4, 5, 2, 16))
    fn = NAFunction("eager_sdpa")
    attn = types.SimpleNamespace(kernel_size=(3, 3, 3))
    graphs = []

    def backend(gm, inputs):
        graphs.append([n.target for n in gm.graph.nodes])
        return gm.forward
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: fn(attn, q * 1.0, k, v) + 1.0, backend=backend, fullgraph=True)
    with torch.inference_mode():
        out = compiled(q, k, v)
    assert len(graphs) == 1 and torch.ops.ltx_tui.na3d_eager.default in graphs[0]
    torch.testing.assert_close(out, na3d_reference(q, k, v, 3, scale=1.0) + 1.0, atol=1e-4, rtol=1e-4)


def test_the_public_api_refuses_a_forward_that_needs_gradients():
    """Its kernels have no backward: a call that would need one is refused up front (the eager path
    no longer goes through the custom op, which used to raise at backward)."""
    q, k, v = rand((1, 3, 4, 5, 2, 16))
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="inference only"):
        na3d(q, k, v, 3, backend="eager_sdpa")
    na3d(q, k, v, 3, backend="reference").sum().backward()  # the brute force one autograd can follow
    assert q.grad is not None
    with torch.no_grad():
        na3d(q, k, v, 3, backend="eager_sdpa")
