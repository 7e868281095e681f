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
import threading
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
class PeerAccess:
    """Which pairs of GPUs can reach each other's memory (CUDA peer access), by CUDA ordinal:
    `matrix[i][j]` is True or False, None where it is unknown; `source` says how it was read
    (torch.cuda.can_device_access_peer, or NVML's P2P status), `reason` why it is unknown.

    ltx-kernels' all2all (sequence parallelism) maps every rank's buffer into the other ranks
    through CUDA IPC and writes to it directly (`cudaIpcOpenMemHandle` with lazy peer access in
    its csrc/all2all/all2all.cpp): every pair of the GPUs a run uses needs peer access.
    """

    matrix: tuple[tuple[bool | None, ...], ...] = ()
    source: str | None = None
    reason: str | None = "not probed"

    def between(self, i: int, j: int) -> bool | None:
        """Peer access from GPU `i` to GPU `j` (True for the same GPU); None when unknown."""
        if i == j:
            return True
        try:
            return self.matrix[i][j]
        except IndexError:
            return None


@dataclass(frozen=True)
class Capability:
    source: str
    platform: str
    nvml: NvmlInfo
    torch: TorchInfo
    gpus: tuple[GPU, ...]
    packages: Mapping[str, Package]
    sdpa: Mapping[str, Availability]
    peer_access: PeerAccess = field(default_factory=PeerAccess)

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
        if len(self.gpus) > 1:  # only a box of several GPUs has peer access to decide about
            static["peer_access"] = self.peer_access.matrix
        blob = json.dumps(static, sort_keys=True, default=str).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


class CapabilityError(Exception):
    """A capability id or file that cannot be used; the message says what and how to fix."""

    def __init__(self, message: str, *, file: str | None = None, problem: str | None = None,
                 fix: str | None = None) -> None:
        super().__init__(printable(message))  # it names paths and keys from the file
        # what a script reads from `--check --json`'s error (a capability file's problem)
        self.fields = {"file": file, "problem": None if problem is None else printable(problem), "fix": fix}


MAX_GPUS = 64  # the most GPUs a capability (preset or file) may describe


# ---------------------------------------------------------------------------------------
# Packages: (capability name, module to import, distribution name for the version)
PACKAGE_MODULES: tuple[tuple[str, str, str], ...] = (
    ("natten", "natten", "natten"),
    ("triton", "triton", "triton"),
    ("flash_attn_3", "flash_attn_interface", "flash-attn-3"),
    ("flash_attn_4", "flash_attn.cute", "flash-attn"),
    ("cudnn_frontend", "cudnn", "nvidia-cudnn-frontend"),
    ("ltx_kernels", "ltx_kernels", "ltx-kernels"),
    ("cutlass_dsl", "cutlass.cute", "nvidia-cutlass-dsl"),
    ("turbo_diffusion_ops", "turbo_diffusion_ops", "turbodiffusion"),
    ("spas_sage_attn", "spas_sage_attn", "spas-sage-attn"),
)
# ltx_kernels' optional builds, probed as submodules (all2all: its compiled extension, below).
LTX_KERNELS_PARTS = ("nvfp4", "vae", "all2all", "blockwise")
# ltx-kernels v1.2.0 builds its all2all as a top-level CUDA extension named `all2all_cpp` (setup.py's
# CUDAExtension, sources csrc/all2all/*), which `ltx_kernels.all_to_all` imports its All2All from;
# `ltx_kernels/__init__.py` imports that module, so without the extension ltx_kernels itself does not import.
ALL2ALL_EXTENSION = "all2all_cpp"
ALL2ALL_MODULE = "ltx_kernels.all_to_all"


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
        details.update(probe_all2all())
    return Package(name, module, True, _dist_version(dist, mod), details=details)


# ---------------------------------------------------------------------------------------
# ltx-kernels' all2all: importable, and for which GPU architectures its extension was built

_FATBIN_MAGIC = (0xBA55ED50).to_bytes(4, "little")  # CUDA fat binary container header
_ARCH_SPECIFIC = 0x100000  # an entry's flag: code for exactly that SM (sm_90a)
_MAX_BINARY = 512 * 1024 * 1024  # an extension's shared library; all2all_cpp is a few MiB


def cuda_binary_archs(path: str) -> tuple[tuple[str, ...] | None, str]:
    """The GPU code in the CUDA fat binaries of shared library `path`: ("sm_90", "compute_90", ...)
    (sm_XY: machine code for SM X.Y; compute_XY: PTX that the driver compiles for SM >= X.Y), or None
    and why it cannot be told. Reads only the containers' headers (their payloads may be compressed).

    Container layout (what cuobjdump lists; documented by NVIDIA's fatbinary headers and the
    open-source fat binary readers): a 16-byte header (magic 0xBA55ED50, u16 version, u16 header
    size, u64 size of the entries that follow), then entries, each with a header of u16 kind (1 PTX,
    2 ELF machine code), u16, u32 header size, u64 payload size, u32 compressed size, u32, u16 minor,
    u16 major, u32 SM number (90 for SM 9.0), u32, u32, u64 flags, ...; the payload follows the
    entry header. Flag 0x100000 marks architecture-specific code (sm_90a, sm_100a: that SM only);
    on an H200 it was set exactly on the entries cuobjdump --list-elf names `sm_XYa`, in
    ltx-kernels' all2all built by torch.utils.cpp_extension (sm_90a) and in torch's own libtorch_cuda.
    """
    try:
        with open(path, "rb") as f:
            blob = f.read(_MAX_BINARY + 1)
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror or e}"
    if len(blob) > _MAX_BINARY:
        return None, f"{path} is larger than {_MAX_BINARY >> 20} MiB; not read"
    found: set[tuple[int, str]] = set()
    at = blob.find(_FATBIN_MAGIC)
    containers = 0
    while at >= 0:
        if at + 16 <= len(blob):
            header_size = int.from_bytes(blob[at + 6:at + 8], "little")
            total = int.from_bytes(blob[at + 8:at + 16], "little")
            entry, end = at + header_size, min(at + header_size + total, len(blob))
            if header_size >= 16 and total > 0:
                containers += 1
                while entry + 48 <= end:
                    kind = int.from_bytes(blob[entry:entry + 2], "little")
                    entry_header = int.from_bytes(blob[entry + 4:entry + 8], "little")
                    payload = int.from_bytes(blob[entry + 8:entry + 16], "little")
                    arch = int.from_bytes(blob[entry + 28:entry + 32], "little")
                    flags = int.from_bytes(blob[entry + 40:entry + 48], "little")
                    if kind in (1, 2) and 0 < arch < 1000:
                        found.add((kind, f"{arch}{'a' if flags & _ARCH_SPECIFIC else ''}"))
                    if entry_header < 48:
                        break
                    entry += entry_header + payload
        at = blob.find(_FATBIN_MAGIC, at + 4)
    if not found:
        why = "no GPU code found in its CUDA fat binaries" if containers else "no CUDA fat binary in it"
        return None, f"{why} ({path})"
    names = sorted(f"{'sm' if kind == 2 else 'compute'}_{arch}" for kind, arch in found)
    return tuple(names), f"read from the CUDA fat binaries of {path}"


def arch_runs_on(archs: tuple[str, ...] | list[str], cc: tuple[int, int]) -> bool:
    """Whether GPU code for `archs` (cuda_binary_archs' names) runs on a GPU of compute capability
    `cc`: machine code sm_XY runs on SM X.Z for Z >= Y (same major); PTX compute_XY is compiled by
    the driver for any SM >= X.Y; architecture-specific code (sm_XYa, compute_XYa) runs on SM X.Y
    only, family code (sm_XYf) on SM X.Z for Z >= Y."""
    for name in archs:
        kind, _, number = name.partition("_")
        suffix = number[-1] if number[-1:] in ("a", "f") else ""
        digits = number[:len(number) - len(suffix)]
        if not digits.isdigit():
            continue
        major, minor = int(digits) // 10, int(digits) % 10
        if suffix == "a":
            if (major, minor) == tuple(cc):
                return True
        elif kind == "sm" or suffix == "f":
            if major == cc[0] and minor <= cc[1]:
                return True
        elif kind == "compute" and (major, minor) <= tuple(cc):
            return True
    return False


def probe_all2all() -> dict[str, Any]:
    """ltx-kernels' all2all as sequence parallelism needs it: `all2all` (its module and compiled
    extension import), `all2all_path` (the extension's file), `all2all_archs` (the GPU code built
    into it, None when that cannot be told) and `all2all_note` (how it was found, or why not)."""
    spec = None
    try:
        spec = importlib.util.find_spec(ALL2ALL_EXTENSION)
    except (ImportError, ValueError, AttributeError):
        spec = None
    if spec is None:
        return {"all2all": False, "all2all_path": None, "all2all_archs": None,
                "all2all_note": f"ltx-kernels' all2all extension ({ALL2ALL_EXTENSION}) is not installed: it is "
                "built by ltx-kernels' setup.py (nvcc) or torch.utils.cpp_extension from csrc/all2all"}
    path = printable(spec.origin or "?")
    mod, why = import_optional(ALL2ALL_MODULE)
    if mod is None:
        return {"all2all": False, "all2all_path": path, "all2all_archs": None,
                "all2all_note": printable(f"{ALL2ALL_MODULE} does not import ({why})")}
    archs, how = cuda_binary_archs(spec.origin) if spec.origin else (None, "the extension has no file")
    return {"all2all": True, "all2all_path": path, "all2all_archs": list(archs) if archs else None,
            "all2all_note": printable(how)}


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


TORCH_PEER = "torch.cuda.can_device_access_peer"
NVML_PEER = "NVML nvmlDeviceGetP2PStatus (read and write)"


def _probe_peer_access(count: int) -> PeerAccess:
    """Peer access between every pair of the `count` CUDA devices torch sees, or why not."""
    if count < 1:
        return PeerAccess(reason="no CUDA device")
    import torch

    rows = []
    try:
        for i in range(count):
            rows.append(tuple(True if i == j else bool(torch.cuda.can_device_access_peer(i, j))
                              for j in range(count)))
    except Exception as e:
        return PeerAccess(reason=printable(f"{TORCH_PEER} raised {type(e).__name__}: {e}"))
    return PeerAccess(tuple(rows), TORCH_PEER, None)


def nvml_peer_access(module: Any, nvml_indices: list[int | None], timeout: float = 10.0) -> PeerAccess:
    """Peer access from NVML's P2P status (read and write both OK), for GPUs given by their NVML
    index in CUDA ordinal order: the fallback when torch cannot say (a CPU build of torch). Reads
    in a daemon thread, so a hung driver costs `timeout`, never a hang."""
    box: dict[str, PeerAccess] = {}

    def read() -> None:
        nv = module
        try:
            if nv is None:
                import pynvml as nv
            nv.nvmlInit()
        except Exception as e:
            box["result"] = PeerAccess(reason=f"NVML: {nvml_mod.describe_error(e)}")
            return
        try:
            handles = [None if i is None else nv.nvmlDeviceGetHandleByIndex(i) for i in nvml_indices]
            caps = (nv.NVML_P2P_CAPS_INDEX_READ, nv.NVML_P2P_CAPS_INDEX_WRITE)
            rows = []
            for a, ha in enumerate(handles):
                row: list[bool | None] = []
                for b, hb in enumerate(handles):
                    if a == b:
                        row.append(True)
                    elif ha is None or hb is None:
                        row.append(None)
                    else:
                        row.append(all(nv.nvmlDeviceGetP2PStatus(ha, hb, c) == nv.NVML_P2P_STATUS_OK
                                       for c in caps))
                rows.append(tuple(row))
            box["result"] = PeerAccess(tuple(rows), NVML_PEER, None)
        except Exception as e:
            box["result"] = PeerAccess(reason=f"NVML P2P status: {nvml_mod.describe_error(e)}")
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass

    reader = threading.Thread(target=read, name="nvml-p2p", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        return PeerAccess(reason=f"NVML did not answer within {timeout:g} s")
    return box["result"]


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
    peer = _probe_peer_access(len(gpus)) if cuda else PeerAccess(reason=torch_info.cuda_reason or "no CUDA device")
    if peer.source is None and len(gpus) > 1 and nvml.available:
        nvml_peer = nvml_peer_access(nvml_module, [g.nvml_index for g in gpus], nvml_timeout)
        peer = nvml_peer if nvml_peer.source else PeerAccess(reason=f"{peer.reason}; {nvml_peer.reason}")
    cap = Capability("live", sys.platform, nvml, torch_info, gpus, packages, _probe_sdpa(cuda), peer)
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
    peer = _peer_access(r, data["peer_access"], f"{path}.peer_access", len(gpus)) if "peer_access" in data \
        else PeerAccess(reason="not in this capability file (written before ltx-tui probed peer access)")
    known = {"source", "platform", "nvml", "torch", "gpus", "packages", "sdpa", "peer_access"}
    extra = sorted(set(data) - known)
    if extra:
        r.ignored(path, extra)
    return Capability(source=source, platform=printable(data["platform"]),
                      nvml=r.obj(NvmlInfo, data["nvml"], f"{path}.nvml"),
                      torch=r.obj(TorchInfo, data["torch"], f"{path}.torch"), gpus=gpus, packages=packages, sdpa=sdpa,
                      peer_access=peer)


def _peer_access(r: _Reader, value: Any, path: str, gpus: int) -> PeerAccess:
    """The peer-access block of a capability file: a square matrix of true/false/null, one row per GPU."""
    value = r.mapping(value, path)
    extra = sorted(set(value) - {"matrix", "source", "reason"})
    if extra:
        r.ignored(path, extra)
    for key in ("source", "reason"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise r.fail(f"{path}.{key}", f"expected a string or null, found {_shown(value[key])}")
    matrix = value.get("matrix", [])
    if not isinstance(matrix, list):
        raise r.fail(f"{path}.matrix", f"expected an array, found {_shown(matrix)}")
    if matrix and len(matrix) != gpus:
        raise r.fail(f"{path}.matrix", f"{len(matrix)} rows for {gpus} GPU(s); expected one row per GPU")
    rows = []
    for i, row in enumerate(matrix):
        if not isinstance(row, list) or len(row) != gpus:
            raise r.fail(f"{path}.matrix[{i}]", f"expected an array of {gpus} true/false/null, found {_shown(row)}")
        for j, cell in enumerate(row):
            if cell is not None and not isinstance(cell, bool):
                raise r.fail(f"{path}.matrix[{i}][{j}]", f"expected true, false or null, found {_shown(cell)}")
        rows.append(tuple(row))
    return PeerAccess(tuple(rows), *(printable(value[k]) if value.get(k) is not None else None
                                     for k in ("source", "reason")))
