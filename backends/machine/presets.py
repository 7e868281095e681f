"""Built-in capabilities for authoring profiles for another machine, and `load_capability`.

Each preset is a typical LTX-2 box: its GPU and the packages such a box usually has
(stated in `packages`). Pure data plus one builder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from backends.machine.capability import (
    GPU,
    MAX_GPUS,
    PACKAGE_MODULES,
    Availability,
    Capability,
    CapabilityError,
    NvmlInfo,
    Package,
    PeerAccess,
    TorchInfo,
    from_dict,
)
from backends.machine.text import printable
from backends.machine.textfile import FileProblem, read_bounded, too_deep

MAX_FILE_BYTES = 16 * 1024 * 1024  # a --check --json output is tens of KiB
MAX_NESTING = 32  # a --check --json output nests about 6 levels

GIB = 1024**3


@dataclass(frozen=True)
class PresetSpec:
    """`peer_access`: whether two GPUs of such a box reach each other's memory (NVLink on the SXM
    boards); None where it depends on the box (PCIe topology, the driver), so a preset does not say.
    With `all2all` among `ltx_kernels_parts`, ltx-kernels' all2all is built for the preset's SM."""

    gpu: str | None
    cc: tuple[int, int] | None
    memory_gib: int
    packages: tuple[str, ...]
    ltx_kernels_parts: tuple[str, ...] = ()
    has_libnatten: bool = True
    peer_access: bool | None = None


_GPU_COMMON = ("natten", "triton")

PRESETS: dict[str, PresetSpec] = {
    "a100": PresetSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80, _GPU_COMMON, peer_access=True),
    "h100": PresetSpec("NVIDIA H100 80GB HBM3", (9, 0), 80,
                       _GPU_COMMON + ("flash_attn_3", "ltx_kernels"), ("all2all", "blockwise"), peer_access=True),
    "h200": PresetSpec("NVIDIA H200", (9, 0), 141,
                       _GPU_COMMON + ("flash_attn_3", "ltx_kernels"), ("all2all", "blockwise"), peer_access=True),
    "l40s": PresetSpec("NVIDIA L40S", (8, 9), 48, _GPU_COMMON),
    "rtx4090": PresetSpec("NVIDIA GeForce RTX 4090", (8, 9), 24, _GPU_COMMON),
    "rtx5090": PresetSpec("NVIDIA GeForce RTX 5090", (12, 0), 32,
                          _GPU_COMMON + ("ltx_kernels",), ("nvfp4", "blockwise")),
    "b200": PresetSpec("NVIDIA B200", (10, 0), 180,
                       _GPU_COMMON + ("flash_attn_4", "ltx_kernels", "cutlass_dsl"),
                       ("nvfp4", "vae", "all2all", "blockwise"), peer_access=True),
    "cpu": PresetSpec(None, None, 0, ("natten", "triton"), has_libnatten=False),
}
# The multi-GPU boxes LTX-2's sequence parallelism runs on (2, 4 or 8 GPUs: see the rules'
# parallel.heads and parallel.max-peers); any preset takes xN, these are the ones listed.
MULTI_GPU_BOXES = tuple(f"{gpu}x{n}" for gpu in ("h100", "h200", "b200") for n in (2, 4, 8))


def build_preset(preset_id: str, count: int = 1) -> Capability:
    """The Capability of preset `preset_id` with `count` identical GPUs."""
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
            details = {p: p in spec.ltx_kernels_parts for p in ("nvfp4", "vae", "all2all", "blockwise")}
            built = "all2all" in spec.ltx_kernels_parts
            sm = f"{spec.cc[0]}{spec.cc[1]}" if spec.cc else None
            details |= {"all2all_path": None,
                        "all2all_archs": [f"sm_{sm}"] if built and sm else None,
                        "all2all_note": f"preset: built for SM {spec.cc[0]}.{spec.cc[1]}" if built and sm
                        else "preset: not built"}
        packages[name] = Package(name, module, True, "preset", details=details)
    sdpa_ok = gpu and spec.cc >= (8, 0)
    sdpa = {"math": Availability(True)} | {
        n: Availability(sdpa_ok, None if sdpa_ok else ("no CUDA device" if not gpu else "needs SM >= 8.0"))
        for n in ("cudnn", "flash", "efficient")
    }
    no_gpu = None if gpu else "no NVIDIA GPU (preset)"
    if not gpus:
        peer = PeerAccess(reason=no_gpu)
    elif spec.peer_access is None:
        peer = PeerAccess(tuple(tuple(True if i == j else None for j in range(count)) for i in range(count)),
                          None, f"preset: peer access between {spec.gpu}s depends on the box (PCIe topology, driver)")
    else:
        peer = PeerAccess(tuple(tuple(i == j or spec.peer_access for j in range(count)) for i in range(count)),
                          "preset", None)
    return Capability(
        source=f"preset:{preset_id}" + (f"x{count}" if count > 1 else ""),
        platform="linux",
        nvml=NvmlInfo(gpu, no_gpu, device_count=len(gpus)),
        torch=TorchInfo(True, version="preset", cuda="preset" if gpu else None, cuda_available=gpu,
                        cuda_reason=no_gpu, device_count=len(gpus), nccl=gpu),
        gpus=gpus,
        packages=packages,
        sdpa=sdpa,
        peer_access=peer,
    )


def preset(preset_id: str) -> Capability:
    """A built-in capability: `h100`, or `h100x8` for eight of them."""
    key = preset_id.lower()
    base, count = key, 1
    if key not in PRESETS and (m := re.fullmatch(r"(.+)x(\d+)", key)):
        base, count = m.group(1), int(m.group(2))
    if base in PRESETS and count < 1:
        raise CapabilityError(f"{preset_id!r}: {count} GPUs; xN takes 1 to {MAX_GPUS} (e.g. {base}x2), "
                              f"or leave it out for one")
    if base not in PRESETS:
        raise CapabilityError(
            f"unknown capability {preset_id!r}; expected one of {', '.join(PRESETS)} "
            "(optionally with xN for N GPUs, e.g. h100x8) or the path of a capability JSON file"
        )
    if count > MAX_GPUS:
        raise CapabilityError(f"{preset_id!r}: {count} GPUs; a capability describes at most {MAX_GPUS}")
    return build_preset(base, count)


def load_capability(spec: str, warnings: list[str] | None = None) -> Capability:
    """A preset id, or the path of a JSON file holding a capability (or a `--check --json` output).

    Unknown fields in a file are ignored with a message appended to `warnings`."""
    path = Path(spec)
    if not (path.suffix or os.sep in spec or path.exists()):
        return preset(spec)
    fix = "save one with `ltx-tui --check --json > cap.json` on the target machine, or use a preset id"

    def refused(problem: str, line: int | None = None) -> CapabilityError:
        return CapabilityError(f"{spec}{'' if line is None else f':{line}'}: {problem}; {fix}",
                               file=spec, problem=problem, fix=fix)

    try:
        text = read_bounded(path, MAX_FILE_BYTES).decode("utf-8")
    except FileProblem as e:
        raise refused(str(e)) from None
    except UnicodeDecodeError as e:
        raise refused(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    nested = refused(f"arrays or objects nested more than {MAX_NESTING} levels deep; not a capability file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise refused(f"not valid JSON ({e.msg})", e.lineno) from None
    except RecursionError:  # json recurses once per nested array or object
        raise nested from None
    if too_deep(data, MAX_NESTING):
        raise nested
    if not isinstance(data, Mapping):
        raise refused(f"expected a JSON object, found {type(data).__name__}")
    source = f"file:{spec}"
    try:
        return from_dict(data, source, warnings)
    except CapabilityError as e:  # "file:cap.json: $.platform: missing": the file named once, the fix said
        raise refused(str(e).removeprefix(f"{printable(source)}: ")) from None
