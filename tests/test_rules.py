"""Every rule fires in one case and holds in another; resolve() follows the decisions each test spells out."""

import dataclasses

import pytest

from backends.machine.capability import PeerAccess
from backends.machine.presets import preset
from backends.config.ltx2_shapes import RunShapes
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.config.rules import RULES, Facts, Status, decide, exit_code, natten_kernels
from fakes import with_package, without


def P(**kw):
    return Profile().replace(**{k.replace("__", "."): v for k, v in kw.items()})


def MGPU(gpus, **kw):
    """A multi-GPU profile that is valid as far as LTX-2's *_mgpu command lines go (fp8-cast, no offload)."""
    return P(parallel__gpus=gpus, transformer__quantization="fp8-cast", **kw)


def all2all_built_for(cap, archs):
    """`cap` with ltx-kernels' all2all built for `archs` (None: not known)."""
    lk = cap.packages["ltx_kernels"]
    details = {**lk.details, "all2all": True, "all2all_archs": archs,
               "all2all_note": "read from the test" if archs else "no CUDA fat binary in it (test)"}
    return dataclasses.replace(cap, packages={**cap.packages, "ltx_kernels": dataclasses.replace(lk, details=details)})


def with_peer(cap, between):
    """`cap` with peer access `between` every pair of distinct GPUs (None: unknown)."""
    n = len(cap.gpus)
    matrix = tuple(tuple(True if i == j else between for j in range(n)) for i in range(n))
    peer = PeerAccess(matrix, "test" if between is not None else None, None if between is not None else "not probed")
    return dataclasses.replace(cap, peer_access=peer)


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
    "attention.cudnn_fp8": ((P(transformer__attention="sdpa_cudnn_fp8"), preset("h100")),
                            (P(transformer__attention="sdpa_cudnn_fp8"), with_package(preset("h100"), "cudnn_frontend"))),
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
    "sparse.runs": ((P(transformer__sparse_attention="sla"), with_package(preset("h100"), "turbo_diffusion_ops")),
                    (P(), preset("h100"))),
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
    "offload.loader-quantization": ((P(offload__mode="cpu", transformer__quantization="nvfp4-cast"), preset("b200")),
                                    (P(offload__mode="cpu", transformer__quantization="fp8-cast"), preset("b200"))),
    "offload.quantization": ((P(offload__mode="cpu", transformer__quantization="fp8-scaled-mm"), preset("h100")),
                             (P(offload__mode="cpu", transformer__quantization="fp8-cast"), preset("h100"))),
    "parallel.gpu-count": ((P(parallel__gpus=2), preset("h100")), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.devices": ((P(parallel__devices=(3,)), preset("h100x2")), (P(parallel__devices=(1,)), preset("h100x2"))),
    "parallel.heads": ((P(parallel__gpus=3), preset("h100x4")), (P(parallel__gpus=4), preset("h100x4"))),
    "parallel.max-peers": ((MGPU(16), preset("h100x16")), (MGPU(8), preset("h100x8"))),
    "parallel.linux": ((P(parallel__gpus=2), None), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.nccl": ((P(parallel__gpus=2), None), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.all2all": ((P(parallel__gpus=2), preset("a100x2")), (P(parallel__gpus=2), preset("h100x2"))),
    "parallel.all2all-arch": ((MGPU(2), all2all_built_for(preset("b200x2"), ["sm_90"])),
                              (MGPU(2), all2all_built_for(preset("h200x2"), ["sm_90"]))),
    "parallel.all2all-unverified": ((MGPU(2), all2all_built_for(preset("h200x2"), None)), (MGPU(2), preset("h200x2"))),
    "parallel.peer-access": ((MGPU(2), with_peer(preset("h200x2"), False)), (MGPU(2), preset("h200x2"))),
    "parallel.peer-access-unverified": ((MGPU(2), with_peer(preset("h200x2"), None)), (MGPU(2), preset("h200x2"))),
    "parallel.sp-tokens": ((MGPU(2), preset("h200x2"), RunShapes(2048, 1152, 121)),
                           (MGPU(2), preset("h200x2"), RunShapes(1536, 1024, 121))),
    "parallel.ignores-quant-offload": ((P(parallel__gpus=2, offload__mode="cpu"), preset("h100x2")),
                                       (P(parallel__gpus=2, transformer__quantization="fp8-cast"), preset("h100x2"))),
    "parallel.compile-barrier": ((MGPU(2, compile__enabled=True), preset("h200x2")),
                                 (P(compile__enabled=True), preset("h200"))),
}


def _darwin(cap):
    import dataclasses
    return dataclasses.replace(cap, platform="darwin")


def _fill(rule_id, case, fires):
    """(profile, capability, run shapes or None) of a case: (profile, cap) or (profile, cap, run)."""
    profile, cap, run = (*case, None)[:3]
    if cap is None:  # platform/torch cases built from h100x2
        base = preset("h100x2")
        cap = (dataclasses.replace(base, platform="win32") if rule_id == "parallel.linux"
               else dataclasses.replace(base, torch=dataclasses.replace(base.torch, nccl=False)))
    return profile, cap, run


def test_every_rule_has_cases():
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_fires(rule_id):
    profile, cap, run = _fill(rule_id, CASES[rule_id][0], True)
    f = Facts(cap, profile, run=run)
    assert not RULES[rule_id].holds(f)
    assert RULES[rule_id].message(f)
    assert RULES[rule_id].fix(f)
    fired = {r for d in decide(profile, cap, run=run) if d.status is not Status.OK for r in d.rules}
    assert rule_id in fired


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_holds(rule_id):
    case = CASES[rule_id][1]
    if case is None:
        case = (P(transformer__attention="mps_sdpa"), _darwin(preset("cpu")))
    profile, cap, run = _fill(rule_id, case, False)
    assert RULES[rule_id].holds(Facts(cap, profile, run=run))
    fired = {r for d in decide(profile, cap, run=run) if d.status is not Status.OK for r in d.rules}
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


def test_prefetch_beyond_the_slots_is_a_fallback_to_what_the_runtime_streams():
    """The runtime fetches at most gpu_slots - 1 blocks ahead; the check said 5 -> 5 for 2 slots."""
    profile = P(offload__mode="cpu", offload__gpu_slots=2, offload__prefetch=5)
    d = by_option(profile, preset("h200"))["offload.prefetch"]
    assert (d.status, d.requested, d.effective) == (Status.FALLBACK, 5, 1)
    assert "at most 1 block(s) can be fetched ahead" in d.message and "offload.gpu_slots to 6" in d.remedy
    step = next(s for s in resolve(profile, preset("h200")).steps if s.kind == "offload")
    assert step.args["prefetch"] == 1 and "1 block(s) ahead" in step.text
    # a trial: prefetch 64 was told "or offload.gpu_slots to 65 or more", which no profile can set
    most = by_option(P(offload__mode="cpu", offload__gpu_slots=2, offload__prefetch=64), preset("h200"))
    assert most["offload.prefetch"].remedy == ("set offload.prefetch to at most 1 (offload.gpu_slots goes up to "
                                               "64, so at most 63 can be fetched ahead)")
    assert by_option(P(offload__mode="cpu", offload__gpu_slots=2, offload__prefetch=63), preset("h200"))[
        "offload.prefetch"].remedy.endswith(", or offload.gpu_slots to 64")  # its maximum: not "or more"
    fits = by_option(P(offload__mode="cpu", offload__gpu_slots=6, offload__prefetch=5), preset("h200"))
    assert (fits["offload.prefetch"].status, fits["offload.prefetch"].effective) == (Status.OK, 5)
    # the defaults fit each other: offload.mode = cpu alone is no fallback
    assert by_option(P(offload__mode="cpu"), preset("h200"))["offload.prefetch"].status is Status.OK


def test_no_cuda_gpu_leaves_parallel_devices_unused():
    """With parallel.gpus an error (no GPU visible) parallel.devices said "the first 1 CUDA ordinal(s)"."""
    d = by_option(P(), preset("cpu"))
    assert d["parallel.gpus"].status is Status.ERROR
    assert d["parallel.devices"].effective is None and "unused: parallel.gpus cannot run" in d["parallel.devices"].chain[0].reason
    assert by_option(P(), preset("h100"))["parallel.devices"].effective == [0]


def test_offload_with_int8_is_not_blamed_on_ltx2():
    d = by_option(P(offload__mode="cpu", transformer__quantization="int8-w8a8"), preset("h100"))
    assert d["offload.mode"].status is Status.OK


def test_reduce_overhead_with_offload_none_on_one_gpu_warns_that_ltx2_raises():
    d = by_option(P(compile__enabled=True, compile__mode="reduce-overhead"), preset("h100"))
    assert (d["compile.mode"].status, d["compile.mode"].effective) == (Status.WARNING, "reduce-overhead")
    ok = by_option(P(compile__enabled=True, compile__mode="max-autotune-no-cudagraphs"), preset("h100"))
    assert ok["compile.mode"].status is Status.OK


def test_capture_says_what_it_captures():
    d = by_option(P(compile__enabled=True, compile__capture=True), preset("h200"))["compile.capture"]
    assert (d.status, d.effective) == (Status.WARNING, True)  # LTX-2's own builder would raise; ours captures
    said = " ".join(step.reason for step in d.chain)
    assert "LTX-2's block loop as one CUDA graph per input shape" in said and "True" not in said


def test_capture_without_compile_captures_the_eager_loop():
    """compile.capture no longer needs compile.enabled: the runtime captures LTX-2's eager block loop."""
    plan = resolve(P(compile__enabled=False, compile__capture=True), preset("h200"))
    d = plan["compile.capture"]
    assert (d.status, d.effective) == (Status.OK, True)  # no LTX-2 flag involved: nothing of LTX-2's to warn about
    assert "(eager blocks)" in " ".join(step.reason for step in d.chain)
    assert plan.step("compile") is None and plan.step("capture").options == ("compile.capture",)
    assert plan["compile.mode"].effective is None  # the rest of compile stays unused
    assert resolve(P(compile__enabled=True, compile__capture=True), preset("h200")).step("capture") is None
    # where it cannot capture, the loop runs as it is: a fallback, never an error that refuses the profile
    for profile, machine, says in ((P(compile__enabled=False, compile__capture=True), "cpu", "no CUDA device"),
                                   (P(compile__capture=True), "cpu", "no CUDA device"),  # auto: eager on a CPU
                                   (P(compile__capture=True, offload__mode="cpu"), "h100", "streams offloaded"),
                                   (P(compile__enabled=False, compile__capture=True, parallel__gpus=2,
                                      transformer__quantization="fp8-cast"), "h100x2", "one GPU")):
        plan = resolve(profile, preset(machine))
        d = plan["compile.capture"]
        assert (d.status, d.effective) == (Status.FALLBACK, False) and says in d.message, (machine, d)
        assert plan.step("capture") is None and not plan.blocking
        assert d.remedy.endswith("or set compile.capture = false") and "to say so" not in d.remedy
    assert "compile.enabled = true" in d.remedy  # several GPUs: capture the compiled loop instead


def test_cuda_graphs_over_streamed_weights_fall_back_to_plain_compile():
    d = by_option(P(compile__enabled=True, compile__mode="max-autotune", compile__capture=True, offload__mode="cpu"),
                  preset("h100"))
    assert (d["compile.mode"].status, d["compile.mode"].effective) == (Status.FALLBACK, "max-autotune-no-cudagraphs")
    assert (d["compile.capture"].status, d["compile.capture"].effective) == (Status.FALLBACK, False)


def test_gpus_above_visible_count_is_an_error():
    d = by_option(P(parallel__gpus=4), preset("h100x2"))["parallel.gpus"]
    assert d.status is Status.ERROR and "2" in d.message


@pytest.mark.parametrize("quantization", ["none", "fp8-scaled-mm", "int8-w8a8", "nvfp4-cast"])
def test_multi_gpu_quantization_other_than_fp8_cast_is_an_error(quantization):
    """LTX-2's *_mgpu command lines drop --quantization and build fp8-cast: a profile asking for
    anything else would silently run fp8-cast (it was a warning; now the plan refuses it)."""
    d = by_option(P(parallel__gpus=2, transformer__quantization=quantization), preset("h100x2"))
    q = d["transformer.quantization"]
    assert (q.status, q.effective, q.rules) == (Status.ERROR, None, ("parallel.ignores-quant-offload",))
    assert f"transformer.quantization = {quantization} would silently run fp8-cast" in q.message
    assert "--offload" not in q.message and 'transformer.quantization = "fp8-cast"' in q.remedy
    ok = by_option(P(parallel__gpus=2, transformer__quantization="fp8-cast"), preset("h100x2"))
    assert ok["transformer.quantization"].status is Status.OK


@pytest.mark.parametrize("mode", ["cpu", "disk"])
def test_multi_gpu_offload_is_an_error(mode):
    d = by_option(MGPU(2, offload__mode=mode), preset("h100x2"))
    o = d["offload.mode"]
    assert (o.status, o.effective, o.rules) == (Status.ERROR, None, ("parallel.ignores-quant-offload",))
    assert f"drop --offload" in o.message and f"offload.mode = {mode} would silently stream nothing" in o.message
    assert 'offload.mode = "none"' in o.remedy
    assert d["offload.gpu_slots"].effective is None and d["transformer.quantization"].status is Status.OK


def test_multi_gpu_preflight_holds_on_the_big_boxes():
    for cap, gpus in (("h200x2", 2), ("h200x4", 4), ("h100x8", 8), ("b200x8", 8), ("h100x8", 4)):
        plan = decide(MGPU(gpus), preset(cap), run=RunShapes(768, 512, 121))
        bad = [(d.option, d.message) for d in plan if d.status is not Status.OK and d.option != "parallel.gpus"]
        g = {d.option: d for d in plan}["parallel.gpus"]
        assert g.status is Status.OK and not bad, (cap, bad, g.message)
        assert "6144 video tokens at 768x512x121 within the SP token cap (32768)" in g.chain[0].reason


def test_multi_gpu_errors_are_all_named():
    """16 GPUs on an 8-GPU box: too many for the box (one node only) and for the all2all."""
    g = by_option(MGPU(16), preset("h100x8"))["parallel.gpus"]
    assert g.status is Status.ERROR and set(g.rules) == {"parallel.gpu-count", "parallel.max-peers"}
    assert "multi-node is not supported" in g.message and "at most 8 GPUs" in g.message
    assert len(g.chain) == 2 and "lower parallel.gpus to the 8 visible" in g.remedy
    heads = by_option(MGPU(6), preset("h100x8"))["parallel.gpus"]
    assert heads.rules == ("parallel.heads",) and "6 GPUs do not divide them" in heads.message
    assert "allowed: 1, 2, 4, 8" in heads.message


def test_sp_token_cap_is_checked_only_with_a_run():
    no_run = by_option(MGPU(2), preset("h200x2"))["parallel.gpus"]
    assert no_run.status is Status.OK and "not checked: no run given (--resolution/--frames)" in no_run.chain[0].reason
    at_cap = {d.option: d for d in decide(MGPU(2), preset("h200x2"), run=RunShapes(1536, 1024, 121))}
    assert at_cap["parallel.gpus"].status is Status.OK  # 24576 tokens: LTX-2's own example of stage 2
    over = {d.option: d for d in decide(MGPU(2), preset("h200x2"), run=RunShapes(2048, 1152, 121))}["parallel.gpus"]
    assert over.status is Status.ERROR and over.rules == ("parallel.sp-tokens",)
    assert "36864 video tokens" in over.message and "cap of 32768" in over.message
    # the all2all buffers hold the whole batch: 2 x 24576 tokens is over the cap
    batch = {d.option: d for d in decide(MGPU(4), preset("h200x4"), run=RunShapes(1536, 1024, 121, batch=2))}
    assert batch["parallel.gpus"].status is Status.ERROR and "batch 2 x 24576" in batch["parallel.gpus"].message


def test_sp_tokens_are_padded_to_the_world_size():
    from backends.config.rules import sp_token_cap, sp_tokens

    run = RunShapes(32 * 3, 32 * 3, 1)  # 9 tokens
    assert [sp_tokens(run, n) for n in (1, 2, 4, 8)] == [9, 10, 12, 16]
    assert [sp_token_cap(n) for n in (2, 4, 8)] == [32768] * 3


def test_compile_under_sp_warns_about_the_all2all_barrier():
    c = by_option(MGPU(2, compile__enabled=True), preset("h200x2"))["compile.enabled"]
    assert (c.status, c.effective, c.rules) == (Status.WARNING, True, ("parallel.compile-barrier",))
    assert "set_timeout_seconds" in c.message and "never raises it" in c.message
    assert "`ltx-tui run` raises the barrier timeout in every rank before the first step" in c.message


def test_all2all_arch_and_peer_access_name_what_is_wrong():
    arch = by_option(MGPU(2), all2all_built_for(preset("b200x2"), ["sm_80", "sm_90"]))["parallel.gpus"]
    assert arch.status is Status.ERROR and "sm_80, sm_90 only" in arch.message and "SM 10.0" in arch.message
    assert "TORCH_CUDA_ARCH_LIST naming 10.0" in arch.remedy
    ptx = by_option(MGPU(2), all2all_built_for(preset("b200x2"), ["sm_90", "compute_90"]))["parallel.gpus"]
    assert ptx.status is Status.OK  # PTX for SM 9.0 is compiled by the driver for SM 10.0
    newer = by_option(MGPU(2), all2all_built_for(preset("h200x2"), ["sm_100", "compute_100"]))["parallel.gpus"]
    assert newer.status is Status.ERROR  # neither SM 10.0 code nor its PTX runs on SM 9.0
    unknown = by_option(MGPU(2), all2all_built_for(preset("h200x2"), None))["parallel.gpus"]
    assert unknown.status is Status.WARNING and "not verified that it runs on SM 9.0" in unknown.message
    cap = with_peer(preset("h200x4"), True)
    cap = dataclasses.replace(cap, peer_access=PeerAccess(
        tuple(tuple(False if {i, j} == {1, 3} else True for j in range(4)) for i in range(4)), "test", None))
    bad = by_option(MGPU(4), cap)["parallel.gpus"]
    assert bad.status is Status.ERROR and bad.rules == ("parallel.peer-access",) and "1-3" in bad.message
    assert by_option(MGPU(2, parallel__devices=(0, 1)), cap)["parallel.gpus"].status is Status.OK


def test_auto_attention_order_per_architecture():
    assert by_option(P(), preset("h100"))["transformer.attention"].effective == "flash_attention_3"
    assert by_option(P(), without(preset("h100"), "flash_attn_3"))["transformer.attention"].effective == "sdpa_cudnn"
    assert by_option(P(), preset("b200"))["transformer.attention"].effective == "flash_attention_4"
    assert by_option(P(), preset("a100"))["transformer.attention"].effective == "sdpa_cudnn"
    # no CUDA: torch's own SDPA dispatch (its fused CPU kernel) before the math backend, which a newcomer
    # trial's tune measured 8.7x slower on the CPU
    assert by_option(P(), preset("cpu"))["transformer.attention"].effective == "pytorch"


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


def test_a_natten_kernel_for_another_gpu_is_fixed_by_auto_not_by_installing_natten():
    """blackwell-fna on an H100 (natten with its CUDA kernels there) was told to install natten."""
    d = by_option(P(diffvae__natten_kernel="blackwell-fna"), preset("h100"))["diffvae.natten_kernel"]
    assert d.status is Status.ERROR and "needs SM 10" in d.message
    assert d.remedy == 'set diffvae.natten_kernel = "auto" (here: hopper-fna, cutlass-fna, flex-fna)'
    missing = by_option(P(diffvae__natten_kernel="blackwell-fna"), without(preset("h100"), "natten"))
    assert "install natten" in missing["diffvae.natten_kernel"].remedy  # natten itself is what is missing


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
    # with no GPU visible it said "lower parallel.gpus to the 0 visible", out of range
    remedy = by_option(P(parallel__gpus=2), preset("cpu"))["parallel.gpus"].remedy
    assert "to the 0" not in remedy and remedy.startswith("run on a machine with NVIDIA GPUs")


def test_fast_norm_says_which_norms_run_where():
    def message(cap, on=True):
        return by_option(P(transformer__fast_norm=on), cap)["transformer.fast_norm"].chain[-1].reason

    assert message(preset("h100")) == "one-pass norms (kernels.adaln, kernels.dit_qk)"
    assert message(preset("cpu")).startswith("LTX-2's own norm ops: the one-pass kernels run on CUDA (")
    assert message(preset("h100"), on=False) == "LTX-2's own norm ops"
