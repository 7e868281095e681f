"""A thin NVML session over `pynvml` (nvidia-ml-py): lazy init, readings as plain dicts.

Every failure becomes a reason string: no driver, no library, a field the GPU does not
support. The module object is injectable so tests run with a fake. A session made with
`processes=True` also lists the processes holding each GPU's memory, named from /proc.

`read_all(timeout=...)` reads in a daemon thread under a lock, so a hung driver can neither
block the caller past the timeout nor keep the process from exiting. A read that did not
return leaves the session unusable: later reads say so at once (never a second thread inside
NVML), and once the stuck call returns the session starts over with a fresh nvmlInit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backends.machine.text import printable


def _text(value: Any) -> str:
    """A string NVML returned, with control characters shown escaped (a GPU name reaches the terminal)."""
    return printable(value.decode(errors="replace") if isinstance(value, bytes) else str(value))


def describe_error(err: BaseException) -> str:
    """NVML error in words: what is missing rather than 'error'."""
    name = type(err).__name__
    if "LibraryNotFound" in name:
        return "NVML library not found (no NVIDIA driver installed)"
    if "DriverNotLoaded" in name:
        return "NVIDIA driver not loaded"
    if "NoPermission" in name:
        return "no permission to query NVML"
    if "NotSupported" in name:
        return "not supported by this GPU"
    return printable(f"{name}: {err}") if str(err) else name


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU: `kind` C (compute), G (graphics) or C+G; `used_memory` in bytes
    (None: NVML cannot say); `name` its command line (printable) or why it is unknown."""

    pid: int
    name: str
    used_memory: int | None
    kind: str


MAX_NAME = 256  # characters of a command line kept


def process_name(pid: int, proc: Path = Path("/proc")) -> str:
    """The command line of `pid` (its comm for a kernel thread), or why it cannot be read."""
    try:
        with open(proc / str(pid) / "cmdline", "rb") as f:
            argv = f.read(4 * MAX_NAME).split(b"\0")
        name = " ".join(a.decode(errors="replace") for a in argv if a)
        if not name:
            name = f"[{(proc / str(pid) / 'comm').read_text(errors='replace').strip()}]"
    except FileNotFoundError:
        return "? (not in this /proc: exited, or in another PID namespace)"
    except PermissionError:
        return "? (no permission to read its command line)"
    except OSError as e:
        return f"? ({printable(e.strerror or type(e).__name__)})"
    return printable(name[:MAX_NAME])


def _memory(value: Any) -> int | None:
    """usedGpuMemory in bytes; None where NVML has no value (None, or its all-ones 'not available')."""
    return int(value) if value is not None and 0 <= int(value) < 2**64 - 1 else None


MAX_PROCESSES = 64  # processes named per GPU, the most memory first


def read_processes(nv: Any, handle: Any, proc: Path = Path("/proc")) -> tuple[tuple[GpuProcess, ...] | None, str | None]:
    """(the processes on a GPU, the most memory first; None when NVML lists neither kind), and why a
    list could not be read (NotSupported, no permission...)."""
    found: dict[int, tuple[str, int | None]] = {}
    failed: dict[str, str] = {}
    for kind, fn in (("C", "nvmlDeviceGetComputeRunningProcesses"), ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
        try:
            listed = [(int(p.pid), _memory(getattr(p, "usedGpuMemory", None))) for p in getattr(nv, fn)(handle)]
        except Exception as e:
            failed["compute" if kind == "C" else "graphics"] = describe_error(e)
            continue
        for pid, mem in listed:
            kinds, old = found.get(pid, ("", None))
            found[pid] = ("C+G" if kinds and kinds != kind else kind,
                          max((m for m in (old, mem) if m is not None), default=None))
    if len(failed) == 2:
        reasons = set(failed.values())
        return None, reasons.pop() if len(reasons) == 1 else "; ".join(f"{k}: {v}" for k, v in failed.items())
    order = sorted(found.items(), key=lambda item: (item[1][1] is None, -(item[1][1] or 0), item[0]))
    procs = tuple(GpuProcess(pid, process_name(pid, proc), mem, kind) for pid, (kind, mem) in order[:MAX_PROCESSES])
    return procs, "; ".join(f"{k} processes: {v}" for k, v in failed.items()) or None


class NvmlSession:
    """Initialises NVML on first use; `close()` shuts it down."""

    def __init__(self, module: Any = None, *, processes: bool = False, proc: Path = Path("/proc")) -> None:
        self.processes, self._proc = processes, proc
        self._module = module
        self._ready = False
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._stuck: threading.Thread | None = None
        self._stuck_since = 0.0

    def _nvml(self) -> Any:
        if self._ready:
            return self._module
        if self.reason is not None:
            return None
        try:
            if self._module is None:
                import pynvml

                self._module = pynvml
            self._module.nvmlInit()
        except ImportError:
            self.reason = "nvidia-ml-py (pynvml) is not installed"
            return None
        except Exception as e:
            self.reason = describe_error(e)
            return None
        self._ready = True
        return self._module

    def close(self) -> None:
        """Shut NVML down, unless a read is still inside it (then the process exit cleans up)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._shutdown()
        finally:
            self._lock.release()

    def _shutdown(self) -> None:
        if self._ready:
            try:
                self._module.nvmlShutdown()
            except Exception:
                pass
            self._ready = False

    def system(self) -> dict[str, Any]:
        """Driver versions and device count, or why NVML is unavailable."""
        nv = self._nvml()
        if nv is None:
            return {"available": False, "reason": self.reason}
        info: dict[str, Any] = {"available": True}
        try:
            info["driver_version"] = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            info["driver_version"] = None
        try:
            v = int(nv.nvmlSystemGetCudaDriverVersion())
            info["cuda_driver_version"] = f"{v // 1000}.{v % 1000 // 10}"
        except Exception:
            info["cuda_driver_version"] = None
        try:
            info["device_count"] = int(nv.nvmlDeviceGetCount())
        except Exception as e:
            return {"available": False, "reason": f"cannot count GPUs: {describe_error(e)}"}
        return info

    def device(self, index: int) -> dict[str, Any]:
        """Static and live readings of NVML device `index`; unreadable fields go to `errors`; with
        `processes`, `processes` and `processes_error` (read_processes)."""
        nv = self._nvml()
        errors: dict[str, str] = {}
        out: dict[str, Any] = {"nvml_index": index, "errors": errors}
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:
            errors["device"] = describe_error(e)
            out["name"] = f"GPU {index} (unreadable)"
            return out

        def read(key: str, fn: Callable[[], Any]) -> None:
            try:
                out[key] = fn()
            except Exception as e:
                out[key] = None
                errors[key] = describe_error(e)

        read("name", lambda: _text(nv.nvmlDeviceGetName(handle)))
        read("uuid", lambda: _text(nv.nvmlDeviceGetUUID(handle)))
        read("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(handle).busId))
        read("cc", lambda: tuple(int(x) for x in nv.nvmlDeviceGetCudaComputeCapability(handle)))
        mem: dict[str, int] = {}
        read("memory", lambda: mem.update(total=int((m := nv.nvmlDeviceGetMemoryInfo(handle)).total),
                                          used=int(m.used)))
        out.pop("memory", None)
        out["memory_total"], out["memory_used"] = mem.get("total"), mem.get("used")
        read("utilization", lambda: int(nv.nvmlDeviceGetUtilizationRates(handle).gpu))
        read("temperature", lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
        read("power_draw", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        read("power_limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        read("sm_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)))
        read("mem_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)))
        if out.get("name") is None:
            out["name"] = f"GPU {index}"
        if self.processes:
            out["processes"], out["processes_error"] = read_processes(nv, handle, self._proc)
        return out

    def energy_j(self, index: int) -> float | None:
        """The energy device `index` has drawn since the driver loaded, in joules (NVML's total energy
        counter, Volta on); None where NVML or the counter is not there (`self.reason` for NVML)."""
        nv = self._nvml()
        if nv is None:
            return None
        try:
            return nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(index)) / 1000.0
        except Exception:
            return None

    def _read_all(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        with self._lock:
            info = self.system()
            if not info["available"]:
                return info, []
            return info, [self.device(i) for i in range(info["device_count"])]

    def read_all(self, timeout: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(system info, one reading per NVML device); with `timeout`, never waits longer."""
        if timeout is None:
            return self._read_all()
        if self._stuck is not None:
            if self._stuck.is_alive():
                return {"available": False, "reason": f"NVML did not answer: a read has been stuck in the driver "
                        f"for {time.monotonic() - self._stuck_since:.0f} s"}, []
            self._stuck = None  # it came back: start over with a fresh session
            with self._lock:
                self._shutdown()
                self.reason = None
        box: dict[str, Any] = {}

        def read() -> None:
            try:
                box["result"] = self._read_all()
            except Exception as e:  # the caller gets the reason, not a dead thread
                box["result"] = ({"available": False, "reason": f"NVML read failed: {describe_error(e)}"}, [])

        reader = threading.Thread(target=read, name="nvml-read", daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self._stuck, self._stuck_since = reader, started
            return {"available": False, "reason": f"NVML did not answer within {timeout:g} s"}, []
        return box["result"]
