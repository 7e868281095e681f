"""The runtime end to end on the CPU: profiles from TOML configure a model of NA blocks."""

import os

import pytest
import torch

from backends import load_profile
from backends.runtime.apply import ALLOC_CONF, ProfileNotRunnable, apply_env, apply_profile, find_blocks
from backends.probe.capability import probe
from backends.probe.presets import preset
from backends.runtime.modules import NeighborhoodAttention3D, na_stack
from backends.config.options import Profile
from backends.runtime.quant import FP8CastLinear, FP8ScaledMMLinear, Int8Linear, quantize_linears
from kernels.int8_gemm import int8_linear, quantize_rows
from kernels.na3d_reference import na3d_reference


@pytest.fixture(scope="module")
def cpu_cap():
    return probe()


def model_and_input(seed=0, depth=2):
    torch.manual_seed(seed)
    model = na_stack(depth, 128, (3, 3, 3), head_dim=64, backend="reference")
    x = torch.randn(1, 4, 6, 7, 128)
    return model, x


def write(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text("schema_version = 1\n" + text)
    return load_profile(path)


def test_na_module_matches_a_hand_computation():
    torch.manual_seed(1)
    m = NeighborhoodAttention3D(128, (3, 3, 3), head_dim=64, backend="reference")
    x = torch.randn(2, 3, 4, 5, 128)
    q, k, v = m.qkv(x).view(2, 3, 4, 5, 3, 2, 64).unbind(4)
    o = na3d_reference(m.q_norm(q), m.k_norm(k), v, (3, 3, 3))
    torch.testing.assert_close(m(x), m.proj(o.reshape(2, 3, 4, 5, 128)))
    with pytest.raises(ValueError, match="expected"):
        m(torch.randn(1, 3, 4, 5, 64))


@pytest.mark.parametrize("toml, na, tol", [
    ('[diffvae]\nna_backend = "eager_sdpa"\n', "eager_sdpa", 1e-5),
    ('[diffvae]\nna_backend = "natten"\nnatten_kernel = "flex-fna"\n', "natten:flex-fna", 1e-4),
    ('[diffvae]\nna_backend = "auto"\n', None, 1e-4),
])
def test_na_backend_from_profile(tmp_path, cpu_cap, toml, na, tol):
    if "natten" in toml or na is None:
        pytest.importorskip("natten")
    model, x = model_and_input()
    ref = model(x)
    report = apply_profile(model, write(tmp_path, toml), cpu_cap)
    change = report.change("diffvae.na_backend")
    assert change.action == "installed" and len(change.modules) == 2
    if na:
        assert f"backend {na}" in change.detail
    with torch.inference_mode():  # NATTEN's flex-fna has no CPU backward
        torch.testing.assert_close(model(x), ref, atol=tol, rtol=tol)


def test_fp8_cast_from_profile(tmp_path, cpu_cap):
    model, x = model_and_input()
    ref = model(x)
    report = apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\n'
                                                   '[diffvae]\nna_backend = "eager_sdpa"\n'), cpu_cap)
    change = report.change("transformer.quantization")
    assert change.action == "replaced" and len(change.modules) == 2 * 4  # qkv, proj, 2 mlp per block
    assert all(isinstance(model.get_submodule(n), FP8CastLinear) for n in change.modules)
    out = model(x)
    assert ((out - ref).abs().max() / ref.abs().max()) < 0.05


def test_compile_from_profile(tmp_path, cpu_cap):
    model, x = model_and_input()
    ref = model(x)
    report = apply_profile(model, write(tmp_path, '[compile]\nenabled = true\nbackend = "aot_eager"\n'
                                                   '[diffvae]\nna_backend = "eager_sdpa"\n'), cpu_cap)
    change = report.change("compile.enabled")
    assert change.action == "compiled" and change.modules == ("blocks.0", "blocks.1")
    torch.testing.assert_close(model(x), ref, atol=1e-5, rtol=1e-5)


def test_report_lists_every_change_and_what_is_left_to_the_pipeline(tmp_path, cpu_cap):
    model, _ = model_and_input()
    report = apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\n'), cpu_cap)
    options = [c.option for c in report.changes]
    for option in ("diffvae.na_backend", "transformer.quantization", "offload.mode", "compile.enabled",
                   "memory.expandable_segments", "transformer.attention", "parallel.gpus"):
        assert option in options
    text = str(report)
    assert "pipeline" in text and "replaced" in text


def test_errors_are_refused_with_the_rule_message(tmp_path, cpu_cap):
    model, _ = model_and_input()
    for toml, fragment in (('[transformer]\nquantization = "int8-w8a8"\n', "int8 tensor cores"),
                           ('[transformer]\nquantization = "fp8-scaled-mm"\n', "SM >= 8.9"),
                           ('[offload]\nmode = "cpu"\n', "needs a CUDA device"),
                           ('[diffvae]\nna_backend = "triton"\nmode = "combined_compile"\n', "natten only")):
        with pytest.raises(ProfileNotRunnable, match=fragment):
            apply_profile(model, write(tmp_path, toml), cpu_cap)


def test_apply_env_sets_and_merges_alloc_conf():
    env = {ALLOC_CONF: "max_split_size_mb:128,expandable_segments:False"}
    assert apply_env(Profile(), env) == []
    assert env[ALLOC_CONF] == "max_split_size_mb:128,expandable_segments:True"
    env = {}
    apply_env(Profile().replace(**{"memory.expandable_segments": False}), env)
    assert ALLOC_CONF not in env


def test_find_blocks():
    model, _ = model_and_input(depth=3)
    name, blocks = find_blocks(model)
    assert name == "blocks" and len(blocks) == 3
    lone = torch.nn.Linear(2, 2)
    assert find_blocks(lone) == ("", [lone])


def test_quantize_linears_filter_and_errors():
    model, _ = model_and_input()
    names = quantize_linears(model, "fp8-cast", include="blocks.*.mlp.*")
    assert names == ["blocks.0.mlp.0", "blocks.0.mlp.2", "blocks.1.mlp.0", "blocks.1.mlp.2"]
    with pytest.raises(ValueError, match="unknown quantization"):
        quantize_linears(model, "fp4")
    from backends.runtime.quant import QuantizationUnavailable
    with pytest.raises(QuantizationUnavailable, match="ltx-kernels"):
        quantize_linears(model, "nvfp4-cast")


@pytest.mark.parametrize("cls, bound", [(FP8CastLinear, 0.04), (Int8Linear, 0.02)])
def test_quantized_linear_error_bounds_on_cpu(cls, bound):
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128)
    x = torch.randn(2, 16, 256)
    ref = lin(x)
    out = cls(lin)(x)
    assert out.shape == ref.shape
    assert ((out - ref).abs().max() / ref.abs().max()) < bound


def test_int8_pieces_on_cpu():
    torch.manual_seed(0)
    x = torch.randn(8, 64)
    q, s = quantize_rows(x, torch.int8)
    assert q.dtype == torch.int8 and q.abs().max() == 127
    torch.testing.assert_close(q.float() * s[:, None], x, atol=(s.max() / 2).item() + 1e-6, rtol=0)
    w = torch.randint(-127, 128, (16, 64), dtype=torch.int8)
    ws = torch.rand(16) + 0.5
    y = int8_linear(q, s, w, ws, bias=torch.ones(16), out_dtype=torch.float32)
    want = (q.double() @ w.double().t()) * s.double()[:, None] * ws.double()[None, :] + 1
    torch.testing.assert_close(y, want.float())
    fq, fs = quantize_rows(x, torch.float8_e4m3fn)
    assert ((fq.float() * fs[:, None] - x).abs() / x.abs().max()).max() < 0.07


def test_scaled_mm_linear_keeps_scales():
    lin = torch.nn.Linear(64, 32)
    assert FP8ScaledMMLinear(lin).weight_scale.shape == (32,)
    assert FP8ScaledMMLinear(lin, scales="tensor").weight_scale.shape == (1,)
    with pytest.raises(ValueError, match="scales"):
        FP8ScaledMMLinear(lin, scales="block")


def test_presets_can_configure_for_another_machine_but_not_run_here(tmp_path):
    # Validation for an H100 passes; applying to a CPU model still resolves against the CPU view.
    model, _ = model_and_input()
    with pytest.raises(ProfileNotRunnable, match="SM >= 8.9"):
        apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-scaled-mm"\n'), preset("h100"))


def test_top_level_api_loads_lazily(tmp_path):
    import subprocess
    import sys

    code = ("import sys, backends; assert 'torch' not in sys.modules; "
            "assert callable(backends.apply_profile) and callable(backends.apply_env); "
            "assert backends.NeighborhoodAttention3D.__name__ == 'NeighborhoodAttention3D'; "
            "assert callable(backends.na3d) and callable(backends.load_profile)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import backends
        backends.nope


def test_dense_attention_from_profile(tmp_path, cpu_cap):
    from backends.runtime.dense_attention import DenseAttention

    torch.manual_seed(0)
    model = torch.nn.Sequential(DenseAttention(128), DenseAttention(128))
    x = torch.randn(2, 10, 128)
    ref = model(x)
    report = apply_profile(model, write(tmp_path, '[transformer]\nattention = "sdpa_math"\n'), cpu_cap)
    change = report.change("transformer.attention")
    assert change.action == "installed" and change.modules == ("0", "1") and "sdpa_math" in change.detail
    torch.testing.assert_close(model(x), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ProfileNotRunnable, match="FlashAttention 3 needs SM 9.x"):
        apply_profile(model, write(tmp_path, '[transformer]\nattention = "flash_attention_3"\n'), cpu_cap)


def test_flash_attention_without_its_package_says_so():
    from backends.runtime.dense_attention import AttentionUnavailable, attention_function

    with pytest.raises(AttentionUnavailable, match="flash_attn_interface, which is not importable"):
        attention_function("flash_attention_3")
    q = torch.randn(1, 7, 2, 16)
    out = attention_function("sdpa_math")(q, q, q, is_causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(*(q.transpose(1, 2),) * 3, is_causal=True)
    torch.testing.assert_close(out, want.transpose(1, 2))
