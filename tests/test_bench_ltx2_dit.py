"""bench/ltx2_dit.py: its kernel categories (on trace events as a CUDA trace names them), and the
whole bench on LTX-2's real LTXModel at toy size on the CPU (table and --breakdown)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "ltx2_dit.py"
TOY = ["--device", "cpu", "--size", "tiny", "--layers", "1", "--tokens", "32", "--text-tokens", "8",
       "--audio-tokens", "6", "--repeat", "1", "--warmup", "1"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_ltx2_dit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Event:
    name: str
    input_shapes: list | None = None
    cpu_parent: Event | None = None


def under(*names_and_shapes) -> Event:
    """An event chain, innermost first: each item a name or (name, shapes)."""
    parent = None
    for item in reversed(names_and_shapes):
        name, shapes = item if isinstance(item, tuple) else (item, None)
        parent = Event(name, shapes, parent)
    return parent


DIMS = {"nv": 6144, "na": 126, "nt": 1024, "dv": 4096, "da": 2048}
BLOCK = "mod:transformer_blocks.*|BasicAVTransformerBlock"


@pytest.mark.parametrize("kernel, event, expected", [
    ("nvjet_tst_192x192_64x3_2x1_v_bz_coopA_TNN",
     under(("aten::addmm", [[4096], [6144, 4096], [4096, 4096]]), "aten::linear",
           "mod:transformer_blocks.*.attn1.to_q|Linear", "mod:transformer_blocks.*.attn1|Attention", BLOCK),
     ("GEMM", "video self-attn qkv 6144x4096->4096")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32", under(("aten::mm", [[6144, 4096], [4096, 16384], [6144, 16384]]), BLOCK),
     ("GEMM", "video FF in 6144x4096->16384")),
    ("nvjet_qqtst_128x256", under(("aten::_scaled_mm", [[1024, 2048], [2048, 2048], [1024, 1], [1, 2048]]), BLOCK),
     ("GEMM", "text k/v (cross-attn) 1024x2048->2048")),
    ("nvjet_tst_64x8", under(("aten::addmm", [[24576], [6144, 4096], [4096, 24576]]), "aten::linear",
                              "mod:adaln_single.linear|Linear", "fn:preprocess"),
     ("GEMM", "outside the blocks (patchify, AdaLN/timestep MLPs, proj_out)")),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128",
     under(("aten::_scaled_dot_product_cudnn_attention", [[1, 32, 6144, 128], [1, 32, 1024, 128],
                                                           [1, 32, 1024, 128], [1, 1, 1, 1024]]),
           "aten::scaled_dot_product_attention", BLOCK),
     ("attention", "video text cross (6144 q x 1024 kv, 32x128)")),
    ("flash_fwd_kernel", under(("flash_attn_3::fwd", [[1, 126, 32, 64], [1, 6144, 32, 64], [1, 6144, 32, 64]])),
     ("attention", "v2a cross (q audio) (126 q x 6144 kv, 32x64)")),
    ("triton_red_fused__fused_rms_norm_add_mul_0", under("triton_red_fused__fused_rms_norm_add_mul_0", BLOCK),
     ("element-wise", "RMSNorm / LayerNorm (Inductor: with what it fused)")),
    ("triton_poi_fused_gelu_view_2", under("triton_poi_fused_gelu_view_2", BLOCK), ("element-wise", "gelu (tanh)")),
    ("triton_poi_fused_add_mul_3", under("triton_poi_fused_add_mul_3", BLOCK),
     ("element-wise", "fused by Inductor (adds, gates, modulation, RoPE, ...)")),
    # compiled blocks: Inductor's fused kernels carry their neighbours' names (_scaled_mm, sdpa)
    ("triton_red_fused__fused_rms_norm__scaled_mm__to_copy_abs_add_amax_clamp_div_0",
     under("triton_red_fused__fused_rms_norm__scaled_mm__to_copy_abs_add_amax_clamp_div_0", BLOCK),
     ("quantization", "activation quantization (amax, scale, cast; Inductor: with the norm/GELU before it)")),
    ("triton_poi_fused__fused_rms_norm__scaled_dot_product_cudnn_attention_add_1",
     under("triton_poi_fused__fused_rms_norm__scaled_dot_product_cudnn_attention_add_1", BLOCK),
     ("element-wise", "RMSNorm / LayerNorm (Inductor: with what it fused)")),
    ("_few_rows_partial", under(("ltx_tui::fp8_few_rows_mm", [[126, 2048], [126], [2048, 2048], [2048]]), BLOCK),
     ("GEMM", "audio tokens (self/text/av attention, FF) 126x2048->2048")),
    ("triton_tem_fused_addmm_2", under("triton_tem_fused_addmm_2", BLOCK), ("GEMM", "in the blocks, shape unknown")),
    ("_quantize_rows", under("mod:transformer_blocks.*.ff.net.2|FP8ScaledMMLinear", BLOCK),
     ("quantization", "activation quantization (amax, scale, cast)")),
    ("void at::native::unrolled_elementwise_kernel<copy, Float8_e4m3fn>",
     under("aten::copy_", "aten::_to_copy", "aten::to", "mod:transformer_blocks.*.attn1.to_v|Fp8CastLinear"),
     ("quantization", "fp8 weight upcast (fp8-cast)")),
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>",
     under("aten::add", "fn:get_ada_values", BLOCK), ("element-wise", "AdaLN modulation (tables, scale/shift, gates)")),
    ("void at::native::vectorized_elementwise_kernel<4, MulFunctor<c10::BFloat16>>",
     under("aten::mul", "fn:preattention", "mod:transformer_blocks.*.attn1|Attention", BLOCK),
     ("element-wise", "RoPE")),
    ("void at::native::rms_norm_kernel", under("aten::_fused_rms_norm", "aten::rms_norm", "fn:ada_zero_function"),
     ("element-wise", "RMSNorm / LayerNorm")),
    # sdpa_cudnn_fp8 under compile: its op's kernels are its quantization and cuDNN's fp8 attention
    ("_scale_cast", under(("ltx_tui::sdpa_fp8_rows", [[1, 6144, 32, 128]] * 3), BLOCK),
     ("quantization", "fp8 attention's q/k/v quantization (amax, cast) and output dequantization")),
    ("void at::native::reduce_kernel<512, 1>", under("aten::linalg_vector_norm", ("ltx_tui::sdpa_fp8_rows",
                                                     [[1, 6144, 32, 128]] * 3), BLOCK),
     ("quantization", "fp8 attention's q/k/v quantization (amax, cast) and output dequantization")),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f8_knob_32_64x128x128",
     under(("ltx_tui::sdpa_fp8_rows", [[1, 6144, 32, 128]] * 3), BLOCK),
     ("attention", "video self (6144 q x 6144 kv, 32x128)")),
    # transformer.fast_norm's kernels, compiled as custom ops
    ("_ada_zero", under("ltx_tui::ada_zero_rows", BLOCK),
     ("element-wise", "AdaLN norm / post_sa (kernels.adaln, one pass; the fp8 rows too where folded)")),
    ("_qk", under("ltx_tui::dit_qk", BLOCK),
     ("element-wise", "q/k RMSNorm + RoPE (kernels.dit_qk, one pass; e4m3 before the fp8 attention)")),
    ("Memcpy DtoD (Device -> Device)", under("aten::copy_", BLOCK), ("copies", "Memcpy")),
    ("void some_kernel", None, ("other", "not linked to a CPU op")),
    # a CUDA graph's replay (compile.capture): no op linked, the kernel's name says what it is
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f8_knob_32_64x128x128", None,
     ("attention", "no op linked (a CUDA graph's replay): shape unknown")),
    ("nvjet_sm90_qqtst_128x256_128x6_2x1_v_bz_ovscale_TNT", None,
     ("GEMM", "no op linked (a CUDA graph's replay): shape unknown")),
    ("_few_rows_partial", None, ("GEMM", "no op linked (a CUDA graph's replay): shape unknown")),
    ("_cast3", None, ("quantization", "fp8 attention's q/k/v quantization (amax, cast) and output dequantization")),
    ("_amax3", None, ("quantization", "fp8 attention's q/k/v quantization (amax, cast) and output dequantization")),
    ("_quantize_rows", None, ("quantization", "activation quantization (amax, scale, cast)")),
    ("triton_poi_fused_add_mul_3", None, ("element-wise", "fused by Inductor (adds, gates, modulation, RoPE, ...)")),
])
def test_kernel_categories(bench, kernel, event, expected):
    assert bench.classify(kernel, event, DIMS) == expected


@dataclass
class Span:
    start: float
    end: float


@dataclass
class TraceEvent:
    """What `_units` reads of a torch profiler event."""
    name: str
    device_type: object
    start: float
    end: float
    id: int = 0
    linked_correlation_id: int = 0
    kernels: list = None
    is_user_annotation: bool = False

    @property
    def time_range(self):
        return Span(self.start, self.end)


def test_a_captured_forwards_kernels_stay_in_the_categories(bench):
    """compile.capture replays the block loop from a CUDA graph: its kernels link to no op, and torch
    attributes them to none. They are most of the forward's time and must stay in the table (they were
    dropped for torch's attribution of the eager kernels alone, and the table showed only those)."""
    from collections import namedtuple

    from torch.autograd import DeviceType

    Kernel = namedtuple("Kernel", "name device duration")
    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    op = TraceEvent("aten::mm", cpu, 0, 5, id=7, kernels=[Kernel("nvjet_eager", 0, 3.0)])
    events = [op, TraceEvent("nvjet_eager", cuda, 1, 4, linked_correlation_id=7),
              TraceEvent("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f8", cuda, 10, 110),
              TraceEvent("_qk", cuda, 110, 130)]
    units = bench._units(events, cuda=True)
    assert [(u[0], u[1], u[2]) for u in units] == [("nvjet_eager", 3, op),
                                                   ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f8", 100, None),
                                                   ("_qk", 20, None)]
    # the device's span and torch's kernel duration of one kernel differ in their last digits (the
    # H200 trace of a captured forward lost its graph kernels so: the linked sum came out a hair short)
    rounded = [op, TraceEvent("nvjet_eager", cuda, 1, 3.9996, linked_correlation_id=7), *events[2:]]
    assert [u[0] for u in bench._units(rounded, cuda=True)] == [u[0] for u in units]
    # where the linking fails altogether, torch's attribution stands
    unlinked = [op, TraceEvent("nvjet_eager", cuda, 1, 4)]
    assert bench._units(unlinked, cuda=True) == [("nvjet_eager", 3.0, op)]


def run(*args: str) -> str:
    out = subprocess.run([sys.executable, str(SCRIPT), *TOY, *args], capture_output=True, text=True, timeout=300,
                         env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def row(stdout: str, name: str) -> list[str]:
    lines = [ln for ln in stdout.splitlines() if re.match(rf"\s+32\s+{re.escape(name)}\s", ln)]
    assert lines, stdout
    return lines[0].split()


@pytest.mark.ltx2
@pytest.mark.slow  # 6 s: the real script in subprocesses (CI runs it; the quick suite stays under 4 min)
def test_table_on_the_cpu(ltx2_core):
    """LTX-2 as built, then LTX-2's own fp8-cast in another process on the same weights: its rel L2
    against the first process's reference output is that of fp8 weights, not of other weights."""
    out = run("--variants", "ltx2,ltx2-fp8-cast")
    assert "LTXModel(num_layers=1) (tiny)" in out
    ltx2 = row(out, "LTX-2 as built")
    # ..., vs LTX-2, peak, rel L2, first s, 2nd s, b2b s
    assert ltx2[-6:-4] == ["1.00x", "-"] and float(ltx2[-4]) == 0.0 and float(ltx2[-1]) > 0
    fp8 = row(out, "LTX-2 fp8-cast (its own ops)")
    assert 1e-4 < float(fp8[-4]) < 0.1 and fp8[-2] == "-"  # --warmup 1: no second forward timed
    assert "different weights" not in out
    assert "Fp8CastLinear" in out and "output RMS" in out


@pytest.mark.ltx2
def test_labels_come_off_again(bench, ltx2_core):
    """The --breakdown ranges are taken off after its trace: the model is as it was (the next token
    count's unlabelled trace, and its labelled one, see no ranges left over)."""
    from backends.runtime import ltx2

    model = ltx2.tiny_transformer(layers=1)
    before = {id(m): dict(m.__dict__) for m in model.modules()}
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    restore = bench._label_model(model, compiled=False)
    assert "get_ada_values" in model.transformer_blocks[0].__dict__
    restore()
    assert {id(m): dict(m.__dict__) for m in model.modules()} == before
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == hooks
    assert "prepare" not in vars(model.video_args_preprocessor)


@pytest.mark.ltx2
@pytest.mark.slow  # 5 s, as above
def test_breakdown_on_the_cpu(ltx2_core):
    out = run("--breakdown", "ltx2", "--tokens", "32,40")
    assert "breakdown: LTX-2 as built, 40 video + 6 audio + 8 text tokens, 1 layers" in out
    out = out.split("breakdown: LTX-2 as built, 40 video")[0]
    assert "breakdown: LTX-2 as built, 32 video + 6 audio + 8 text tokens, 1 layers" in out
    for category in ("GEMM", "attention", "element-wise"):
        assert re.search(rf"^{category}\s+\d+\.\d+\s+\d+\.\d%", out, re.M), out
    for detail in ("video self-attn qkv 32x64->64", "video self (32 q x 32 kv, 2x32)", "RMSNorm / LayerNorm", "RoPE",
                   "AdaLN modulation", "gelu (tanh)"):
        assert detail in out, out
    assert "top 15 ops" in out


def test_block_kernels_then_the_largest_idle_gaps(bench, capsys):
    """--block-kernels: one repeating block from the middle of the device timeline, then the idle gaps
    of the whole forward, largest first, with the kernels either side (overlapping kernels leave none)."""
    from types import SimpleNamespace

    def kernel(name, start, end):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))

    seq, t = [kernel("prepare", 0, 10), kernel("copy", 4010, 4020)], 4020  # 4 ms waiting on the host
    for _ in range(12):
        for name, us in (("gemm", 100), ("attn", 300), ("norm", 20)):
            seq.append(kernel(name, t + 1, t + 1 + us))
            t += 1 + us
    seq.append(kernel("overlapping", t - 50, t - 10))
    bench.print_block(seq)
    out = capsys.readouterr().out
    assert "9 kernels, 1.260 ms busy" in out  # a block of 8 kernels or more: three repeats here
    gaps = out.split("idle gaps:")[1]
    assert gaps.startswith(" 4.04 ms in 36 (over 20 us: 4.00 ms in 1)")  # none around the overlapping one
    assert re.search(r"4000\.0 us before kernel 1/39: prepare -> copy", gaps)
