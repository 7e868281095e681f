"""The runtime on a CUDA device (run with -m gpu): triton NA, fp8-scaled-mm, int8-w8a8,
compile, offload cpu; outputs against the unconfigured model, peak memory with offload."""

import json

import pytest
import torch

from backends import load_profile
from backends.runtime.apply import apply_profile
from backends.machine.capability import probe
from backends.runtime.modules import BlockStack, na_stack
from backends.runtime.quant import FP8ScaledMMLinear, Int8Linear
from kernels.int8_gemm import int8_linear, int8_linear_torch, quantize_rows

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def cap():
    return probe()


def profile(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text("schema_version = 1\n" + text)
    return load_profile(path)


def na_model(dtype=torch.float32):
    torch.manual_seed(0)
    model = na_stack(2, 128, (3, 5, 5), head_dim=64, backend="reference").to("cuda", dtype)
    return model, torch.randn(1, 5, 9, 11, 128, device="cuda", dtype=dtype)


def test_triton_na_from_profile(tmp_path, cap):
    model, x = na_model()
    with torch.no_grad():
        ref = model(x)
        report = apply_profile(model, profile(tmp_path, '[diffvae]\nna_backend = "triton"\n'), cap)
        assert "NAFunction('triton')" in report.change("diffvae.na_backend").detail
        torch.testing.assert_close(model(x), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method, cls, bound", [("fp8-scaled-mm", FP8ScaledMMLinear, 0.08),
                                                ("int8-w8a8", Int8Linear, 0.05)])
def test_quantized_model_from_profile(tmp_path, cap, method, cls, bound):
    model, x = na_model(torch.bfloat16)
    with torch.no_grad():
        ref = model(x).float()
        report = apply_profile(model, profile(tmp_path, f'[transformer]\nquantization = "{method}"\n'
                                                        'quantization_scope = "all-linears"\n'
                                                        '[diffvae]\nna_backend = "triton"\n'), cap)
        names = report.change("transformer.quantization").modules
        assert len(names) == 8 and all(isinstance(model.get_submodule(n), cls) for n in names)
        out = model(x).float()
    assert ((out - ref).abs().max() / ref.abs().max()).item() < bound


@pytest.mark.parametrize("m, k, n", [(256, 512, 384), (100, 4096, 1000), (8192, 4096, 4096)])
def test_int8_gemm_matches_exact_integer_math(m, k, n):
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = quantize_rows(x, torch.int8)
    cq, cs = quantize_rows(x.cpu(), torch.int8)
    assert (xq.cpu().int() - cq.int()).abs().max() <= 1 and torch.allclose(xs.cpu(), cs)
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda")
    ws = torch.rand(n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda")
    got = int8_linear(xq, xs, w, ws, bias).float()
    want = int8_linear_torch(xq.cpu(), xs.cpu(), w.cpu(), ws.cpu(), bias.cpu(), torch.float64).cuda()
    assert ((got - want).abs() / want.abs().clamp(min=1)).max().item() < 8e-3  # bf16 output rounding


def test_fp8_scaled_mm_per_tensor_and_rowwise():
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 2048, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4, 256, 1024, device="cuda", dtype=torch.bfloat16)
    ref = lin(x).float()
    for scales in ("row", "tensor"):
        out = FP8ScaledMMLinear(lin, scales=scales)(x).float()
        assert ((out - ref).abs().max() / ref.abs().max()).item() < 0.08


def test_compile_from_profile(tmp_path, cap):
    model, x = na_model()
    with torch.no_grad():
        ref = model(x)
        apply_profile(model, profile(tmp_path, '[compile]\nenabled = true\n[diffvae]\nna_backend = "eager_sdpa"\n'),
                      cap)
        torch.testing.assert_close(model(x), ref, atol=1e-4, rtol=1e-4)


def mlp_stack(depth, dim, hidden):
    torch.manual_seed(0)
    return BlockStack([torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(),
                                           torch.nn.Linear(hidden, dim)) for _ in range(depth)]).to(torch.bfloat16)


def test_offload_cpu_matches_resident_with_bounded_memory(tmp_path, cap):
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    resident = mlp_stack(8, 2048, 8192).cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        ref = resident(x)
    resident_peak = torch.cuda.max_memory_allocated()
    del resident
    torch.cuda.empty_cache()

    model = mlp_stack(8, 2048, 8192)  # built on the CPU: weights never all on the GPU
    torch.cuda.reset_peak_memory_stats()
    report = apply_profile(model, profile(tmp_path, '[offload]\nmode = "cpu"\ngpu_slots = 2\nprefetch = 2\n'),
                           cap, device="cuda")
    with torch.no_grad():
        out1 = model(x)
        out2 = model(x)
    offload_peak = torch.cuda.max_memory_allocated()
    assert torch.equal(out1, ref) and torch.equal(out2, ref)
    assert report.streamer.gpu_slots == 2 and report.streamer.prefetch == 1
    weights = 8 * 2 * 2048 * 8192 * 2
    assert resident_peak > weights
    assert offload_peak < resident_peak * 0.45, (offload_peak, resident_peak)
    print(json.dumps({"resident_peak_mib": resident_peak / 2**20, "offload_peak_mib": offload_peak / 2**20}))


def test_offload_with_compile_and_odd_block_count(tmp_path, cap):
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    model = mlp_stack(5, 512, 1024)
    ref_model = mlp_stack(5, 512, 1024).cuda()
    with torch.no_grad():
        ref = ref_model(x)
        apply_profile(model, profile(tmp_path, '[offload]\nmode = "cpu"\ngpu_slots = 3\nprefetch = 2\n'
                                               '[compile]\nenabled = true\n'), cap, device="cuda")
        for _ in range(3):
            torch.testing.assert_close(model(x), ref, atol=2e-2, rtol=2e-2)


def test_offload_disk(tmp_path, cap):
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    model = mlp_stack(3, 256, 512)
    with torch.no_grad():
        ref = mlp_stack(3, 256, 512).cuda()(x)
        apply_profile(model, profile(tmp_path, '[offload]\nmode = "disk"\n'), cap, device="cuda")
        assert torch.equal(model(x), ref)


@pytest.mark.parametrize("toml, expected", [
    ('[diffvae]\nna_backend = "triton"\n[transformer]\nquantization = "int8-w8a8"\n[compile]\nenabled = true\n',
     ["diffvae chunked_eager", "na3d triton", "attention", "linear int8-w8a8", "compiled blocks (default)"]),
    ('[diffvae]\nmode = "combined_compile"\n[transformer]\nquantization = "fp8-scaled-mm"\n'
     '[offload]\nmode = "cpu"\n', ["diffvae combined_compile", "na3d triton", "attention", "linear fp8-scaled-mm",
                                    "offload cpu round trip"]),
    ('[transformer]\nquantization = "fp8-cast"\n[compile]\nenabled = true\nmode = "reduce-overhead"\n',
     ["diffvae chunked_eager", "na3d triton", "attention", "linear fp8-cast", "compiled blocks (reduce-overhead)"]),
    ('[transformer]\nquantization = "fp8-scaled-mm"\nfast_norm = true\n[compile]\ncapture = true\n',
     ["diffvae chunked_eager", "na3d triton", "attention", "one-pass norms (fast_norm)", "linear fp8-scaled-mm",
      "captured block loop (eager blocks)"]),
])
def test_check_smoke_on_gpu(tmp_path, capsys, toml, expected):
    from ltx_tui.cli import main

    path = tmp_path / "p.toml"
    path.write_text(toml)
    code = main(["--check", "--json", "--smoke", "--profile", str(path), "--timeout", "400"])
    doc = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in doc["smoke"]]
    assert [n.split(" ")[0] if n.startswith("attention") else n for n in names] == expected
    assert all(r["status"] == "pass" for r in doc["smoke"]), doc["smoke"]
    assert code == 0


@pytest.mark.parametrize("attention", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "automatic"])
def test_dense_attention_backends_on_cuda(tmp_path, cap, attention):
    from backends.runtime.modules import DenseAttention

    torch.manual_seed(0)
    model = torch.nn.Sequential(DenseAttention(256), DenseAttention(256)).to("cuda", torch.bfloat16)
    x = torch.randn(2, 300, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x).float()
        report = apply_profile(model, profile(tmp_path, f'[transformer]\nattention = "{attention}"\n'), cap)
        assert report.change("transformer.attention").action == "installed"
        out = model(x).float()
    assert (out - ref).abs().max().item() < 2e-2
