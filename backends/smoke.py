"""Smoke checks derived from a resolution, each run in a subprocess with a timeout.

`plan(profile, decisions, capability)` lists the checks the effective choices call for;
`run_check(spec, timeout)` runs one in a fresh interpreter (a hung CUDA call cannot hang
the caller) and returns a JSON-able row {name, status, seconds, max_error, message}.
`python -m backends.smoke SPEC_JSON` is the worker side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from backends.probe.capability import Capability
from backends.config.options import OffloadMode, Profile, Quantization
from backends.config.rules import Decision, Status

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class CheckSpec:
    name: str
    kind: str
    device: str
    params: dict


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # pass | fail | error | timeout | cancelled
    seconds: float
    max_error: float | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(profile: Profile, decisions: Iterable[Decision], capability: Capability) -> list[CheckSpec]:
    """The checks for the effective choices that can run (options in error are not checked)."""
    d = {x.option: x for x in decisions}
    device = "cpu"
    if capability.cuda:
        device = f"cuda:{(profile.parallel.devices or (0,))[0]}"
    specs = []
    na = d["diffvae.na_backend"]
    if na.status is not Status.ERROR and na.effective not in (None, "blackwell_dsl"):
        backend = na.effective if na.effective != "natten" else f"natten:{d['diffvae.natten_kernel'].effective}"
        specs.append(CheckSpec(f"na3d {backend}", "na3d", device, {"backend": backend}))
    q = d["transformer.quantization"]
    if q.status is not Status.ERROR and q.effective not in (None, Quantization.NONE.value):
        specs.append(CheckSpec(f"linear {q.effective}", "linear", device, {"method": q.effective}))
    if profile.compile.enabled and all(d[k].status is not Status.ERROR for k in
                                       ("compile.enabled", "compile.mode", "compile.backend", "compile.capture")):
        specs.append(CheckSpec("compiled block", "compile", device, {"profile": _profile_table(profile)}))
    o = d["offload.mode"]
    if profile.offload.mode is not OffloadMode.NONE and o.status is not Status.ERROR and o.effective != "none":
        specs.append(CheckSpec(f"offload {o.effective} round trip", "offload", device,
                               {"mode": o.effective, "gpu_slots": profile.offload.gpu_slots,
                                "prefetch": profile.offload.prefetch}))
    if profile.parallel.gpus > 1 and d["parallel.gpus"].status is not Status.ERROR:
        devices = list(profile.parallel.devices or range(profile.parallel.gpus))
        specs.append(CheckSpec(f"nccl all-reduce x{len(devices)}", "nccl", device, {"devices": devices}))
    return specs


def _profile_table(profile: Profile) -> dict:
    from backends.config.profile import to_data

    return to_data(profile)


def run_check(spec: CheckSpec, timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None) -> CheckResult:
    """Run one check in a subprocess; never raises, never waits past `timeout`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "backends.smoke", json.dumps(asdict(spec))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = None
    while True:
        try:
            out, err = proc.communicate(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                status = "cancelled"
            elif time.perf_counter() - t0 > timeout:
                status = "timeout"
            if status:
                proc.kill()
                proc.communicate()
                seconds = time.perf_counter() - t0
                return CheckResult(spec.name, status, round(seconds, 2), None,
                                   "cancelled" if status == "cancelled" else f"no answer within {timeout:g} s")
    seconds = round(time.perf_counter() - t0, 2)
    for line in reversed(out.strip().splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        return CheckResult(spec.name, row["status"], seconds, row.get("max_error"), row.get("message", ""))
    tail = (err or out).strip().splitlines()[-3:]
    return CheckResult(spec.name, "error", seconds, None, f"worker exited {proc.returncode}: " + " | ".join(tail))


def run_all(specs: list[CheckSpec], timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
            on_result: Callable[[int, CheckResult], None] | None = None,
            on_start: Callable[[int], None] | None = None) -> list[CheckResult]:
    """Run the checks in order; stops after a cancelled one. Callbacks report progress."""
    results = []
    for i, spec in enumerate(specs):
        if on_start:
            on_start(i)
        result = run_check(spec, timeout, cancel)
        results.append(result)
        if on_result:
            on_result(i, result)
        if result.status == "cancelled":
            break
    return results


# --- worker side ----------------------------------------------------------------------------

def _max_err(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def _check_na3d(device: str, backend: str) -> tuple[float, float]:
    import torch

    from backends.runtime.attention import na3d
    from kernels.na3d_reference import na3d_reference

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    q, k, v = (torch.randn(1, 4, 9, 12, 2, 64, device=device).to(dtype) for _ in range(3))
    out = na3d(q, k, v, (3, 5, 5), backend=backend)
    ref = na3d_reference(q.float(), k.float(), v.float(), (3, 5, 5))
    return _max_err(out, ref), 2e-2 if dtype == torch.bfloat16 else 1e-4


def _check_linear(device: str, method: str) -> tuple[float, float]:
    import torch

    from backends.runtime.quant import BUILDERS

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    lin = torch.nn.Linear(512, 256).to(device=device, dtype=dtype)
    x = torch.randn(64, 512, device=device, dtype=dtype)
    ref = lin(x).float()
    out = BUILDERS[method](lin)(x).float()
    return ((out - ref).abs().max() / ref.abs().max()).item(), 0.1


def _check_compile(device: str, profile: dict) -> tuple[float, float]:
    import torch

    from backends.runtime.apply import compile_kwargs
    from backends.runtime.modules import NABlock
    from backends.config.profile import parse

    p, _ = parse(profile)
    block = NABlock(128, (3, 3, 3), 64, backend="eager_sdpa").to(device)
    x = torch.randn(1, 4, 6, 6, 128, device=device)
    ref = block(x)
    compiled = torch.compile(block, **compile_kwargs(p))
    out = compiled(x)
    out = compiled(x)
    return _max_err(out, ref), 1e-3


def _check_offload(device: str, mode: str, gpu_slots: int, prefetch: int) -> tuple[float, float]:
    import torch

    from backends.runtime.modules import BlockStack
    from backends.runtime.offload import BlockStreamer

    blocks = [torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
              for _ in range(4)]
    model = BlockStack(blocks).to(device)
    x = torch.randn(32, 256, device=device)
    ref = model(x)
    streamer = BlockStreamer(model.blocks, device, gpu_slots=gpu_slots, prefetch=prefetch, mode=mode)
    out = model(x)
    out = model(x)
    streamer.remove()
    return _max_err(out, ref), 0.0


def _check_nccl(devices: list[int]) -> tuple[float, float]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_rank, args=(r, devices, port, queue)) for r in range(len(devices))]
    for p in procs:
        p.start()
    errs = [queue.get(timeout=90) for _ in procs]
    for p in procs:
        p.join()
    return max(errs), 0.0


def _nccl_rank(rank: int, devices: list[int], port: int, queue) -> None:
    import os

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(devices[rank])
    dist.init_process_group("nccl", rank=rank, world_size=len(devices))
    t = torch.full((1024,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    want = len(devices) * (len(devices) + 1) / 2
    queue.put((t - want).abs().max().item())
    dist.destroy_process_group()


def _worker(spec: dict) -> dict:
    kind, device, params = spec["kind"], spec["device"], spec["params"]
    checks = {"na3d": lambda: _check_na3d(device, params["backend"]),
              "linear": lambda: _check_linear(device, params["method"]),
              "compile": lambda: _check_compile(device, params["profile"]),
              "offload": lambda: _check_offload(device, params["mode"], params["gpu_slots"], params["prefetch"]),
              "nccl": lambda: _check_nccl(params["devices"])}
    try:
        err, bound = checks[kind]()
    except Exception as e:  # the row says what broke
        return {"status": "error", "max_error": None, "message": f"{type(e).__name__}: {e}"}
    ok = err <= bound
    return {"status": "pass" if ok else "fail", "max_error": err,
            "message": f"max error {err:.3g} {'<=' if ok else '>'} {bound:g}"}


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))), flush=True)
