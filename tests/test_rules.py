"""Every rule fires in one case and holds in another; resolve() follows the decisions each test spells out."""

import pytest

from backends.machine.presets import preset
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.config.rules import RULES, Facts, Status, exit_code, natten_kernels
from fakes import with_package, without


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def natten_missing(pid):
    return without(preset(pid), "natten")


def natten_no_lib(pid):
    return with_package(preset(pid), "natten", has_libnatten=False)


b200_no_dsl = lambda: without(preset("b200"), "cutlass_dsl")  # noqa: E731

# rule id -> ((profile, capability) where it fires, (profile, capability) where it holds)
CASES = {
    "cuda.device": ((P(offload__mode="cpu"), preset("cpu")), (P(offload__mode="cpu"), preset("a100"))),
    "natten.usable": ((P(diffvae__na_backend="natten"), natten_missing("h100")),
                      (P(diffvae__na_backend="natten"), preset("h100"))),
    "natten.flex-slow": ((P(diffvae__na_backend="natten"), natten_no_lib("h100")), (P(), preset("cpu"))),
    "triton.na": ((P(diffvae__na_backend="triton"), without(preset("h100"), "triton")),
                  (P(diffvae__na_backend="triton"), preset("h100"))),
    "diffvae.compile-off": ((P(diffvae__mode="chunked_compile"), natten_missing("h100")),
                            (P(diffvae__mode="chunked_compile"), preset("h100"))),
    "diffvae.combined-needs-natten": ((P(diffvae__mode="combined_compile"), natten_missing("h100")),
                                      (P(diffvae__mode="combined_compile"), preset("h100"))),
    "diffvae.blackwell-dsl": ((P(diffvae__mode="blackwell_dsl"), preset("h100")),
                              (P(diffvae__mode="blackwell_dsl"), preset("b200"))),
    "diffvae.dsl-pair": ((P(diffvae__na_backend="blackwell_dsl"), preset("b200")),
                         (P(diffvae__mode="blackwell_dsl", diffvae__na_backend="blackwell_dsl"), preset("b200"))),
    "attention.fa3": ((P(transformer__attention="flash_attention_3"), preset("a100")),
                      (P(transformer__attention="flash_attention_3"), preset("h100"))),
    "attention.fa4": ((P(transformer__attention="flash_attention_4"), preset("h100")),
                      (P(transformer__attention="flash_attention_4"), preset("b200"))),
    "attention.sdpa_cudnn": ((P(transformer__attention="sdpa_cudnn"), preset("cpu")),
                             (P(transformer__attention="sdpa_cudnn"), preset("a100"))),
    "attention.sdpa_flash": ((P(transformer__attention="sdpa_flash"), preset("cpu")),
                             (P(transformer__attention="sdpa_flash"), preset("a100"))),
    "attention.sdpa_efficient": ((P(transformer__attention="sdpa_efficient"), preset("cpu")),
                                 (P(transformer__attention="sdpa_efficient"), preset("a100"))),
    "attention.mps": ((P(transformer__attention="mps_sdpa"), preset("cpu")), None),
    "quant.fp8-scaled-mm": ((P(transformer__quantization="fp8-scaled-mm"), preset("a100")),
                            (P(transformer__quantization="fp8-scaled-mm"), preset("l40s"))),
    "quant.nvfp4": ((P(transformer__quantization="nvfp4-cast"), preset("h100")),
                    (P(transformer__quantization="nvfp4-prequant"), preset("rtx5090"))),
    "quant.fp8-blockwise": ((P(transformer__quantization="fp8-blockwise"), with_package(preset("a100"), "ltx_kernels")),
                            (P(transformer__quantization="fp8-blockwise"), preset("h100"))),
    "quant.runs": ((P(transformer__quantization="fp8-blockwise"), preset("h100")),
                   (P(transformer__quantization="fp8-cast"), preset("h100"))),
    "quant.loader-only": ((P(transformer__quantization="nvfp4-cast"), preset("b200")),
                          (P(transformer__quantization="fp8-scaled-mm"), preset("b200"))),
    "quant.int8-w8a8": ((P(transformer__quantization="int8-w8a8"), preset("cpu")),
                        (P(transformer__quantization="int8-w8a8"), preset("a100"))),
    "sparse.sla": ((P(transformer__sparse_attention="sla"), preset("h100")),
                   (P(transformer__sparse_attention="sla"), with_package(preset("h100"), "turbo_diffusion_ops"))),
    "sparse.sagesla": ((P(transformer__sparse_attention="sagesla"), with_package(preset("h100"), "turbo_diffusion_ops")),
                       (P(transformer__sparse_attention="sagesla"),
                        with_package(with_package(preset("h100"), "turbo_diffusion_ops"), "spas_sage_attn"))),
    "compile.cuda-graphs-cuda": ((P(compile__enabled=True, compile__mode="reduce-overhead"), preset("cpu")),
                                 (P(compile__enabled=True, compile__mode="reduce-overhead",
                                    offload__mode="cpu"), preset("h100"))),
    "compile.cuda-graphs-single-gpu": ((P(compile__enabled=True, compile__mode="reduce-overhead"), preset("h100")),
                                       (P(compile__enabled=True, compile__mode="reduce-overhead", offload__mode="cpu"),
                                        preset("h100"))),
    "compile.cuda-graphs-streamed": ((P(compile__enabled=True, compile__mode="reduce-overhead", offload__mode="cpu"),
                                      preset("h100")),
                                     (P(compile__enabled=True, compile__mode="reduce-overhead"), preset("h100"))),
    "compile.inductor-triton": ((P(compile__enabled=True), without(preset("h100"), "triton")),
                                (P(compile__enabled=True), preset("h100"))),
    "compile.dynamic": ((P(compile__enabled=True, compile__dynamic="true"), preset("h100")),
                        (P(compile__enabled=True, compile__dynamic="false"), preset("h100"))),
    "offload.quantization": ((P(offload__mode="cpu", transformer__quantization="fp8-scaled-mm"), preset("h100")),
                             (P(offload__mode="cpu", transformer__quantization="fp8-cast"), preset("h100"))),
    "parallel.gpu-count": ((P(parallel__gpus=2), preset("h100")), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.devices": ((P(parallel__devices=(3,)), preset("h100x2")), (P(parallel__devices=(1,)), preset("h100x2"))),
    "parallel.heads": ((P(parallel__gpus=3), preset("h100x4")), (P(parallel__gpus=4), preset("h100x4"))),
    "parallel.linux": ((P(parallel__gpus=2), None), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.nccl": ((P(parallel__gpus=2), None), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.all2all": ((P(parallel__gpus=2), preset("a100x2")), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.ignores-quant-offload": ((P(parallel__gpus=2, offload__mode="cpu"), preset("h100x2")),
                                       (P(parallel__gpus=2, transformer__quantization="fp8-cast"), preset("h100x2"))),
}


def _darwin(cap):
    import dataclasses
    return dataclasses.replace(cap, platform="darwin")


def _fill(rule_id, case, fires):
    profile, cap = case
    if cap is None:  # platform/torch cases built from h100x2
        import dataclasses
        base = preset("h100x2")
        cap = (dataclasses.replace(base, platform="win32") if rule_id == "parallel.linux"
               else dataclasses.replace(base, torch=dataclasses.replace(base.torch, nccl=False)))
    return profile, cap


def test_every_rule_has_cases():
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_fires(rule_id):
    profile, cap = _fill(rule_id, CASES[rule_id][0], True)
    f = Facts(cap, profile)
    assert not RULES[rule_id].holds(f)
    assert RULES[rule_id].message(f)
    assert RULES[rule_id].remedy
    fired = {r for d in resolve(profile, cap) if d.status is not Status.OK for r in d.rules}
    assert rule_id in fired


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_holds(rule_id):
    case = CASES[rule_id][1]
    if case is None:
        case = (P(transformer__attention="mps_sdpa"), _darwin(preset("cpu")))
    profile, cap = _fill(rule_id, case, False)
    assert RULES[rule_id].holds(Facts(cap, profile))
    fired = {r for d in resolve(profile, cap) if d.status is not Status.OK for r in d.rules}
    assert rule_id not in fired


def by_option(profile, cap):
    return {d.option: d for d in resolve(profile, cap)}


# --- where the plan differs from, or warns about, LTX-2 v1.2.0's own pipeline -------------------------------------------------------------------

def test_combined_compile_without_natten_runs_on_triton_and_warns_about_ltx2():
    d = by_option(P(diffvae__mode="combined_compile"), natten_missing("h100"))
    assert (d["diffvae.na_backend"].status, d["diffvae.na_backend"].effective) == (Status.OK, "triton")
    mode = d["diffvae.mode"]
    assert (mode.status, mode.effective) == (Status.WARNING, "combined_compile")
    assert "LTX-2's own pipeline raises" in mode.message and "natten" in mode.message


def test_chunked_compile_with_triton_stays_compiled_and_says_what_ltx2_would_do():
    d = by_option(P(diffvae__mode="chunked_compile", diffvae__na_backend="natten"), natten_missing("h100"))
    na = d["diffvae.na_backend"]
    assert (na.status, na.effective) == (Status.FALLBACK, "triton")
    assert [s.value for s in na.chain] == ["natten", "triton"]
    mode = d["diffvae.mode"]
    assert (mode.status, mode.effective) == (Status.WARNING, "chunked_compile")
    assert "keeps it compiled" in mode.message and "turns torch.compile off" in mode.message


def test_chunked_compile_without_natten_or_cuda_falls_back_to_eager_sdpa():
    d = by_option(P(diffvae__mode="chunked_compile", diffvae__na_backend="natten"), natten_missing("cpu"))
    na = d["diffvae.na_backend"]
    assert na.effective == "eager_sdpa"
    assert [s.value for s in na.chain] == ["natten", "triton", "eager_sdpa"]
    assert d["diffvae.mode"].effective == "chunked_compile"


def test_auto_na_order_is_one_function_and_never_a_fallback():
    h200 = by_option(P(), natten_missing("h200"))["diffvae.na_backend"]
    assert (h200.status, h200.effective) == (Status.OK, "triton")
    a100 = by_option(P(), preset("a100"))["diffvae.na_backend"]
    assert (a100.status, a100.effective) == (Status.OK, "natten")
    a100_no_natten = by_option(P(), natten_missing("a100"))["diffvae.na_backend"]
    assert (a100_no_natten.status, a100_no_natten.effective) == (Status.OK, "triton")
    # NATTEN's flex-fna on CUDA is skipped by auto (100x+ slower), but taken when asked for
    flex_only = by_option(P(), natten_no_lib("a100"))["diffvae.na_backend"]
    assert flex_only.effective == "triton" and "flex-fna" in flex_only.chain[0].reason


def test_fp8_scaled_mm_on_a100_is_an_error():
    d = by_option(P(transformer__quantization="fp8-scaled-mm"), preset("a100"))["transformer.quantization"]
    assert d.status is Status.ERROR and "8.9" in d.message and d.remedy


def test_offload_cpu_with_fp8_scaled_mm_warns_that_ltx2_raises():
    d = by_option(P(offload__mode="cpu", transformer__quantization="fp8-scaled-mm"), preset("h100"))
    assert d["offload.mode"].status is Status.WARNING
    assert "fp8-scaled-mm" in d["offload.mode"].message and "LTX-2's own pipeline raises" in d["offload.mode"].message


def test_offload_with_int8_is_not_blamed_on_ltx2():
    d = by_option(P(offload__mode="cpu", transformer__quantization="int8-w8a8"), preset("h100"))
    assert d["offload.mode"].status is Status.OK


def test_reduce_overhead_with_offload_none_on_one_gpu_warns_that_ltx2_raises():
    d = by_option(P(compile__enabled=True, compile__mode="reduce-overhead"), preset("h100"))
    assert (d["compile.mode"].status, d["compile.mode"].effective) == (Status.WARNING, "reduce-overhead")
    ok = by_option(P(compile__enabled=True, compile__mode="max-autotune-no-cudagraphs"), preset("h100"))
    assert ok["compile.mode"].status is Status.OK


def test_cuda_graphs_over_streamed_weights_fall_back_to_plain_compile():
    d = by_option(P(compile__enabled=True, compile__mode="max-autotune", compile__capture=True, offload__mode="cpu"),
                  preset("h100"))
    assert (d["compile.mode"].status, d["compile.mode"].effective) == (Status.FALLBACK, "max-autotune-no-cudagraphs")
    assert (d["compile.capture"].status, d["compile.capture"].effective) == (Status.FALLBACK, False)


def test_gpus_above_visible_count_is_an_error():
    d = by_option(P(parallel__gpus=4), preset("h100x2"))["parallel.gpus"]
    assert d.status is Status.ERROR and "2" in d.message


def test_multi_gpu_warns_that_quantization_is_ignored():
    d = by_option(P(parallel__gpus=2, transformer__quantization="fp8-scaled-mm"), preset("h100x2"))
    q = d["transformer.quantization"]
    assert (q.status, q.effective) == (Status.WARNING, "fp8-cast")


def test_auto_attention_order_per_architecture():
    assert by_option(P(), preset("h100"))["transformer.attention"].effective == "flash_attention_3"
    assert by_option(P(), without(preset("h100"), "flash_attn_3"))["transformer.attention"].effective == "sdpa_cudnn"
    assert by_option(P(), preset("b200"))["transformer.attention"].effective == "flash_attention_4"
    assert by_option(P(), preset("a100"))["transformer.attention"].effective == "sdpa_cudnn"
    assert by_option(P(), preset("cpu"))["transformer.attention"].effective == "sdpa_math"


def test_auto_natten_kernel_order():
    assert by_option(P(), preset("b200"))["diffvae.natten_kernel"].effective == "blackwell-fna"
    natten = P(diffvae__na_backend="natten")
    assert by_option(natten, preset("h100"))["diffvae.natten_kernel"].effective == "hopper-fna"
    assert by_option(P(), preset("a100"))["diffvae.natten_kernel"].effective == "cutlass-fna"
    flex = by_option(natten, natten_no_lib("h100"))["diffvae.natten_kernel"]
    assert (flex.effective, flex.status) == ("flex-fna", Status.WARNING)


def test_explicit_natten_kernel_that_cannot_run_is_an_error():
    d = by_option(P(diffvae__natten_kernel="hopper-fna"), preset("a100"))
    assert d["diffvae.natten_kernel"].status is Status.ERROR
    assert "SM 9.0" in d["diffvae.natten_kernel"].message


def test_natten_kernel_facts():
    cpu = natten_kernels(preset("cpu"))
    assert [k for k, v in cpu.items() if v.available] == ["flex-fna"]
    assert not natten_kernels(preset("h100"), head_dim=48)["hopper-fna"].available
    assert not natten_kernels(preset("h100"), head_dim=48)["flex-fna"].available
    assert natten_kernels(preset("h100"), head_dim=48)["cutlass-fna"].available


def test_blackwell_dsl_needs_cutlass_dsl():
    d = by_option(P(diffvae__mode="blackwell_dsl"), b200_no_dsl())["diffvae.mode"]
    assert d.status is Status.ERROR and "cutlass" in d.message


def test_auto_is_never_blackwell_dsl():
    assert by_option(P(), preset("b200"))["diffvae.na_backend"].effective == "natten"


def test_default_profile_on_cpu_only_host():
    decisions = resolve(P(), preset("cpu"))
    errors = [d.option for d in decisions if d.status is Status.ERROR]
    assert errors == ["parallel.gpus"]
    assert exit_code(decisions) == 1


def test_strict_turns_fallbacks_into_exit_1():
    decisions = resolve(P(diffvae__na_backend="natten"), natten_missing("h100"))
    assert exit_code(decisions) == 0
    assert exit_code(decisions, strict=True) == 1


def test_unused_options_have_no_effective_value():
    d = by_option(P(), preset("h100"))
    assert d["compile.mode"].effective is None and d["compile.mode"].status is Status.OK
    assert d["offload.gpu_slots"].effective is None


@pytest.mark.parametrize("cap_id", ["h100", "a100", "b200", "cpu"])
@pytest.mark.parametrize("mode", ["chunked_eager", "chunked_compile", "combined_compile"])
@pytest.mark.parametrize("na", ["auto", "natten", "triton", "eager_sdpa"])
def test_effective_na_backend_is_always_concrete(cap_id, mode, na):
    """The runtime installs exactly the plan's effective value: never `auto` (which once fell
    through to the brute-force reference kernel)."""
    plan = resolve(P(diffvae__mode=mode, diffvae__na_backend=na), preset(cap_id))
    d = plan["diffvae.na_backend"]
    assert d.effective in ("natten", "triton", "eager_sdpa") or d.status is Status.ERROR
    step = plan.step("na_backend")
    if d.effective is not None:
        assert step.args["backend"].split(":")[0] == d.effective


def test_registry_auto_is_the_plans_auto():
    import torch

    from backends.machine.capability import probe
    from backends.runtime.attention import choose_backend

    cap = probe()
    q = torch.zeros(1, 3, 3, 3, 1, 64)
    assert choose_backend(q, "auto", cap) == resolve(P(), cap)["diffvae.na_backend"].effective


def test_gpu_less_default_profile_does_not_say_lower_gpus():
    d = by_option(P(), preset("cpu"))["parallel.gpus"]
    assert d.status is Status.ERROR and "lower" not in d.remedy and "NVIDIA GPU" in d.remedy
    assert "lower parallel.gpus" in by_option(P(parallel__gpus=4), preset("h100x2"))["parallel.gpus"].remedy
