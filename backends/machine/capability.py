"""What this machine can run: a JSON-serialisable snapshot of GPUs, torch and packages.

`probe()` reads the live machine (NVML for the GPUs, torch for CUDA, imports for the
packages); `from_dict` reads the capability block of a `--check --json` output. Presets
and `load_capability` live in `backends.machine.presets`.
A missing driver, NVML, CUDA or package gives a value that says why, never an exception.
Strings from NVML, torch and files hold no control characters (`text.printable`: shown escaped).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from backends.machine import nvml as nvml_mod
from backends.machine.text import printable


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

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))  # it names paths and keys from the file


MAX_GPUS = 64  # the most GPUs a capability (preset or file) may describe


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
        devices.append({"index": i, "name": printable(p.name), "cc": (p.major, p.minor),
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


def read_nvml(session: nvml_mod.NvmlSession, env: Mapping[str, str] | None = None,
              timeout: float = 10.0) -> tuple[NvmlInfo, list[dict[str, Any]], tuple[GPU, ...]]:
    """One NVML reading: (NVML info, raw device readings, GPUs in CUDA ordinal order). Never raises."""
    env = os.environ if env is None else env
    info, devs = session.read_all(timeout=timeout)
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


# ---------------------------------------------------------------------------------------
# Capability files: every field checked, with its JSON path in the message

_INT, _NUM, _STR, _BOOL = (int,), (int, float), (str,), (bool,)
# field -> (allowed JSON types, may be null); fields not listed keep their defaults when absent
_FIELDS: dict[type, dict[str, tuple[tuple[type, ...], bool]]] = {
    GPU: {"index": (_INT, False), "name": (_STR, False), "compute_capability": ((list,), True),
          "memory_total": (_INT, True), "uuid": (_STR, True), "pci_bus_id": (_STR, True),
          "memory_used": (_INT, True), "utilization": (_INT, True), "temperature": (_INT, True),
          "power_draw": (_NUM, True), "power_limit": (_NUM, True), "sm_clock": (_INT, True),
          "mem_clock": (_INT, True), "nvml_index": (_INT, True), "errors": ((dict,), False)},
    NvmlInfo: {"available": (_BOOL, False), "reason": (_STR, True), "driver_version": (_STR, True),
               "cuda_driver_version": (_STR, True), "device_count": (_INT, True), "ordinal_match": (_STR, True)},
    TorchInfo: {"available": (_BOOL, False), "reason": (_STR, True), "version": (_STR, True), "cuda": (_STR, True),
                "cudnn": (_INT, True), "cuda_available": (_BOOL, False), "cuda_reason": (_STR, True),
                "device_count": (_INT, False), "nccl": (_BOOL, False)},
    Package: {"name": (_STR, False), "module": (_STR, False), "available": (_BOOL, False), "version": (_STR, True),
              "reason": (_STR, True), "details": ((dict,), False)},
    Availability: {"available": (_BOOL, False), "reason": (_STR, True)},
}
_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "an array",
          dict: "an object"}
_INT_LIMIT = 2**63  # NVML's counters are 64-bit; a bigger number is not a reading (and overflows a float)


def _printable(value: Any) -> Any:
    """A JSON value with its strings (keys too) made printable; nesting is bounded by the file reader."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    def __init__(self, source: str, warnings: list[str]) -> None:
        self.source, self.warnings = source, warnings

    def fail(self, path: str, problem: str) -> CapabilityError:
        return CapabilityError(f"{self.source}: {path}: {problem}")

    def ignored(self, path: str, extra: list[str]) -> None:
        self.warnings.append(printable(f"{self.source}: {path}: ignored unknown field(s) {', '.join(extra)} "
                                       "(written by a newer ltx-tui?)"))

    def obj(self, cls: type, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, found {_shown(value)}")
        fields = _FIELDS[cls]
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        for name in sorted(required - set(value)):
            raise self.fail(f"{path}.{name}", "missing")
        extra = sorted(set(value) - set(fields))
        if extra:
            self.ignored(path, extra)
        out = {}
        for name, (types, nullable) in fields.items():
            if name not in value:
                continue
            v = value[name]
            where = f"{path}.{name}"
            if v is None:
                if not nullable:
                    raise self.fail(where, f"must not be null; expected {_NAMES[types[0]]}")
            elif not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
                raise self.fail(where, f"expected {_NAMES[types[0]]}, found {_shown(v)}")
            elif types is _INT and v < 0:
                raise self.fail(where, f"expected a non-negative integer, found {v}")
            elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= _INT_LIMIT:
                raise self.fail(where, f"expected an integer below 2**63, found {_shown(v)}")
            out[name] = _printable(v)
        if cls is GPU:
            cc = out.get("compute_capability")
            if cc is not None:
                if len(cc) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in cc):
                    raise self.fail(f"{path}.compute_capability", f"expected [major, minor], found {_shown(cc)}")
                out["compute_capability"] = tuple(cc)
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in out.get("errors", {}).items()):
                raise self.fail(f"{path}.errors", "expected an object of strings")
        return cls(**out)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, found {_shown(value)}")
        return value


def from_dict(data: Mapping[str, Any], source: str, warnings: list[str] | None = None) -> Capability:
    """A Capability from its JSON form (or a whole `--check --json` output), every field checked.

    Unknown fields (from a newer ltx-tui) are ignored with a warning appended to `warnings`.
    """
    source = printable(source)
    r = _Reader(source, [] if warnings is None else warnings)
    path = "$"
    if "capability" in data:
        data, path = r.mapping(data["capability"], "$.capability"), "$.capability"
    for key in ("platform", "nvml", "torch", "gpus", "packages", "sdpa"):
        if key not in data:
            raise r.fail(f"{path}.{key}", "missing")
    if not isinstance(data["platform"], str):
        raise r.fail(f"{path}.platform", f"expected a string, found {_shown(data['platform'])}")
    if not isinstance(data["gpus"], list):
        raise r.fail(f"{path}.gpus", f"expected an array, found {_shown(data['gpus'])}")
    if len(data["gpus"]) > MAX_GPUS:
        raise r.fail(f"{path}.gpus", f"{len(data['gpus'])} GPUs; at most {MAX_GPUS} are supported")
    gpus = tuple(r.obj(GPU, g, f"{path}.gpus[{i}]") for i, g in enumerate(data["gpus"]))
    packages = {printable(n): r.obj(Package, p, f"{path}.packages.{n}")
                for n, p in r.mapping(data["packages"], f"{path}.packages").items()}
    sdpa = {printable(n): r.obj(Availability, a, f"{path}.sdpa.{n}")
            for n, a in r.mapping(data["sdpa"], f"{path}.sdpa").items()}
    known = {"source", "platform", "nvml", "torch", "gpus", "packages", "sdpa"}
    extra = sorted(set(data) - known)
    if extra:
        r.ignored(path, extra)
    return Capability(source=source, platform=printable(data["platform"]),
                      nvml=r.obj(NvmlInfo, data["nvml"], f"{path}.nvml"),
                      torch=r.obj(TorchInfo, data["torch"], f"{path}.torch"), gpus=gpus, packages=packages, sdpa=sdpa)
