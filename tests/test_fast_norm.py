"""transformer.fast_norm: `kernels.adaln` in the norm slots of LTX-2's real DiT blocks (Triton's
interpreter on the CPU), the blocks' own functions where the kernels do not apply, and the profile
step that installs it."""

from __future__ import annotations

import copy

import pytest
import torch

from backends.config.options import Profile
from backends.runtime import fast_norm, ltx2, timestep_rows
from backends.runtime.apply import apply_profile

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


def test_ltx2s_blocks_run_the_kernels_and_compute_what_they_did():
    model = ltx2.tiny_transformer(layers=2)
    fast = copy.deepcopy(model)
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]  # once: not wrapped twice
    block = fast.transformer_blocks[0]
    assert isinstance(block.ada_zero_function, fast_norm.FastAdaZero)
    assert type(block.ada_zero_function.own).__name__ == "PytorchAdaZeroFunction"
    inputs = ltx2.transformer_inputs(tokens=23, padded=0)
    with torch.inference_mode():
        got, want = fast(*inputs), model(*inputs)
    # per block: video and audio AdaLN before self-attention and FF, both sides of a2v and v2a (8), post_sa (2)
    assert fast_norm.counts(fast) == (2 * 10, 0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_only_ltx2s_own_functions_are_replaced():
    """A slot holding another function (LTX-2's fp8-blockwise ops return quantized tensors) keeps it."""
    model = ltx2.tiny_transformer(layers=2)
    other = lambda *args: None  # noqa: E731
    model.transformer_blocks[1].ada_zero_function = other
    assert fast_norm.install(model) == ["transformer_blocks.0"]
    assert model.transformer_blocks[1].ada_zero_function is other
    assert isinstance(model.transformer_blocks[1].post_sa_function, fast_norm.FastPostSA)


def test_a_kernel_error_that_is_not_a_refusal_is_raised(monkeypatch):
    def broken(*args):
        raise ValueError("a bug, not a refusal")
    monkeypatch.setattr(fast_norm.FastAdaZero, "kernel", staticmethod(broken))
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="a bug"):
        fast_norm.FastAdaZero(lambda *args: "own")(x, 1e-6, x[:, :1], x[:, :1])


def test_tensors_the_kernel_refuses_run_the_blocks_own_function(monkeypatch):
    seen = []
    fast = fast_norm.FastAdaZero(lambda *args: seen.append(args) or "own")
    x = torch.randn(1, 4, 8)
    assert fast(x, 1e-6, torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 8)) == "own"
    assert fast(x.transpose(1, 2).contiguous().transpose(1, 2)[:, :, :4], 1e-6, x[:, :1, :4], x[:, :1, :4]) == "own"
    assert len(seen) == 2 and (fast.runs, fast.own_runs) == (0, 2)
    monkeypatch.setattr("kernels.adaln.interpreting", lambda: False)
    monkeypatch.setattr("backends.runtime.fast_norm.interpreting", lambda: False)
    assert fast(x, 1e-6, x[:, :1], x[:, :1]) == "own"  # off CUDA without the interpreter: LTX-2's own ops


def test_while_compiling_the_blocks_own_function_runs(monkeypatch):
    fast = fast_norm.FastPostSA(lambda *args: "own")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = torch.randn(1, 3, 8)
    assert fast(x, x, None, 1e-6, x[:, :1]) == "own"


def test_the_profile_installs_it_and_says_where():
    model = ltx2.tiny_transformer(layers=1)
    report = apply_profile(model, Profile().replace(**{"transformer.fast_norm": True}), device="cpu")
    change = report.change("transformer.fast_norm")
    assert change.action == "installed" and change.modules == ("transformer_blocks.0",)
    assert isinstance(model.transformer_blocks[0].post_sa_function, fast_norm.FastPostSA)
    assert "on cpu the blocks' own ops run" in change.detail
    assert "one AdaLN row" in change.detail and getattr(model, timestep_rows.WRAPPED)
    plain = ltx2.tiny_transformer(layers=1)
    assert apply_profile(plain, Profile(), device="cpu").change("transformer.fast_norm").action != "installed"
    assert not isinstance(plain.transformer_blocks[0].post_sa_function, fast_norm.FastPostSA)
