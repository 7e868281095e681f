"""What this machine can run: a JSON-serialisable snapshot of GPUs, torch and packages.

`probe()` reads the live machine (NVML for the GPUs, torch for CUDA, imports for the
packages); `from_dict` reads the capability block of a `--check --json` output. Presets
and `load_capability` live in `backends.probe.presets`.
A missing driver, NVML, CUDA or package gives a value that says why, never an exception.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from backends.probe import nvml as nvml_mod


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str | None = None


@dataclass(frozen=True)
class GPU:
    """One GPU, indexed by its CUDA ordinal (after CUDA_VISIBLE_DEVICES)."""

    index: int
    name: str
    compute_capability: tuple[int, int] | None
    memory_total: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_used: int | None = None
    utilization: int | None = None
    temperature: int | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    sm_clock: int | None = None
    mem_clock: int | None = None
    nvml_index: int | None = None
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def sm(self) -> str:
        cc = self.compute_capability
        return "SM ?" if cc is None else f"SM {cc[0]}.{cc[1]}"


@dataclass(frozen=True)
class NvmlInfo:
    available: bool
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    device_count: int | None = None
    ordinal_match: str | None = None


@dataclass(frozen=True)
class TorchInfo:
    available: bool
    reason: str | None = None
    version: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    cuda_available: bool = False
    cuda_reason: str | None = None
    device_count: int = 0
    nccl: bool = False


@dataclass(frozen=True)
class Package:
    name: str
    module: str
    available: bool
    version: str | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capability:
    source: str
    platform: str
    nvml: NvmlInfo
    torch: TorchInfo
    gpus: tuple[GPU, ...]
    packages: Mapping[str, Package]
    sdpa: Mapping[str, Availability]

    @property
    def cuda(self) -> bool:
        """torch can run CUDA work on at least one visible GPU."""
        return self.torch.cuda_available and bool(self.gpus)

    def package(self, name: str) -> Package:
        return self.packages.get(name) or Package(name, name, False, reason="not probed")

    def for_device(self, device: Any) -> Capability:
        """This capability as seen by tensors on `device`: only that GPU, or none for the CPU."""
        dev = str(device)
        if not dev.startswith("cuda"):
            return dataclasses.replace(self, gpus=(), torch=dataclasses.replace(
                self.torch, cuda_available=False, cuda_reason=f"the model/tensors are on {dev}"))
        index = int(dev.split(":")[1]) if ":" in dev else 0
        return dataclasses.replace(self, gpus=tuple(g for g in self.gpus if g.index == index))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Hash of what decides validation: GPUs' models, driver, torch and packages."""
        static = {
            "platform": self.platform,
            "gpus": [(g.name, g.compute_capability, g.memory_total) for g in self.gpus],
            "driver": self.nvml.driver_version,
            "torch": (self.torch.version, self.torch.cuda, self.torch.cuda_available),
            "packages": {n: (p.available, p.version, dict(p.details)) for n, p in sorted(self.packages.items())},
            "sdpa": {n: a.available for n, a in sorted(self.sdpa.items())},
        }
        blob = json.dumps(static, sort_keys=True, default=str).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


class CapabilityError(Exception):
    """A capability id or file that cannot be used; the message says what and how to fix."""


# ---------------------------------------------------------------------------------------
# Packages: (capability name, module to import, distribution name for the version)
PACKAGE_MODULES: tuple[tuple[str, str, str], ...] = (
    ("natten", "natten", "natten"),
    ("triton", "triton", "triton"),
    ("flash_attn_3", "flash_attn_interface", "flash-attn-3"),
    ("flash_attn_4", "flash_attn.cute", "flash-attn"),
    ("ltx_kernels", "ltx_kernels", "ltx-kernels"),
    ("cutlass_dsl", "cutlass.cute", "nvidia-cutlass-dsl"),
    ("turbo_diffusion_ops", "turbo_diffusion_ops", "turbodiffusion"),
    ("spas_sage_attn", "spas_sage_attn", "spas-sage-attn"),
)
# ltx_kernels' optional builds, probed as submodules.
LTX_KERNELS_PARTS = ("nvfp4", "vae", "all2all", "fp8_blockwise")


def _dist_version(dist: str, module: Any = None) -> str | None:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def import_optional(module: str) -> tuple[Any, str | None]:
    """Import a module; (module, None) or (None, why not)."""
    if not _find(module):
        return None, "not installed"
    try:
        return importlib.import_module(module), None
    except ImportError as e:
        return None, f"import failed: {e}"
    except OSError as e:
        return None, f"import failed loading a shared library: {e}"
    except Exception as e:  # a broken package must not break the probe
        return None, f"import raised {type(e).__name__}: {e}"


def probe_package(name: str, module: str, dist: str, *, cuda: bool) -> Package:
    if name == "triton" and not cuda:
        # Triton's kernels need a CUDA device; importing it only to say so costs start-up.
        if not _find(module):
            return Package(name, module, False, reason="not installed")
        version = _dist_version(dist)
        return Package(name, module, True, version, details={"imported": False})
    mod, why = import_optional(module)
    if mod is None:
        return Package(name, module, False, reason=why)
    details: dict[str, Any] = {}
    if name == "natten":
        details["has_libnatten"] = bool(getattr(mod, "HAS_LIBNATTEN", False))
    if name == "ltx_kernels":
        for part in LTX_KERNELS_PARTS:
            details[part] = _find(f"{module}.{part}")
    return Package(name, module, True, _dist_version(dist, mod), details=details)


# ---------------------------------------------------------------------------------------
# torch

def _probe_torch(nvml_gpu_count: int | None) -> tuple[TorchInfo, list[dict[str, Any]]]:
    mod, why = import_optional("torch")
    if mod is None:
        return TorchInfo(False, reason=why), []
    torch = mod
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:
        cudnn = None
    nccl = False
    try:
        import torch.distributed as dist

        nccl = bool(dist.is_available() and dist.is_nccl_available())
    except Exception:
        nccl = False
    base = dict(available=True, version=torch.__version__, cuda=torch.version.cuda, cudnn=cudnn, nccl=nccl)
    if torch.version.cuda is None:
        return TorchInfo(**base, cuda_reason="this torch build has no CUDA (CPU-only wheel)"), []
    if nvml_gpu_count == 0:
        return TorchInfo(**base, cuda_reason="no NVIDIA GPU found by NVML"), []
    try:
        ok = torch.cuda.is_available()
        count = torch.cuda.device_count() if ok else 0
    except Exception as e:
        return TorchInfo(**base, cuda_reason=f"CUDA initialisation failed: {e}"), []
    if not ok or count == 0:
        reason = "no CUDA device visible (driver missing, or CUDA_VISIBLE_DEVICES hides all GPUs)"
        return TorchInfo(**base, cuda_reason=reason), []
    devices = []
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        uuid = str(getattr(p, "uuid", "") or "") or None
        if uuid and not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
        devices.append({"index": i, "name": p.name, "cc": (p.major, p.minor),
                        "memory_total": int(p.total_memory), "uuid": uuid})
    return TorchInfo(**base, cuda_available=True, device_count=count), devices


def _probe_sdpa(cuda: bool) -> dict[str, Availability]:
    result = {"math": Availability(True)}
    if not cuda:
        for name in ("cudnn", "flash", "efficient"):
            result[name] = Availability(False, "no CUDA device")
        return result
    import torch

    checks = {
        "cudnn": "can_use_cudnn_attention",
        "flash": "can_use_flash_attention",
        "efficient": "can_use_efficient_attention",
    }
    try:
        q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
        params = torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, False, False)
    except Exception as e:
        return result | {n: Availability(False, f"SDPA probe failed: {e}") for n in checks}
    for name, fn in checks.items():
        try:
            ok = bool(getattr(torch.backends.cuda, fn)(params, False))
            result[name] = Availability(ok, None if ok else f"torch.backends.cuda.{fn} is false for bf16 head_dim 64")
        except Exception as e:
            result[name] = Availability(False, f"torch.backends.cuda.{fn} raised: {e}")
    return result


# ---------------------------------------------------------------------------------------
# Matching NVML devices to CUDA ordinals

def cuda_order(devices: list[dict[str, Any]], env: Mapping[str, str]) -> tuple[list[dict[str, Any]], str]:
    """NVML devices in CUDA ordinal order, as CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES select them.

    Returns (visible devices in ordinal order, how the order was decided).
    """
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
    by_pci = sorted(devices, key=lambda d: (d.get("pci_bus_id") or "", d["nvml_index"]))
    if order == "PCI_BUS_ID":
        ordered, how = by_pci, "PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)"
    else:
        # CUDA's FASTEST_FIRST heuristic puts the newest architecture first; ties keep bus order.
        ordered = sorted(by_pci, key=lambda d: tuple(-x for x in (d.get("cc") or (0, 0))))
        how = "FASTEST_FIRST estimate (newest compute capability first, then PCI bus order)"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return ordered, how
    chosen: list[dict[str, Any]] = []
    for token in (t.strip() for t in visible.split(",")):
        match = None
        if token.lstrip("-").isdigit():
            i = int(token)
            match = ordered[i] if 0 <= i < len(ordered) else None
        elif token:
            hits = [d for d in ordered if (d.get("uuid") or "").startswith(token)]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match in chosen:
            break  # CUDA stops at the first invalid entry
        chosen.append(match)
    return chosen, how + f", filtered by CUDA_VISIBLE_DEVICES={visible!r}"


def _merge_gpus(nvml_devs: list[dict[str, Any]], torch_devs: list[dict[str, Any]],
                env: Mapping[str, str]) -> tuple[tuple[GPU, ...], str | None]:
    """One GPU per CUDA ordinal: torch's list when it sees CUDA (matched by UUID), else NVML's."""
    reading_keys = ("uuid", "pci_bus_id", "memory_used", "utilization", "temperature", "power_draw",
                    "power_limit", "sm_clock", "mem_clock", "nvml_index")
    if torch_devs:
        by_uuid = {d.get("uuid"): d for d in nvml_devs if d.get("uuid")}
        gpus = []
        for t in torch_devs:
            n = by_uuid.get(t["uuid"], {})
            gpus.append(GPU(index=t["index"], name=t["name"], compute_capability=t["cc"],
                            memory_total=n.get("memory_total", t["memory_total"]),
                            **{k: n.get(k) for k in reading_keys if k != "uuid"}, uuid=t["uuid"],
                            errors=n.get("errors", {})))
        return tuple(gpus), "UUID (torch and NVML)" if nvml_devs else None
    if not nvml_devs:
        return (), None
    ordered, how = cuda_order(nvml_devs, env)
    gpus = tuple(GPU(index=i, name=d["name"], compute_capability=d.get("cc"),
                     memory_total=d.get("memory_total"), **{k: d.get(k) for k in reading_keys},
                     errors=d.get("errors", {})) for i, d in enumerate(ordered))
    return gpus, how


def _with_timeout(fn: Callable[[], Any], seconds: float) -> tuple[Any, str | None]:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn)
    try:
        return future.result(timeout=seconds), None
    except concurrent.futures.TimeoutError:
        return None, f"did not answer within {seconds:g} s"
    finally:
        pool.shutdown(wait=False)


def read_nvml(session: nvml_mod.NvmlSession, env: Mapping[str, str] | None = None,
              timeout: float = 10.0) -> tuple[NvmlInfo, list[dict[str, Any]], tuple[GPU, ...]]:
    """One NVML reading: (NVML info, raw device readings, GPUs in CUDA ordinal order). Never raises."""
    env = os.environ if env is None else env
    result, late = _with_timeout(session.read_all, timeout)
    if late:
        return NvmlInfo(False, f"NVML {late}"), [], ()
    info, devs = result
    gpus, match = _merge_gpus(devs, [], env)
    return NvmlInfo(**info, ordinal_match=match), devs, gpus


def probe(*, nvml_module: Any = None, env: Mapping[str, str] | None = None,
          nvml_timeout: float = 10.0) -> Capability:
    """Probe the live machine. Never raises for a missing driver, NVML, CUDA or package."""
    env = os.environ if env is None else env
    session = nvml_mod.NvmlSession(nvml_module)
    nvml, nvml_devs, _ = read_nvml(session, env, nvml_timeout)
    session.close()
    torch_info, torch_devs = _probe_torch(nvml.device_count if nvml.available else None)
    gpus, match = _merge_gpus(nvml_devs, torch_devs, env)
    nvml = dataclasses.replace(nvml, ordinal_match=match)
    cuda = torch_info.cuda_available and bool(gpus)
    packages = {name: probe_package(name, mod, dist, cuda=cuda) for name, mod, dist in PACKAGE_MODULES}
    cap = Capability("live", sys.platform, nvml, torch_info, gpus, packages, _probe_sdpa(cuda))
    return cap


def from_dict(data: Mapping[str, Any], source: str) -> Capability:
    """A Capability from its JSON form (or a whole `--check --json` output)."""
    if "capability" in data and isinstance(data["capability"], Mapping):
        data = data["capability"]
    try:
        gpus = tuple(GPU(**{**g, "compute_capability": tuple(g["compute_capability"]) if g.get("compute_capability") else None})
                     for g in data["gpus"])
        packages = {n: Package(**p) for n, p in data["packages"].items()}
        cap = Capability(source=source, platform=data["platform"], nvml=NvmlInfo(**data["nvml"]),
                         torch=TorchInfo(**data["torch"]), gpus=gpus, packages=packages,
                         sdpa={n: Availability(**a) for n, a in data["sdpa"].items()})
    except KeyError as e:
        raise CapabilityError(f"{source}: missing key {e} in the capability object") from None
    except (TypeError, AttributeError) as e:
        raise CapabilityError(f"{source}: malformed capability object ({e})") from None
    return cap
