"""3D neighborhood attention on the CPU: reference vs an independent loop, eager and the
Triton kernel (interpreter) vs the reference, natten flex-fna vs the reference."""

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

from kernels.na3d_eager import na3d_eager, plan_tiles
from kernels.na3d_reference import na3d_reference
from kernels.na3d_triton import na3d_triton


def loop_na3d(q, k, v, kernel, causal=(False, False, False), scale=None):
    """Per-query loops over explicit neighbour lists, in float64."""
    b, T, H, W, heads, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=torch.float64)

    def nbrs(p, L, k, c):
        if c:
            return range(max(p - k + 1, 0), p + 1)
        s = min(max(p - k // 2, 0), L - k)
        return range(s, s + k)

    for bi, t, h, w, n in itertools.product(range(b), range(T), range(H), range(W), range(heads)):
        keys = list(itertools.product(nbrs(t, T, kernel[0], causal[0]), nbrs(h, H, kernel[1], causal[1]),
                                      nbrs(w, W, kernel[2], causal[2])))
        qv = q[bi, t, h, w, n].double()
        logits = torch.stack([(qv * k[bi, a, c, e, n].double()).sum() * scale for a, c, e in keys])
        p = torch.softmax(logits, 0)
        out[bi, t, h, w, n] = sum(pi * v[bi, a, c, e, n].double() for pi, (a, c, e) in zip(p, keys))
    return out


def rand(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("shape, kernel, causal", [
    ((1, 3, 4, 5, 1, 4), (3, 3, 3), (False, False, False)),
    ((2, 4, 3, 6, 2, 8), (2, 3, 4), (False, False, False)),   # even kernels
    ((1, 3, 5, 4, 2, 4), (3, 5, 4), (False, False, False)),   # kernel == axis length
    ((1, 4, 4, 4, 1, 4), (2, 3, 3), (True, False, True)),     # per-axis causal
])
def test_reference_matches_independent_loop(shape, kernel, causal):
    q, k, v = rand(shape, torch.float64)
    got = na3d_reference(q, k, v, kernel, is_causal=causal)
    want = loop_na3d(q, k, v, kernel, causal)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_reference_window_shifts_inward_at_borders():
    # With kernel 3 on an axis of 5, the query at 0 sees keys 0..2, exactly like the one at 1.
    q, k, v = rand((1, 1, 1, 5, 1, 2), torch.float64)
    q[0, 0, 0, 0] = q[0, 0, 0, 1]
    out = na3d_reference(q, k, v, (1, 1, 3))
    torch.testing.assert_close(out[0, 0, 0, 0], out[0, 0, 0, 1])


CASES = [
    ((1, 5, 7, 9, 2, 16), (3, 3, 3), False),
    ((2, 4, 6, 10, 3, 8), (2, 4, 3), False),
    ((1, 3, 5, 8, 1, 32), (3, 5, 8), False),
    ((1, 6, 6, 6, 2, 16), (3, 3, 3), (True, False, False)),
    ((1, 4, 5, 6, 1, 16), (2, 3, 3), True),
    ((3, 2, 3, 4, 4, 8), (1, 2, 3), (False, True, False)),
    ((1, 1, 1, 12, 1, 16), (1, 1, 5), False),
]


@pytest.mark.parametrize("shape, kernel, causal", CASES)
@pytest.mark.parametrize("budget", [2**30, 3000])
def test_eager_matches_reference(shape, kernel, causal, budget):
    q, k, v = rand(shape)
    want = na3d_reference(q, k, v, kernel, is_causal=causal)
    got = na3d_eager(q, k, v, kernel, is_causal=causal, score_budget=budget)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_eager_low_precision(dtype, tol):
    q, k, v = rand((1, 4, 6, 8, 2, 16), dtype)
    want = na3d_reference(q.float(), k.float(), v.float(), (3, 3, 3))
    got = na3d_eager(q, k, v, (3, 3, 3), score_budget=4096)
    assert got.dtype == dtype
    assert (got.float() - want).abs().max() < tol


def test_eager_tiles_fit_the_budget():
    tile = plan_tiles((48, 128, 128), (3, 7, 7), 4, 256 * 2**20)
    nq = math.prod(tile)
    nk = math.prod(min(n + k - 1, L) for n, k, L in zip(tile, (3, 7, 7), (48, 128, 128)))
    assert 4 * nq * nk * 4 <= 256 * 2**20


def test_eager_custom_scale_and_noncontiguous():
    q, k, v = rand((1, 4, 5, 6, 3, 8))
    qt = q.transpose(1, 3).contiguous().transpose(1, 3)  # same values, other strides
    want = na3d_reference(q, k, v, (3, 3, 3), scale=0.3)
    torch.testing.assert_close(na3d_eager(qt, k, v, (3, 3, 3), scale=0.3), want, atol=1e-5, rtol=1e-5)


TRITON_CASES = [
    pytest.param((1, 3, 5, 9, 2, 32), (3, 3, 5), False, torch.float32,
                 marks=pytest.mark.slow),  # 4.5 s in the interpreter: CI runs it
    pytest.param((2, 3, 4, 10, 3, 16), (2, 4, 3), (True, False, True), torch.float16,
                 marks=pytest.mark.slow),  # 6 s in the interpreter: CI runs it
    ((1, 2, 3, 17, 1, 64), (2, 3, 17), False, torch.float32),   # kernel == axis length
    ((1, 1, 2, 3, 2, 16), (1, 2, 3), False, torch.float32),     # tiny axes
    ((1, 2, 3, 5, 1, 24), (1, 3, 3), False, torch.float32),     # head_dim not a power of 2
]


@pytest.mark.parametrize("shape, kernel, causal, dtype", TRITON_CASES)
def test_triton_interpreter_matches_reference(shape, kernel, causal, dtype):
    q, k, v = rand(shape, dtype)
    want = na3d_reference(q.float(), k.float(), v.float(), kernel, is_causal=causal)
    got = na3d_triton(q, k, v, kernel, is_causal=causal)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    assert (got.float() - want).abs().max() < tol


def test_triton_noncontiguous_inputs():
    q, k, v = rand((1, 2, 4, 9, 2, 16))
    kt = k.permute(0, 1, 2, 3, 4, 5).transpose(2, 3).contiguous().transpose(2, 3)
    want = na3d_reference(q, k, v, (1, 3, 3))
    torch.testing.assert_close(na3d_triton(q, kt, v, (1, 3, 3)), want, atol=1e-5, rtol=1e-5)


def _outcome(check, *args):
    try:
        return check(*args)
    except (TypeError, ValueError) as e:
        return type(e), str(e)


@pytest.mark.parametrize("other", ["same", "k_short", "v_dim", "v_fp16", "k_param", "empty", "five_dims", "list"])
def test_the_fast_check_agrees_with_the_full_checks(other):
    from kernels.na3d_args import _check_each, check_na3d

    q = torch.randn(1, 3, 4, 5, 2, 8)
    k, v = q.clone(), q.clone()
    if other == "k_short":
        k = k[:, :2]
    elif other == "v_dim":
        v = torch.randn(1, 3, 4, 5, 2, 4)
    elif other == "v_fp16":
        v = v.half()
    elif other == "k_param":
        k = torch.nn.Parameter(k)
    elif other == "empty":
        q, k, v = (t[:0] for t in (q, k, v))
    elif other == "five_dims":
        q, k, v = (t[0] for t in (q, k, v))
    elif other == "list":
        q = q.tolist()
    kernels = (3, (3, 3, 3), [1, 3, 5], (3, 5, 6), (0, 3, 3), 3.0, True, (3, 3, True), (3, 3), [3] * 4, "333")
    causals = (False, True, (True, False, False), [False] * 3, 1, (0, 0, 0), (True, False))
    for kernel_size, is_causal in itertools.product(kernels, causals):
        args = (q, k, v, kernel_size, is_causal, (torch.float32,))
        assert _outcome(check_na3d, *args) == _outcome(_check_each, *args), (kernel_size, is_causal)


@pytest.mark.parametrize("fn", [na3d_reference, na3d_eager, na3d_triton])
def test_bad_arguments_are_refused_with_the_reason(fn):
    q, k, v = rand((1, 3, 4, 5, 1, 8))
    with pytest.raises(ValueError, match="larger than the axis"):
        fn(q, k, v, (3, 5, 3))
    with pytest.raises(ValueError, match="6 dims"):
        fn(q[0], k[0], v[0], 3)
    with pytest.raises(ValueError, match="shapes must match"):
        fn(q, k[:, :2], v, 1)
    with pytest.raises(TypeError, match="kernel_size"):
        fn(q, k, v, (3, 3))


def test_natten_flex_matches_reference():
    natten = pytest.importorskip("natten")
    q, k, v = rand((1, 4, 6, 8, 2, 16))
    for kernel, causal in (((3, 3, 3), False), ((2, 3, 4), False), ((3, 3, 3), (True, False, False))):
        want = na3d_reference(q, k, v, kernel, is_causal=causal)
        got = natten.na3d(q, k, v, kernel, is_causal=causal, backend="flex-fna")
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_autotune_prunes_tiles_longer_than_an_axis_and_small_tiles_above_small_classes():
    """A first call compiles and times only the tiles that can win (each costs seconds on a GPU)."""
    from kernels import na3d_triton as mod

    configs = [triton.Config(c.kwargs(), num_warps=c.num_warps, num_stages=c.num_stages) for c in mod.CONFIGS]

    def kept(t, h, w, heads):
        args = {"T": t, "H": h, "W": w, "SIZE": mod.size_key(heads, t, h, w)}
        return {(c.kwargs["TT"], c.kwargs["TH"], c.kwargs["TW"]) for c in mod._prune(configs, args)}

    large = kept(18, 34, 60, 32)
    assert (1, 2, 8) not in large and (1, 4, 8) not in large and (2, 4, 8) in large
    tiny = kept(1, 2, 8, 1)
    assert tiny == {(1, 2, 8)}
    assert (1, 4, 8) in kept(4, 8, 8, 8) and (2, 4, 8) in kept(4, 8, 8, 8)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
def test_a_first_call_autotunes_then_launches_the_chosen_tile_straight(monkeypatch, shared):
    """The autotuned path (the interpreter otherwise takes a fixed tile): the tuner of the call's
    kernel flavour times the pruned tiles once per key; the next call launches its choice."""
    from kernels import na3d_triton as mod

    timed = []

    def fake_bench(fn, quantiles=None, **kwargs):  # no CUDA events here: every tile "takes" 1 ms
        fn()
        timed.append(1)
        return [1.0, 1.0, 1.0]
    monkeypatch.setattr(mod._TUNED[shared], "do_bench", fake_bench)
    monkeypatch.setattr(mod._TUNED[shared], "cache_results", False)
    monkeypatch.setattr(mod, "_CHOSEN", {})
    monkeypatch.setattr(mod, "interpreting", lambda: False)
    q, k, v = rand((1, 2, 4, 9, 2, 16))
    if not shared:
        k = k.transpose(2, 3).contiguous().transpose(2, 3)
    want = na3d_reference(q, k, v, (1, 3, 3))
    for _ in range(2):
        torch.testing.assert_close(mod.launch(q, k, v, (1, 3, 3), (False,) * 3), want, atol=1e-4, rtol=1e-4)
    assert [key[-1] for key in mod._CHOSEN] == [shared]
    assert 1 <= len(timed) < len(mod.CONFIGS)  # pruned, and timed on the first call only


def test_a_tensor_scale_is_taken_as_a_number():
    q, k, v = rand((1, 3, 4, 9, 1, 16))
    want = na3d_reference(q, k, v, 3, scale=0.5)
    torch.testing.assert_close(na3d_triton(q, k, v, 3, scale=torch.tensor(0.5)), want, atol=1e-4, rtol=1e-4)


def test_problems_whose_short_axes_prune_other_tiles_tune_apart():
    """A T=1 problem tunes among tiles one frame deep: a T=18 problem of its size class must not
    inherit that choice."""
    from kernels.na3d_triton import size_class, size_key

    assert size_class(8, 1, 34, 60) == size_class(1, 9, 34, 60) == 1
    assert size_key(8, 1, 34, 60) != size_key(1, 9, 34, 60)
    assert size_key(1, 9, 34, 60) // 8 == 1 and size_key(1, 1, 2, 8) // 8 == -4


class _FakeTriton:
    """A Triton kernel stand-in: a launch through it writes 1.0 into the output (args[3]) and returns
    its compiled kernel, whose straight launch writes `straight_value`; both are logged."""

    arg_names = ["Q", "K", "V", "O", "T", "SCALE", "TT", "TH"]

    def __init__(self, straight_value):
        self.log = []
        self.straight_value = straight_value

    def __getitem__(self, grid):
        def through_triton(*args, **tile):
            self.log.append("triton")
            args[3].fill_(1.0)
            return _FakeCompiled(self)
        return through_triton


class _FakeCompiled:
    def __init__(self, fake):
        self.fake = fake

    def __getitem__(self, grid):
        def straight(*args):
            self.fake.log.append(("straight", grid, args[4:]))
            args[3].fill_(self.fake.straight_value)
        return straight


@pytest.mark.parametrize("straight_value, trusted", [(1.0, True), (2.0, False)])
def test_a_repeated_call_launches_its_compiled_kernel_straight_once_checked(monkeypatch, straight_value, trusted):
    """Triton's own launch costs ~30 us of host time a call: a call seen before launches the compiled
    kernel straight, with the constexprs in parameter order, after the process's first straight launch
    matched Triton's output bit for bit; a mismatch keeps every launch on Triton's path."""
    from kernels import na3d_triton as mod

    fake = _FakeTriton(straight_value)
    monkeypatch.setattr(mod, "_COMPILED", {})
    monkeypatch.setattr(mod, "_FAST_OK", [None])
    out = torch.zeros(4)
    args = (torch.zeros(4), torch.zeros(4), torch.zeros(4), out, 3, 0.5)
    tile = {"TT": 2, "TH": 4, "num_warps": 4}
    for _ in range(4):
        out.zero_()
        mod._launch_tile(("key",), fake, tile, (5, 1), args, True)
        assert out.eq(1.0).all()
    if trusted:
        assert fake.log == ["triton", "triton", ("straight", (5, 1, 1), (3, 0.5, 2, 4)),
                            ("straight", (5, 1, 1), (3, 0.5, 2, 4)), ("straight", (5, 1, 1), (3, 0.5, 2, 4))]
    else:
        assert fake.log == ["triton", "triton", ("straight", (5, 1, 1), (3, 0.5, 2, 4)), "triton", "triton"]
        assert mod._COMPILED == {}
    assert mod._FAST_OK == [trusted]
    fake.log.clear()
    mod._launch_tile(("key",), fake, tile, (5, 1), (*args[:4], 4, 0.5), True)  # another argument: Triton's launch
    assert fake.log == ["triton"]
    mod._launch_tile(None, fake, tile, (5, 1), args, True)  # a caller's tile: never straight
    assert fake.log == ["triton", "triton"]


def test_no_straight_launch_is_checked_while_a_cuda_graph_is_captured(monkeypatch):
    """The check reads outputs back, which a capture forbids: it waits for a call outside one."""
    from kernels import na3d_triton as mod

    fake = _FakeTriton(1.0)
    monkeypatch.setattr(mod, "_COMPILED", {})
    monkeypatch.setattr(mod, "_FAST_OK", [None])
    args = (torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(4), 3, 0.5)
    tile = {"TT": 2, "TH": 4}
    monkeypatch.setattr(mod, "_capturing", lambda t: True)
    for _ in range(2):
        mod._launch_tile(("key",), fake, tile, (5, 1), args, True)
    assert fake.log == ["triton", "triton"] and mod._FAST_OK == [None]
    monkeypatch.setattr(mod, "_capturing", lambda t: False)
    mod._launch_tile(("key",), fake, tile, (5, 1), args, True)
    assert fake.log[-1][0] == "straight" and mod._FAST_OK == [True]


def test_an_output_with_nan_leaves_the_check_to_a_later_call(monkeypatch):
    """NaN never equals NaN: such an output cannot tell whether the straight launch wrote it."""
    from kernels import na3d_triton as mod

    fake = _FakeTriton(float("nan"))
    monkeypatch.setattr(mod, "_COMPILED", {})
    monkeypatch.setattr(mod, "_FAST_OK", [None])
    nan_out = torch.full((4,), float("nan"))
    args = (torch.zeros(4), torch.zeros(4), torch.zeros(4), nan_out, 3, 0.5)
    monkeypatch.setattr(_FakeTriton, "__getitem__", lambda self, grid: lambda *a, **t: (
        self.log.append("triton"), a[3].fill_(float("nan")), _FakeCompiled(self))[-1])
    for _ in range(3):
        mod._launch_tile(("key",), fake, {"TT": 2, "TH": 4}, (5, 1), args, True)
    assert mod._FAST_OK == [None] and fake.log.count("triton") == 3


class _Recording:
    """Wraps an (interpreted) Triton kernel: launches through it are logged and return itself as the
    compiled kernel, whose straight launches (every argument positional) are logged and run it too."""

    def __init__(self, kernel, log):
        self.kernel, self.log, self.arg_names = kernel, log, kernel.arg_names

    def __getitem__(self, grid):
        if len(grid) == 3:  # a compiled kernel's launcher
            return lambda *args: (self.log.append("straight"), self.kernel[grid[:2]](*args))
        return lambda *args, **tile: (self.log.append("triton"), self.kernel[grid](*args, **tile), self)[-1]


def test_a_call_seen_before_costs_one_straight_launch(monkeypatch):
    """The whole hot path on the interpreter: after Triton's launch, its check and the first straight
    launch, a call with the same shapes, strides, window and scale is one straight launch; another
    scale goes through Triton again. Every output matches the reference."""
    from kernels import na3d_triton as mod

    log = []
    monkeypatch.setattr(mod, "_na3d_fwd_shared", _Recording(mod._na3d_fwd_shared, log))
    for name, fresh in (("_COMPILED", {}), ("_PLANS", {}), ("_FAST_OK", [None]), ("_CHOSEN", {})):
        monkeypatch.setattr(mod, name, fresh)
    monkeypatch.setattr(mod, "interpreting", lambda: False)
    q, k, v = rand((1, 1, 4, 8, 1, 16))  # two programs of the interpreter's tile
    window, causal = (1, 3, 3), (False,) * 3
    key = (q.device, window, causal, 16, q.dtype, mod.size_key(1, 1, 4, 8), True)
    mod._CHOSEN[key] = mod._launch_kwargs(mod.INTERPRET_CONFIG, window, causal, 16, q.dtype)  # as if tuned
    want = na3d_reference(q, k, v, window, scale=0.5)
    for _ in range(4):
        torch.testing.assert_close(mod.launch(q, k, v, window, causal, 0.5), want, atol=1e-4, rtol=1e-4)
    assert log == ["triton", "triton", "straight", "straight", "straight"] and len(mod._PLANS) == 1

    def no_tile(*args):
        raise AssertionError("a call with a plan launches it, nothing else")
    launch_tile = mod._launch_tile
    monkeypatch.setattr(mod, "_launch_tile", no_tile)
    torch.testing.assert_close(mod.launch(q, k, v, window, causal, 0.5), want, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(mod, "_launch_tile", launch_tile)
    log.clear()
    mod.launch(q, k, v, window, causal, 0.25)  # another scale
    odd = torch.empty(q.numel() + 1)[1:].view(q.shape).copy_(q)  # another alignment, same shape and strides
    torch.testing.assert_close(mod.launch(odd, k, v, window, causal, 0.5), want, atol=1e-4, rtol=1e-4)
    assert log == ["triton", "triton"]


def test_a_first_call_compiles_the_tiles_to_time_in_threads_before_the_autotuner(monkeypatch):
    """Each pruned tile is warmed up once, with the problem's constexprs and the tile's settings as
    the autotuner passes them (so it finds them compiled); a tile that fails is left to it."""
    import threading

    from kernels import na3d_triton as mod

    warmed = []

    class Fn:
        def warmup(self, *args, grid, **kwargs):
            warmed.append((threading.get_ident(), args, kwargs))
            if kwargs["TH"] == 4 and kwargs["TT"] == 2 and kwargs["RH"] == 4:
                raise RuntimeError("out of shared memory")

    class Tuner:
        configs = mod._TUNED[True].configs
        fn = Fn()

    named = {"T": 18, "H": 34, "W": 60, "SIZE": mod.size_key(32, 18, 34, 60)}
    mod.precompile(Tuner(), ("q", 7), {"D": 64}, named)
    kept = mod._prune(Tuner.configs, named)
    assert len(warmed) == len(kept) >= 2
    assert sorted((kw["TT"], kw["TH"], kw["TW"], kw["RH"], kw["num_stages"]) for _, _, kw in warmed) == sorted(
        (c.kwargs["TT"], c.kwargs["TH"], c.kwargs["TW"], c.kwargs["RH"], c.num_stages) for c in kept)
    assert all(args == ("q", 7) and kw["D"] == 64 and kw["num_warps"] == 4 for _, args, kw in warmed)
    assert warmed[0][0] == threading.get_ident()  # the first alone, in the caller's thread
    assert len({ident for ident, _, _ in warmed[1:]} - {threading.get_ident()}) >= 1


def test_the_tiles_are_compiled_at_the_autotuners_first_timing_only(monkeypatch):
    """A key the autotuner times compiles its tiles once, before its first timing; a key whose choice
    Triton's disk cache holds is never timed, and then nothing more is compiled."""
    import triton.testing

    from kernels import na3d_triton as mod

    log = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: log.append("timed") or 1.0)
    mod._PENDING.compile = lambda: log.append("compiled")
    mod._quick_bench(lambda: None)
    mod._quick_bench(lambda: None)
    assert log == ["compiled", "timed", "timed"]
    mod._PENDING.compile = None
    mod._quick_bench(lambda: None)
    assert log[-1] == "timed" and log.count("compiled") == 1


_PRECOMPILE_CHECK = """
import importlib, torch
from triton.backends.compiler import GPUTarget
from kernels import na3d_triton as mod

class Driver:  # what a compile asks of the active driver
    def get_current_device(self):
        return 0
    def get_current_stream(self, device=None):
        return 0
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)
    def get_active_torch_device(self):
        return torch.device("cpu")

importlib.import_module("triton.runtime.driver").driver.set_active(Driver())
tuner = mod._TUNED[True]
q = torch.zeros(1, 18, 34, 60, 32, 64, dtype=torch.bfloat16)
size = mod.size_key(32, 18, 34, 60)
args = (q, q, q, q, *q.stride()[:5], 18, 34, 60, 32, 1.0, 0, size)
meta = mod._meta((3, 7, 7), (False,) * 3, 64, torch.bfloat16)
named = {"T": 18, "H": 34, "W": 60, "SIZE": size}
mod.precompile(tuner, args, meta, named)
cache = tuner.fn.fn.device_caches[0][0]
compiled = len(cache)
tuner.warmup(*args, grid=(1, 1), **meta)  # the autotuner's compile of each tile, as its timing makes it
print(compiled, len(mod._prune(tuner.configs, named)), len(cache))
"""


@pytest.mark.slow
def test_the_precompiled_tiles_are_the_ones_the_autotuner_compiles(tmp_path):
    """With Triton's real compiler (ptxas for SM 9.0, a stand-in driver: no GPU needed), in a process
    without the interpreter: after `precompile`, the autotuner's own compile of each pruned tile finds
    it in the kernel cache (no entry added)."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", _PRECOMPILE_CHECK], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    compiled, pruned, after = map(int, out.stdout.split())
    assert compiled == pruned == after and pruned >= 2
