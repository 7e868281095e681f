"""Fakes for NVML (pynvml) and capability edits used across tests."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

from backends.machine.capability import Capability, Package


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class FakeNvml:
    """A pynvml stand-in: `gpus` is a list of dicts with the readings of each device (`procs` and
    `gprocs`: (pid, bytes or None) of its compute and graphics processes; a reading that is an
    exception is raised); a key in `unsupported` raises NotSupported on every GPU."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, gpus=(), *, init_error=None, unsupported=(), hang=0.0, driver="580.159.04", block=None):
        self.block = block  # a threading.Event: nvmlDeviceGetCount waits for it (a hung driver)
        self.gpus = [dict(g) for g in gpus]
        self.init_error = init_error
        self.unsupported = set(unsupported)
        self.hang = hang
        self.driver = driver
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self):
        self.init_calls += 1
        if self.hang:
            time.sleep(self.hang)
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetCount(self):
        if self.block is not None:
            self.block.wait()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def _get(self, h, key):
        if key in self.unsupported:
            raise NVMLError_NotSupported("Not Supported")
        value = self.gpus[h][key]
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._get(h, "uuid")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._get(h, "pci").encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._get(h, "cc")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=self._get(h, "mem_total"), used=self._get(h, "mem_used"))

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._get(h, "temp")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._get(h, "limit_mw")

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._get(h, "sm_clock" if clock == self.NVML_CLOCK_SM else "mem_clock")

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._get(h, "energy_mj")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._get(h, "procs")]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._get(h, "gprocs")]


def fake_gpu(i: int, name="NVIDIA H200", cc=(9, 0), pci=None, **over):
    gpu = dict(name=name, uuid=f"GPU-{i:04d}aaaa-0000", pci=pci or f"00000000:{0x18 + i:02X}:00.0", cc=cc,
               mem_total=143771 * 2**20, mem_used=(1 + i) * 2**30, util=10 * i, temp=40 + i,
               power_mw=100_000 + i, limit_mw=700_000, sm_clock=1980, mem_clock=3201, energy_mj=5_000_000 + i,
               procs=(), gprocs=())
    gpu.update(over)
    return gpu


def without(cap: Capability, *names: str) -> Capability:
    """`cap` with packages `names` missing."""
    packages = dict(cap.packages)
    for n in names:
        packages[n] = Package(n, packages[n].module, False, reason="not installed (test)")
    return dataclasses.replace(cap, packages=packages)


def with_package(cap: Capability, name: str, **details) -> Capability:
    packages = dict(cap.packages)
    packages[name] = Package(name, packages[name].module, True, "test", details=details)
    return dataclasses.replace(cap, packages=packages)


def decided(**values) -> "Profile":
    """A profile whose `auto` of the options whose first call compiles is decided as a plan without
    measurements decides it (`run_length.PRIOR`): what the launcher's flag policy judges."""
    from backends.config.options import Profile
    from backends.config.run_length import PRIOR

    return Profile().replace(**{**PRIOR, **values})
