"""One descriptor per value of every choice option: what it needs, who runs it, what it costs.

Pure data. The rules (`backends.config.rules`), the plan's steps, the memory plan, `--ltx-args`,
the launcher's flag policy, the smoke checks and the tune read these descriptors; a value
added to an option enum without one fails `tests/test_values.py`.

`runner` says who realises a value:
- RUNTIME: ltx-tui's runtime (`apply_profile`) on a built model, as the plan's `step`;
- LOADER: only LTX-2's own loader while it builds the model (its `--quantization` policies
  for NVFP4: `ltx_core.quantization.nvfp4`, applied to the meta model before weights load);
  `ltx-tui run` passes the flag, `apply_profile` on a built model refuses it before any change;
- NOBODY: neither ltx-tui's runtime nor an ltx-pipelines v1.2.0 flag runs it (the plan says so
  as an error, never `ok`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

RUNTIME, LOADER, NOBODY = "ltx-tui runtime", "LTX-2 loader", "nobody"


@dataclass(frozen=True)
class Bound:
    """Largest relative error of a value's output against the reference, by compute dtype."""

    half: float  # bf16 / fp16
    fp32: float

    def at(self, fp32: bool) -> float:
        return self.fp32 if fp32 else self.half


# Bounds shared by the smoke checks and the tune, one per kind of change.
KERNEL = Bound(2e-2, 1e-3)  # another attention kernel: same math, other summation order
COMPILED = Bound(3e-2, 1e-3)  # a compiled graph: fused element-wise ops
DECODE = Bound(5e-2, 1e-3)  # a whole decoder laid out differently (many layers of the above)
QUANTIZED = Bound(0.1, 0.1)  # weights (and activations) rounded to 8 bits
EXACT = Bound(0.0, 0.0)  # the same computation (streamed weights, the model as it was)


@dataclass(frozen=True)
class Value:
    """What one option value means across ltx-tui.

    text: what it does, in words (the plan's reason when it runs); needs: the rule ids that must
    hold; runner/step: who realises it and the plan's step kind; flag: the ltx-pipelines v1.2.0
    flag (None: LTX-2 has none); bound: its accuracy bound; tuned: `--tune` times it; then the
    memory effects: weight_bytes (quantization: bytes per block-linear weight), decode_coef
    (diffvae.mode: LTX-2's decode working-set coefficient), compiled (its first call compiles:
    diffvae.mode's decoder, compile.enabled's DiT blocks), cuda_graphs / without_graphs (compile.mode: keeps a CUDA-graph pool; the same mode
    without graphs); large_win: without a first call that compiles, one of a run's large wins, which
    `--tune` times right after the priors, as it does the compiled values (the DiT's GEMMs in a lower
    precision).
    """

    text: str
    needs: tuple[str, ...] = ()
    runner: str = RUNTIME
    step: str | None = None
    flag: str | None = None
    bound: Bound | None = None
    tuned: bool = False
    weight_bytes: float | None = None
    decode_coef: float | None = None
    compiled: bool = False
    cuda_graphs: bool = False
    without_graphs: str | None = None
    large_win: bool = False


_NA = "na_backend"
_LAYOUT = "diffvae_layout"
_NVFP4_LOADER = ("LTX-2's loader quantizes the DiT to NVFP4 while it builds it (ltx_core.quantization.nvfp4, "
                 "ltx-kernels' nvfp4 ops); ltx-tui's runtime cannot quantize a built model with it")

VALUES: dict[str, dict[str, Value]] = {
    "diffvae.mode": {
        "auto": Value("the layout whose decodes over the run's length measured fastest here, else chunked_eager",
                      step=_LAYOUT, bound=DECODE),
        # decode coefficients fitted to the H200 (bench/RESULTS.md, "DiffVAE decode memory")
        "chunked_eager": Value("chunked decode, eager", step=_LAYOUT, flag="--diffvae-optimization chunked_eager",
                               bound=DECODE, tuned=True, decode_coef=5.04),
        "chunked_compile": Value("chunked decode, compiled with the NA inside the graph", step=_LAYOUT,
                                 flag="--diffvae-optimization chunked_compile", bound=DECODE, tuned=True,
                                 decode_coef=5.04, compiled=True),
        "combined_compile": Value("combined decode, compiled with the NA inside the graph", step=_LAYOUT,
                                  flag="--diffvae-optimization combined_compile", bound=DECODE, tuned=True,
                                  decode_coef=9.28, compiled=True),
        "blackwell_dsl": Value("Blackwell DSL decoder kernels (LTX-2's own apply_diffvae_config)",
                               needs=("diffvae.blackwell-dsl",), step=_LAYOUT,
                               flag="--diffvae-optimization blackwell_dsl", bound=DECODE, decode_coef=2.5,
                               compiled=True),
    },
    "diffvae.na_backend": {
        "auto": Value("the fastest NA backend that runs here", step=_NA, bound=KERNEL),
        "natten": Value("NATTEN's fused NA (the kernel diffvae.natten_kernel picks for the GPU)", needs=("natten.usable",), step=_NA, bound=KERNEL,
                        tuned=True),
        "triton": Value("ltx-tui's fused Triton NA kernel", needs=("triton.na",), step=_NA, bound=KERNEL, tuned=True),
        "eager_sdpa": Value("tiled eager SDPA, runs on any device", step=_NA, bound=KERNEL, tuned=True),
        "blackwell_dsl": Value("Blackwell DSL kernels from ltx_kernels.vae (with diffvae.mode blackwell_dsl)",
                               needs=("diffvae.blackwell-dsl",), step=_LAYOUT),
    },
    "diffvae.natten_kernel": {
        k: Value(f"NATTEN's {k}" if k != "auto" else "NATTEN's fastest kernel that runs here",
                 needs=("natten.usable",), step=_NA, tuned=k != "auto")  # bound: the NA backend's
        for k in ("auto", "cutlass-fna", "hopper-fna", "blackwell-fna", "flex-fna")
    },
    "transformer.attention": {
        "automatic": Value("the best attention kernel available here", step="dense_attention", bound=KERNEL),
        "pytorch": Value("plain PyTorch attention runs anywhere", step="dense_attention", bound=KERNEL, tuned=True),
        "flash_attention_3": Value("FlashAttention 3 available", needs=("attention.fa3",), step="dense_attention",
                                   bound=KERNEL, tuned=True),
        "flash_attention_4": Value("FlashAttention 4 available", needs=("attention.fa4",), step="dense_attention",
                                   bound=KERNEL, tuned=True),
        "sdpa_cudnn": Value("SDPA's cuDNN backend available", needs=("attention.sdpa_cudnn",),
                            step="dense_attention", bound=KERNEL, tuned=True),
        "sdpa_cudnn_fp8": Value("cuDNN's fp8 attention (q, k, v, softmax and output in e4m3 with per-tensor "
                                "scales) on the DiT's unmasked attentions of at least 2048 tokens a side (its video self-attention); "
                                "the rest on SDPA's cuDNN backend", needs=("attention.cudnn_fp8",),
                                step="dense_attention", bound=QUANTIZED, tuned=True),
        "sdpa_flash": Value("SDPA's flash backend available", needs=("attention.sdpa_flash",),
                            step="dense_attention", bound=KERNEL, tuned=True),
        "sdpa_efficient": Value("SDPA's memory-efficient backend available", needs=("attention.sdpa_efficient",),
                                step="dense_attention", bound=KERNEL, tuned=True),
        "sdpa_math": Value("SDPA math backend runs anywhere", step="dense_attention", bound=KERNEL, tuned=True),
        "mps_sdpa": Value("SDPA on Apple's MPS", needs=("attention.mps",), step="dense_attention", bound=KERNEL,
                          tuned=True),
    },
    "transformer.quantization": {
        "none": Value("weights kept in their dtype", bound=EXACT, tuned=True, weight_bytes=2),
        "fp8-cast": Value("float8_e4m3fn weights upcast in forward (any device)", step="quantize",
                          flag="--quantization fp8-cast", bound=QUANTIZED, tuned=True, weight_bytes=1),
        "fp8-scaled-mm": Value("torch._scaled_mm FP8 GEMMs with row-wise activation scales",
                               needs=("quant.fp8-scaled-mm",), step="quantize", flag="--quantization fp8-scaled-mm",
                               bound=QUANTIZED, tuned=True, weight_bytes=1, large_win=True),
        "nvfp4-cast": Value(_NVFP4_LOADER + " (--quantization nvfp4-cast: BF16 weights cast while loading)",
                            needs=("quant.nvfp4",), runner=LOADER, step="quantize", flag="--quantization nvfp4-cast",
                            bound=QUANTIZED, weight_bytes=0.5),
        "nvfp4-prequant": Value(_NVFP4_LOADER + " (--quantization nvfp4-prequant: an NVFP4 checkpoint)",
                                needs=("quant.nvfp4",), runner=LOADER, step="quantize",
                                flag="--quantization nvfp4-prequant", bound=QUANTIZED, weight_bytes=0.5),
        "fp8-blockwise": Value("ltx-core v1.2.0 has a blockwise FP8 policy builder, but ltx-pipelines v1.2.0 has no "
                               "flag for it and ltx-tui's runtime does not implement it",
                               needs=("quant.runs", "quant.fp8-blockwise"),
                               runner=NOBODY, bound=QUANTIZED, weight_bytes=1),
        "int8-w8a8": Value("ltx-tui's Triton int8 GEMM with dynamic per-row activation scales",
                           needs=("quant.int8-w8a8",), step="quantize", bound=QUANTIZED, tuned=True, weight_bytes=1,
                           large_win=True),
    },
    "transformer.quantization_scope": {
        "ltx2-blocks": Value("LTX-2's block linears (to_q/k/v, to_out.0, ff.net.0.proj, ff.net.2), as LTX-2's "
                             "fp8-cast", step="quantize"),
        "all-linears": Value("every nn.Linear", step="quantize"),
    },
    "transformer.sparse_attention": {
        "none": Value("dense attention"),
        "sla": Value("TurboDiffusion's sparse-linear attention", needs=("sparse.runs", "sparse.sla"), runner=NOBODY),
        "sagesla": Value("TurboDiffusion's SageAttention sparse-linear attention", needs=("sparse.runs", "sparse.sagesla"),
                         runner=NOBODY),
    },
    "compile.enabled": {
        "auto": Value("compiled when that measured faster here over the run's length (compile time counted), else "
                      "eager", step="compile", bound=COMPILED),
        "true": Value("torch.compile per transformer block", step="compile", flag="--compile", bound=COMPILED,
                      tuned=True, compiled=True),
        # bound: the tune's eager blocks run the profile's attention kernel, against the blocks as built
        "false": Value("eager transformer blocks", bound=KERNEL, tuned=True),
    },
    "compile.mode": {
        "default": Value("default (no CUDA graphs)", step="compile", flag="--compile mode=default", bound=COMPILED,
                         tuned=True),
        "reduce-overhead": Value("reduce-overhead (CUDA graphs)", needs=("compile.cuda-graphs-cuda",), step="compile",
                                 flag="--compile mode=reduce-overhead", bound=COMPILED, tuned=True, cuda_graphs=True,
                                 without_graphs="default"),
        "max-autotune": Value("max-autotune (CUDA graphs)", needs=("compile.cuda-graphs-cuda",), step="compile",
                              flag="--compile mode=max-autotune", bound=COMPILED, tuned=True, cuda_graphs=True,
                              without_graphs="max-autotune-no-cudagraphs"),
        "max-autotune-no-cudagraphs": Value("max-autotune-no-cudagraphs (no CUDA graphs)", step="compile",
                                            flag="--compile mode=max-autotune-no-cudagraphs", bound=COMPILED,
                                            tuned=True),
    },
    "compile.backend": {
        "inductor": Value("inductor", needs=("compile.inductor-triton",), step="compile", flag="--compile backend=inductor"),
        "cudagraphs": Value("cudagraphs backend", needs=("cuda.device",), step="compile",
                            flag="--compile backend=cudagraphs"),
        "aot_eager": Value("aot_eager (no code generation)", step="compile", flag="--compile backend=aot_eager"),
        "eager": Value("eager (no code generation)", step="compile", flag="--compile backend=eager"),
    },
    "compile.dynamic": {
        "auto": Value("torch decides", step="compile", flag="--compile dynamic=auto"),
        "true": Value("dynamic shapes", step="compile", flag="--compile dynamic=true"),
        "false": Value("static shapes", step="compile", flag="--compile dynamic=false"),
    },
    "offload.mode": {
        "none": Value("no offload: weights stay resident"),
        "cpu": Value("weights streamed from pinned CPU memory", needs=("cuda.device",), step="offload",
                     flag="--offload cpu", bound=EXACT),
        "disk": Value("weights streamed from disk", needs=("cuda.device",), step="offload", flag="--offload disk",
                      bound=EXACT),
    },
}


def value(option: str, v: object) -> Value:
    """The descriptor of `option` = `v` (an enum member, its string or a bool; `natten:KERNEL` is natten)."""
    text = v.value if isinstance(v, enum.Enum) else str(v).lower() if isinstance(v, bool) else str(v)
    return VALUES[option][text.split(":")[0] if option == "diffvae.na_backend" else text]


def step_bound(options: tuple[str, ...], effective: dict[str, object]) -> Bound:
    """The accuracy bound of a plan step that realises `options` with these effective values: that
    of its first option whose value has one."""
    for option in options:
        if option in VALUES and effective.get(option) is not None:
            about = value(option, effective[option])
            if about.bound is not None:
                return about.bound
    return EXACT
