"""Built-in capabilities for authoring profiles for another machine.

Each preset is a typical LTX-2 box: its GPU and the packages such a box usually has
(stated in `packages`). Pure data plus one builder.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.capability import GPU, Availability, Capability, NvmlInfo, Package, TorchInfo

GIB = 1024**3


@dataclass(frozen=True)
class PresetSpec:
    gpu: str | None
    cc: tuple[int, int] | None
    memory_gib: int
    packages: tuple[str, ...]
    ltx_kernels_parts: tuple[str, ...] = ()
    has_libnatten: bool = True


_GPU_COMMON = ("natten", "triton")

PRESETS: dict[str, PresetSpec] = {
    "a100": PresetSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80, _GPU_COMMON),
    "h100": PresetSpec("NVIDIA H100 80GB HBM3", (9, 0), 80,
                       _GPU_COMMON + ("flash_attn_3", "ltx_kernels"), ("all2all", "fp8_blockwise")),
    "h200": PresetSpec("NVIDIA H200", (9, 0), 141,
                       _GPU_COMMON + ("flash_attn_3", "ltx_kernels"), ("all2all", "fp8_blockwise")),
    "l40s": PresetSpec("NVIDIA L40S", (8, 9), 48, _GPU_COMMON),
    "rtx4090": PresetSpec("NVIDIA GeForce RTX 4090", (8, 9), 24, _GPU_COMMON),
    "rtx5090": PresetSpec("NVIDIA GeForce RTX 5090", (12, 0), 32,
                          _GPU_COMMON + ("ltx_kernels",), ("nvfp4", "fp8_blockwise")),
    "b200": PresetSpec("NVIDIA B200", (10, 0), 180,
                       _GPU_COMMON + ("flash_attn_4", "ltx_kernels", "cutlass_dsl"),
                       ("nvfp4", "vae", "all2all", "fp8_blockwise")),
    "cpu": PresetSpec(None, None, 0, ("natten", "triton"), has_libnatten=False),
}


def build_preset(preset_id: str, count: int = 1) -> Capability:
    """The Capability of preset `preset_id` with `count` identical GPUs."""
    from backends.capability import PACKAGE_MODULES

    spec = PRESETS[preset_id]
    gpu = spec.gpu is not None
    gpus = tuple(GPU(index=i, name=spec.gpu, compute_capability=spec.cc, memory_total=spec.memory_gib * GIB)
                 for i in range(count)) if gpu else ()
    packages = {}
    for name, module, _ in PACKAGE_MODULES:
        if name not in spec.packages:
            packages[name] = Package(name, module, False, reason="not installed (preset)")
            continue
        details: dict = {}
        if name == "natten":
            details["has_libnatten"] = spec.has_libnatten
        if name == "ltx_kernels":
            details = {p: p in spec.ltx_kernels_parts for p in ("nvfp4", "vae", "all2all", "fp8_blockwise")}
        packages[name] = Package(name, module, True, "preset", details=details)
    sdpa_ok = gpu and spec.cc >= (8, 0)
    sdpa = {"math": Availability(True)} | {
        n: Availability(sdpa_ok, None if sdpa_ok else ("no CUDA device" if not gpu else "needs SM >= 8.0"))
        for n in ("cudnn", "flash", "efficient")
    }
    no_gpu = None if gpu else "no NVIDIA GPU (preset)"
    return Capability(
        source=f"preset:{preset_id}" + (f"x{count}" if count > 1 else ""),
        platform="linux",
        nvml=NvmlInfo(gpu, no_gpu, device_count=len(gpus)),
        torch=TorchInfo(True, version="preset", cuda="preset" if gpu else None, cuda_available=gpu,
                        cuda_reason=no_gpu, device_count=len(gpus), nccl=gpu),
        gpus=gpus,
        packages=packages,
        sdpa=sdpa,
    )
