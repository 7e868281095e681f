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
from kernels import adaln

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


def counting(monkeypatch):
    calls = {"ada_zero": 0, "post_sa": 0}
    for name in calls:
        real = getattr(adaln, name)

        def count(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)
        monkeypatch.setattr(fast_norm.FastAdaZero if name == "ada_zero" else fast_norm.FastPostSA, "kernel",
                            staticmethod(count))
    return calls


def test_ltx2s_blocks_run_the_kernels_and_compute_what_they_did(monkeypatch):
    model = ltx2.tiny_transformer(layers=2)
    fast = copy.deepcopy(model)
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]  # once: not wrapped twice
    block = fast.transformer_blocks[0]
    assert isinstance(block.ada_zero_function, fast_norm.FastAdaZero)
    assert type(block.ada_zero_function.own).__name__ == "PytorchAdaZeroFunction"
    calls = counting(monkeypatch)
    inputs = ltx2.transformer_inputs(tokens=23, padded=0)
    with torch.inference_mode():
        got, want = fast(*inputs), model(*inputs)
    # per block: video and audio AdaLN before self-attention and FF, both a2v/v2a sides of each; post_sa twice
    assert calls == {"ada_zero": 2 * 8, "post_sa": 2 * 2}
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_tensors_the_kernel_refuses_run_the_blocks_own_function(monkeypatch):
    seen = []
    fast = fast_norm.FastAdaZero(lambda *args: seen.append(args) or "own")
    x = torch.randn(1, 4, 8)
    assert fast(x, 1e-6, torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 8)) == "own"
    assert fast(x.transpose(1, 2).contiguous().transpose(1, 2)[:, :, :4], 1e-6, x[:, :1, :4], x[:, :1, :4]) == "own"
    assert len(seen) == 2
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
    assert "one AdaLN row" in change.detail and getattr(model, timestep_rows.WRAPPED)
    plain = ltx2.tiny_transformer(layers=1)
    assert apply_profile(plain, Profile(), device="cpu").change("transformer.fast_norm").action != "installed"
    assert not isinstance(plain.transformer_blocks[0].post_sa_function, fast_norm.FastPostSA)
