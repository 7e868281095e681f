"""The runtime on the CPU: profiles from TOML configure models that follow LTX-2's protocols,
every step planned first and applied only when all can run (issue 9's regressions included)."""

import copy
import dataclasses
import os

import pytest
import torch

from backends import load_profile
from backends.config.options import OPTIONS, Profile
from backends.config.plan import resolve
from backends.machine.capability import probe
from backends.machine.presets import preset
from backends.runtime.apply import ALLOC_CONF, LT_WORKSPACE, ProfileNotRunnable, apply_env, apply_profile, find_blocks
from backends.runtime.attention import NAFunction, implementation
from backends.runtime.dense_attention import AttentionUnavailable, DenseFunction
from backends.runtime.modules import DenseAttention, NeighborhoodAttention3D, dense_stack, na_stack
from backends.runtime.quant import (
    FP8CastLinear,
    FP8ScaledMMLinear,
    Int8Linear,
    plan_quantization,
    quantize_linears,
)
from kernels.int8_gemm import INT8_K_MAX, int8_linear, quantize_rows
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


def run(model, x):
    with torch.inference_mode():
        return model(x)


def test_na_module_follows_ltx2s_protocol_q_prescaled():
    torch.manual_seed(1)
    m = NeighborhoodAttention3D(128, (3, 3, 3), head_dim=64, backend="reference")
    x = torch.randn(2, 3, 4, 5, 128)
    seen = {}

    def spy(attn, q, k, v):  # LTX-2 calls attention_function(attn, q, k, v)
        seen.update(attn=attn, q=q)
        return NAFunction("reference")(attn, q, k, v)
    q, k, v = m.qkv(x).view(2, 3, 4, 5, 3, 2, 64).unbind(4)
    o = na3d_reference(m.q_norm(q), m.k_norm(k), v, (3, 3, 3))  # default scale: head_dim ** -0.5
    m.attention_function = spy
    torch.testing.assert_close(run(m, x), m.proj(o.reshape(2, 3, 4, 5, 128)))
    assert seen["attn"] is m and torch.allclose(seen["q"], m.q_norm(q) * 64 ** -0.5)
    with pytest.raises(ValueError, match="expected"):
        m(torch.randn(1, 3, 4, 5, 64))


@pytest.mark.parametrize("toml, installed, tol", [
    ('[diffvae]\nna_backend = "eager_sdpa"\n', "NAFunction('eager_sdpa')", 1e-5),
    ('[diffvae]\nna_backend = "natten"\nnatten_kernel = "flex-fna"\n', "NAFunction('natten:flex-fna')", 1e-4),
    ('[diffvae]\nna_backend = "auto"\n', "NAFunction('eager_sdpa')", 1e-5),  # the CPU's auto order
])
def test_na_backend_from_profile(tmp_path, cpu_cap, toml, installed, tol):
    if "natten" in toml:
        pytest.importorskip("natten")
    model, x = model_and_input()
    ref = run(model, x)
    report = apply_profile(model, write(tmp_path, toml), cpu_cap)
    change = report.change("diffvae.na_backend")
    assert change.action == "installed" and len(change.modules) == 2 and installed in change.detail
    torch.testing.assert_close(run(model, x), ref, atol=tol, rtol=tol)


def test_na_forward_with_gradients_is_refused_clearly(tmp_path, cpu_cap):
    model, x = model_and_input()
    apply_profile(model, write(tmp_path, '[diffvae]\nna_backend = "eager_sdpa"\n'), cpu_cap)
    with pytest.raises(RuntimeError, match="inference only.*torch.inference_mode"):
        model(x)  # parameters require grad: LTX-2 runs decode under no_grad; a training forward is refused
    with torch.no_grad():
        model(x)


def test_reference_is_never_a_runtime_fallthrough():
    with pytest.raises(ValueError, match="not a concrete NA backend"):
        implementation("auto")
    with pytest.raises(ValueError, match="unknown NA backend"):
        NAFunction("bogus")


def test_fp8_cast_default_scope_is_ltx2s_block_linears(tmp_path, cpu_cap):
    torch.manual_seed(0)
    model = dense_stack(2, 64, head_dim=32)
    model.proj_out = torch.nn.Linear(64, 64)  # outside the blocks: never quantized by default
    x = torch.randn(2, 9, 64)
    ref = run(model, x)
    report = apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\n'), cpu_cap)
    names = report.change("transformer.quantization").modules
    assert names == tuple(f"transformer_blocks.{i}.{n}" for i in range(2) for n in
                          ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "ff.net.0.proj", "ff.net.2"))
    assert all(isinstance(model.get_submodule(n), FP8CastLinear) for n in names)
    assert type(model.proj_out) is torch.nn.Linear
    assert ((run(model, x) - ref).abs().max() / ref.abs().max()) < 0.05


def test_quantization_scope_all_linears_widens_it(tmp_path, cpu_cap):
    model, _ = model_and_input()
    report = apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\n'
                                                   'quantization_scope = "all-linears"\n'), cpu_cap)
    assert len(report.change("transformer.quantization").modules) == 2 * 4  # qkv, proj, 2 mlp per block


def test_linears_a_method_cannot_run_stay_and_are_listed():
    model = torch.nn.Module()
    model.transformer_blocks = torch.nn.ModuleList([torch.nn.Module()])
    block = model.transformer_blocks[0]
    block.attn1 = torch.nn.Module()
    block.attn1.to_q = torch.nn.Linear(64, 64)
    block.attn1.to_k = torch.nn.Linear(60, 64)  # 60 is not a multiple of 16: torch._scaled_mm cannot run it
    qplan = plan_quantization(model, "fp8-scaled-mm")
    assert qplan.targets == ("transformer_blocks.0.attn1.to_q",)
    assert qplan.skipped[0][0] == "transformer_blocks.0.attn1.to_k" and "multiples of 16" in qplan.skipped[0][1]
    huge = torch.nn.Linear(INT8_K_MAX + 1, 16, device="meta")
    block.attn1.to_v = huge
    assert "int32" in dict(plan_quantization(model, "int8-w8a8").skipped)["transformer_blocks.0.attn1.to_v"]


def test_compile_from_profile(tmp_path, cpu_cap):
    model, x = model_and_input()
    ref = run(model, x)
    report = apply_profile(model, write(tmp_path, '[compile]\nenabled = true\nbackend = "aot_eager"\n'
                                                   '[diffvae]\nna_backend = "eager_sdpa"\n'), cpu_cap)
    change = report.change("compile.enabled")
    assert change.action == "compiled" and change.modules == ("transformer_blocks.0", "transformer_blocks.1")
    torch.testing.assert_close(run(model, x), ref, atol=1e-5, rtol=1e-5)


def test_report_has_an_entry_for_every_option_printed_as_toml(tmp_path, cpu_cap):
    model, _ = model_and_input()
    report = apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\n'), cpu_cap)
    assert [c.option for c in report.changes] == [o.key for o in OPTIONS]
    for option in [o.key for o in OPTIONS]:
        assert report.change(option).option == option
    text = str(report)
    assert 'transformer.quantization       = "fp8-cast"' in text and "compile.enabled                = false" in text
    with pytest.raises(KeyError, match="not an option"):
        report.change("compile.nope")


def test_fallbacks_and_warnings_reach_the_report(tmp_path, cpu_cap):
    natten_missing = dataclasses.replace(cpu_cap, packages={**cpu_cap.packages, "natten": dataclasses.replace(
        cpu_cap.package("natten"), available=False, reason="not installed")})
    model, _ = model_and_input()
    report = apply_profile(model, write(tmp_path, '[diffvae]\nna_backend = "natten"\n'), natten_missing)
    assert "NAFunction('eager_sdpa')" in report.change("diffvae.na_backend").detail
    assert any(w.startswith("diffvae.na_backend: natten cannot run, fell back to eager_sdpa") for w in report.warnings)


def test_a_refusal_leaves_the_model_untouched(tmp_path, cpu_cap):
    pytest.importorskip("natten")
    torch.manual_seed(0)
    model = na_stack(2, 96, (3, 3, 3), head_dim=48, backend="reference")  # flex-fna needs a power-of-2 head_dim
    before = copy.deepcopy(model.state_dict())
    functions = [m.attention_function for m in model.modules() if hasattr(m, "kernel_size")]
    profile = write(tmp_path, '[transformer]\nquantization = "fp8-cast"\nquantization_scope = "all-linears"\n'
                              '[diffvae]\nna_backend = "natten"\nnatten_kernel = "flex-fna"\n')
    assert not resolve(profile, cpu_cap).blocking  # the plan is fine; this model's head_dim is not
    with pytest.raises(ProfileNotRunnable, match="natten:flex-fna cannot run transformer_blocks.0.attn.*head_dim 48"):
        apply_profile(model, profile, cpu_cap)
    assert all(type(m) is not FP8CastLinear for m in model.modules())
    assert [m.attention_function for m in model.modules() if hasattr(m, "kernel_size")] == functions
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_device_without_cuda_is_refused_before_any_change(tmp_path):
    model, _ = model_and_input()
    with pytest.raises(ProfileNotRunnable, match="device cuda: this torch build has no CUDA|no CUDA device"):
        apply_profile(model, write(tmp_path, '[transformer]\nquantization = "fp8-cast"\nquantization_scope = '
                                             '"all-linears"\n'), preset("h100"), device="cuda")
    assert all(type(m) is not FP8CastLinear for m in model.modules())


def test_errors_are_refused_with_the_rule_message(tmp_path, cpu_cap):
    model, _ = model_and_input()
    for toml, fragment in (('[transformer]\nquantization = "int8-w8a8"\n', "int8 tensor cores"),
                           ('[transformer]\nquantization = "fp8-scaled-mm"\n', "SM >= 8.9"),
                           ('[offload]\nmode = "cpu"\n', "needs a CUDA device")):
        with pytest.raises(ProfileNotRunnable, match=fragment):
            apply_profile(model, write(tmp_path, toml), cpu_cap)


def test_apply_env_sets_merges_and_is_idempotent(monkeypatch):
    env = {ALLOC_CONF: "max_split_size_mb:128,expandable_segments:False"}
    assert apply_env(Profile(), env) == []
    assert env[ALLOC_CONF] == "max_split_size_mb:128,expandable_segments:True"
    env = {}
    apply_env(Profile().replace(**{"memory.expandable_segments": False}), env)
    assert ALLOC_CONF not in env
    # called first by the user, then again by apply_profile after CUDA started: no false warning
    env = {}
    apply_env(Profile(), env)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert apply_env(Profile(), env) == []
    assert "already initialised" in apply_env(Profile(), {})[0]


def test_apply_env_drops_the_cublaslt_workspace_for_fp8_scaled_mm_only():
    env = {}
    apply_env(Profile().replace(**{"transformer.quantization": "fp8-scaled-mm"}), env)
    assert env[LT_WORKSPACE] == "0"
    env = {LT_WORKSPACE: "1024"}  # the user's own value stays
    apply_env(Profile().replace(**{"transformer.quantization": "fp8-scaled-mm"}), env)
    assert env[LT_WORKSPACE] == "1024"
    for profile in (Profile(), Profile().replace(**{"transformer.quantization": "int8-w8a8"})):
        env = {}
        apply_env(profile, env)
        assert LT_WORKSPACE not in env


def test_find_blocks_prefers_transformer_blocks():
    model, _ = model_and_input(depth=3)
    name, blocks = find_blocks(model)
    assert name == "transformer_blocks" and len(blocks) == 3
    lone = torch.nn.Linear(2, 2)
    assert find_blocks(lone) == ("", [lone])
    nested = torch.nn.Module()
    nested.extra_blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    nested.transformer_blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2)] * 2)
    assert find_blocks(nested)[0] == "transformer_blocks"


def test_quantize_linears_filter_and_errors():
    model, _ = model_and_input()
    names = quantize_linears(model, "fp8-cast", include="transformer_blocks.*.mlp.*")
    assert names == [f"transformer_blocks.{i}.mlp.{j}" for i in range(2) for j in (0, 2)]
    with pytest.raises(ValueError, match="unknown quantization"):
        quantize_linears(model, "fp4")
    with pytest.raises(ValueError, match="unknown quantization 'nvfp4-cast'"):
        quantize_linears(model, "nvfp4-cast")  # LTX-2's loader's, never ltx-tui's runtime's


@pytest.mark.parametrize("method", ["nvfp4-cast", "nvfp4-prequant"])
def test_loader_only_quantization_refused_before_any_change(method, monkeypatch):
    """b200 with ltx-kernels importable: the plan warns (only LTX-2's loader runs NVFP4) and
    apply_profile refuses in its prepare pass, the model untouched (it used to resolve `ok`, install
    the attention, then crash calling an ltx_kernels function that v1.2.0 does not have)."""
    import types

    monkeypatch.setitem(__import__("sys").modules, "ltx_kernels", types.ModuleType("ltx_kernels"))
    plan = resolve(Profile().replace(**{"transformer.quantization": method, "transformer.attention": "sdpa_math",
                                        "diffvae.na_backend": "eager_sdpa"}), preset("b200"))
    d = plan["transformer.quantization"]
    assert d.status.value == "warning" and "only LTX-2's loader" in d.message
    assert plan.step("quantize").args["loader"] is True
    model = dense_stack(2, 64, head_dim=32)
    before = [(type(m), getattr(m, "attention_function", None)) for m in model.modules()]
    with pytest.raises(ProfileNotRunnable, match=f"ltx-tui run.*--quantization {method}"):
        apply_profile(model, plan, device="cpu")
    assert [(type(m), getattr(m, "attention_function", None)) for m in model.modules()] == before


def test_fp8_blockwise_is_an_error_not_ok():
    for pid in ("h100", "b200"):
        d = resolve(Profile().replace(**{"transformer.quantization": "fp8-blockwise"}), preset(pid))[
            "transformer.quantization"]
        assert d.status.value == "error" and "ltx-tui does not run fp8-blockwise" in d.message


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


@pytest.mark.parametrize("change, message", [
    (dict(x_scale=torch.ones(7)), r"x_scale must have shape \(8,\)"),
    (dict(w_scale=torch.ones(16, 1)), r"w_scale must have shape \(16,\)"),
    (dict(bias=torch.ones(15)), r"bias must have shape \(16,\)"),
    (dict(x_scale=torch.ones(8, dtype=torch.int32)), "x_scale must be a float tensor"),
    (dict(wq=torch.zeros(16, 32, dtype=torch.int8)), "K mismatch"),
    (dict(xq=torch.zeros(8, 64)), "int8 operands"),
    (dict(xq=torch.zeros(8, 1, 64, dtype=torch.int8)), "must be 2-D"),
    (dict(out_dtype=torch.int32), "out_dtype"),
    (dict(bias=torch.ones(16, device="meta")), "one device"),
])
def test_int8_linear_checks_every_argument(change, message):
    args = dict(xq=torch.zeros(8, 64, dtype=torch.int8), x_scale=torch.ones(8),
                wq=torch.zeros(16, 64, dtype=torch.int8), w_scale=torch.ones(16), bias=None,
                out_dtype=torch.float32)
    args.update(change)
    with pytest.raises((TypeError, ValueError), match=message):
        int8_linear(**args)


def test_int8_linear_refuses_k_past_the_int32_range():
    k = INT8_K_MAX + 1
    with pytest.raises(ValueError, match="out of range"):
        int8_linear(torch.zeros(1, k, dtype=torch.int8), torch.ones(1), torch.zeros(1, k, dtype=torch.int8),
                    torch.ones(1))


def test_int8_autotune_is_keyed_on_bucketed_m():
    from kernels.int8_gemm import _int8_mm

    assert _int8_mm.keys == ["M_BUCKET", "N", "K"]


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


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
def test_top_level_api_loads_lazily():
    import subprocess
    import sys

    code = ("import sys, backends; assert 'torch' not in sys.modules; "
            "assert callable(backends.apply_profile) and callable(backends.apply_env); "
            "assert backends.NeighborhoodAttention3D.__name__ == 'NeighborhoodAttention3D'; "
            "assert callable(backends.na3d) and callable(backends.load_profile)")
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ}).returncode == 0
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import backends
        backends.nope


def test_dense_attention_follows_ltx2s_dit_protocol(tmp_path, cpu_cap):
    torch.manual_seed(0)
    model = torch.nn.Sequential(DenseAttention(128), DenseAttention(128))
    x = torch.randn(2, 10, 128)
    ref = run(model, x)
    report = apply_profile(model, write(tmp_path, '[transformer]\nattention = "sdpa_math"\n'), cpu_cap)
    change = report.change("transformer.attention")
    assert change.action == "installed" and change.modules == ("0", "1") and "sdpa_math" in change.detail
    assert isinstance(model[0].masked_attention_function, DenseFunction)
    torch.testing.assert_close(run(model, x), ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ProfileNotRunnable, match="FlashAttention 3 needs SM 9.x"):
        apply_profile(model, write(tmp_path, '[transformer]\nattention = "flash_attention_3"\n'), cpu_cap)


def test_dense_function_masks_like_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4 * 16) for _ in range(3))
    mask = torch.zeros(2, 5, 5)
    mask[:, :, -1] = float("-inf")
    got = DenseFunction("sdpa_math")(q, k, v, 4, mask)
    split = lambda t: t.view(2, 5, 4, 16).transpose(1, 2)  # noqa: E731
    want = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask[:, None])
    torch.testing.assert_close(got, want.transpose(1, 2).reshape(2, 5, 64))


def test_flash_attention_without_its_package_says_so():
    with pytest.raises(AttentionUnavailable, match="flash_attn_interface, which is not importable"):
        DenseFunction("flash_attention_3")
    assert not DenseFunction("sdpa_flash").masks and DenseFunction("pytorch").masks


def test_fp8_attention_without_the_cudnn_frontend_says_so(monkeypatch):
    from backends.runtime import cudnn_fp8_attention as fp8

    def missing():
        raise ImportError("No module named 'cudnn'")

    monkeypatch.setattr(fp8, "_cudnn", missing)
    fp8.unavailable_reason.cache_clear()
    try:
        with pytest.raises(AttentionUnavailable, match=r"sdpa_cudnn_fp8: the cuDNN frontend \(pip install "
                                                       r"nvidia-cudnn-frontend\) is not importable"):
            DenseFunction("sdpa_cudnn_fp8")
    finally:
        fp8.unavailable_reason.cache_clear()


def test_explicit_plan_is_what_apply_profile_runs(tmp_path, cpu_cap):
    plan = resolve(write(tmp_path, '[diffvae]\nna_backend = "eager_sdpa"\n'), cpu_cap)
    model, x = model_and_input()
    report = apply_profile(model, plan)
    assert report.plan is plan
    assert plan.step("na_backend").args == {"backend": "eager_sdpa"}


def test_fp8_attention_supports_says_what_is_wrong():
    from backends.runtime.cudnn_fp8_attention import supports

    t = lambda *shape, dtype=torch.bfloat16: torch.zeros(*shape, dtype=dtype)  # noqa: E731
    assert "(B, S, heads, head_dim)" in supports(t(8, 2, 64), t(8, 2, 64), t(8, 2, 64))
    assert "share a shape" in supports(t(1, 8, 2, 64), t(1, 8, 2, 64), t(1, 9, 2, 64))
    assert "bf16/fp16" in supports(*(t(1, 8, 2, 64, dtype=torch.float32),) * 3)
    assert "multiple of 16 up to 128" in supports(*(t(1, 8, 2, 72),) * 3)
    assert supports(*(t(1, 8, 2, 64),) * 3) == "fp8 SDPA needs CUDA tensors"


@pytest.mark.parametrize("divide", [True, False])
def test_scale_cast_in_one_pass(divide):
    from kernels.scale_cast import scale_cast

    x = torch.randn(3, 5000)
    s = torch.tensor([0.25])
    got = scale_cast(x, s, torch.float16, divide)
    torch.testing.assert_close(got, (x / 0.25 if divide else x * 0.25).half())
    with pytest.raises(ValueError, match="one fp32 element"):
        scale_cast(x, torch.ones(2), torch.float16, divide)


@pytest.mark.parametrize("at", [0, 3 * 4096 + 5, 8 * 4096 + 1, 9 * 4096 + 6])
def test_fp8_qkv_amax_sees_every_block_a_program_loops_over(at):
    from kernels import fp8_qkv

    q, k = torch.randn(1, 3, 2, 16), torch.randn(1, 3, 2, 16)
    v = torch.rand(9 * 4096 + 7) * 0.5
    v[at] = -7.0
    scalars = fp8_qkv.quantize_qkv(q, k, v.view(1, -1, 1, 1), 256.0, 2.0)[3]
    assert fp8_qkv.scalar(scalars, fp8_qkv.V).item() == pytest.approx(7.0 / 448, rel=1e-6)


def test_fp8_qkv_scales_and_cudnn_scalars_in_two_launches():
    from kernels import fp8_qkv

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 37, 2, 16, generator=g) * 3  # sizes off the kernel's block: masked tails
    k, v = torch.randn(1, 5000, 2, 16, generator=g), torch.randn(1, 5000, 2, 16, generator=g) * 0.5
    q8, k8, v8, scalars, rows = fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0)
    assert rows.shape == (0,)
    sq, sk, sv = (t.abs().max() / 448 for t in (q, k, v))
    got = [fp8_qkv.scalar(scalars, i).item() for i in range(7)]
    want = [sq, sk, sv, 1 / 256, 256.0, 1 / (2 * sv), 2 * sv]
    assert got == pytest.approx([float(w) for w in want], rel=1e-6)
    for t, t8, s in ((q, q8, sq), (k, k8, sk), (v, v8, sv)):
        assert t8.dtype == torch.float8_e4m3fn and t8.shape == t.shape
        # within e4m3's rounding (Triton's interpreter rounds to fp8 coarser than the GPU does)
        assert ((t8.float() * s - t).abs().max() / t.abs().max()) < 0.15
    with pytest.raises(ValueError, match="one device"):
        fp8_qkv.quantize_qkv(q, k, v.to("meta"), 256.0, 2.0)


def test_fp8_qkv_takes_static_q_k_scales_and_writes_o_row_descales():
    """Given q's and k's scales, only v is reduced; q and k cast with them (or, already e4m3, kept);
    O's descale comes once a row for the fp8 GEMM after the attention."""
    from kernels import fp8_qkv

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 37, 2, 16, generator=g), torch.randn(1, 70, 2, 16, generator=g) * 4
    v = torch.randn(1, 70, 2, 16, generator=g) * 0.5
    given = torch.tensor([0.01, 0.02])  # k's scale saturates some of k: clamped to 448, never NaN
    q8, k8, v8, scalars, rows = fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, rows=5000, qk_descale=given)
    got = [fp8_qkv.scalar(scalars, i).item() for i in range(7)]
    sv = float(v.abs().max() / 448)
    assert got == pytest.approx([0.01, 0.02, sv, 1 / 256, 256.0, 1 / (2 * sv), 2 * sv], rel=1e-6)
    assert rows.shape == (5000,) and torch.allclose(rows, torch.full((5000,), 2 * sv))
    k_in_range = (k / 0.02).clamp(-448, 448) * 0.02
    assert k8.float().abs().max() == 448 and not k8.float().isnan().any()
    # within e4m3's rounding (the interpreter's is coarser than the GPU's: a few values round a binade low)
    for t, t8, s in ((q, q8, 0.01), (k_in_range, k8, 0.02), (v, v8, sv)):
        assert ((t8.float() * s - t).norm() / t.norm()) < 0.1
    same = fp8_qkv.quantize_qkv(q8, k8, v, 256.0, 2.0, qk_descale=given)
    assert same[0] is q8 and same[1] is k8 and torch.equal(same[2].float(), v8.float())
    with pytest.raises(TypeError, match="only with qk_descale"):
        fp8_qkv.quantize_qkv(q8, k8, v, 256.0, 2.0)
    with pytest.raises(ValueError, match="2 fp32"):
        fp8_qkv.quantize_qkv(q, k, v, 256.0, 2.0, qk_descale=given.double())


def test_scale_cast_per_row():
    from kernels.scale_cast import scale_cast

    x, s = torch.randn(7, 300), torch.rand(7) + 0.5
    torch.testing.assert_close(scale_cast(x, s, torch.float32, False), x * s[:, None])
    with pytest.raises(ValueError, match="one a row"):
        scale_cast(x, torch.rand(6), torch.float32, False)


def test_fp8_attention_takes_the_large_calls_of_each_stage():
    from backends.runtime.dense_attention import takes_fp8

    assert takes_fp8(6144, 6144) and takes_fp8(24576, 24576) and takes_fp8(2048, 2048)
    assert not takes_fp8(1536, 1536)  # distilled's stage 1 at 768x512
    assert not takes_fp8(6144, 1024) and not takes_fp8(24576, 1024)  # the video-text cross-attention
    assert not takes_fp8(126, 24576) and not takes_fp8(24576, 126)  # the audio tokens' cross-attentions
    # with q's and k's scales known (QKBound) the video-text cross-attention pays: only v to quantize
    assert takes_fp8(6144, 1024, static_qk=True) and not takes_fp8(1536, 1024, static_qk=True)
    assert not takes_fp8(6144, 126, static_qk=True) and not takes_fp8(126, 6144, static_qk=True)


def test_fp8_attention_tensor_checks_trace_in_one_graph():
    """DenseFunction asks `tensors_reason` inside compiled blocks: it must not break the graph."""
    from backends.runtime.cudnn_fp8_attention import tensors_reason

    def pick(q, k, v):
        return q * 2 if tensors_reason(q, k, v) is None else q

    q = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(pick, fullgraph=True, backend="eager")
    assert torch.equal(compiled(q, q, q), q * 2)
    assert torch.equal(compiled(q.float(), q.float(), q.float()), q.float())


def test_few_queries_against_many_keys_go_to_flash_first(monkeypatch):
    """The audio tokens reading the video's (126 x 6144 keys) leave most SMs idle in cuDNN's kernel;
    SDPA's flash kernel splits the keys (H200: 32.8 against 57.8 us), so such unmasked calls try it first."""
    import contextlib

    import torch.nn.attention as attention

    from backends.runtime.dense_attention import DenseFunction, few_queries

    assert few_queries(126, 6144, False) and few_queries(126, 1024, False) and few_queries(126, 24576, False)
    assert not few_queries(6144, 126, False) and not few_queries(126, 126, False) and not few_queries(6144, 6144, False)
    assert not few_queries(126, 6144, True)  # a mask: flash has none
    seen = []

    def record(backends, set_priority=False):
        seen.append(([b.name for b in backends], set_priority))
        return contextlib.nullcontext()

    fn = DenseFunction("sdpa_cudnn")
    q, kv = torch.randn(1, 8, 2 * 16), torch.randn(1, 64, 2 * 16)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(t.unflatten(-1, (2, 16)).transpose(1, 2) for t in (q, kv, kv))).transpose(1, 2).flatten(2)
    with monkeypatch.context() as m:
        m.setattr(attention, "sdpa_kernel", record)
        fn(q, kv, kv, 2)
        fn(kv, kv, kv, 2)
        fn(q, kv, kv, 2, torch.zeros(8, 64))
    assert seen == [(["FLASH_ATTENTION", "CUDNN_ATTENTION"], True), (["CUDNN_ATTENTION"], False),
                    (["CUDNN_ATTENTION"], False)]
    torch._dynamo.reset()  # the real context manager traces into a compiled block (flash runs on the CPU too)
    compiled = torch.compile(lambda a, b: fn(a, b, b, 2), backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, kv), want)
