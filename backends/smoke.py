"""Smoke checks: each runtime step of a plan, run by the runtime's own install path on a probe model.

`plan_checks(plan)` lists one check per runtime step the plan takes on this machine (plus an NCCL
all-reduce for multi-GPU). A check runs in a fresh interpreter (`python -m backends.smoke SPEC`),
in its own process group, so a hung CUDA call or a forked child cannot outlive its timeout:
on timeout or cancel the whole group is killed. The worker applies the step it was sent (as
planned: `plan_here`, the tune cache included) with `apply_profile` (the function users call) to
a probe model and compares with the model as it was, within the bound of the step's value
(`config.values`); where its own plan differs, it says so. Probe models are LTX-2's own modules
in small configurations when ltx-core is importable (`runtime.ltx2`), else ltx-tui's protocol-compatible ones, at awkward (odd, non-square) sizes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from backends.config.plan import Plan, Step, first_device
from backends.config.rules import Status
from backends.config.values import COMPILED, KERNEL, step_bound
from backends.machine.worker import run_worker

DEFAULT_TIMEOUT = 120.0
# Steps whose options carry no value bound: fast_norm's kernels round once where LTX-2's ops round
# after each op; the captured loop replays the eager blocks with one AdaLN row for uniform timesteps.
KIND_BOUNDS = {"fast_norm": KERNEL, "capture": COMPILED}
# Steps with nothing to act on in ltx-tui's stand-in modules: what each needs of LTX-2's
LTX2_ONLY = {"fast_norm": "fast_norm acts on LTX-2's DiT only", "capture": "capture acts on LTX-2's DiT only",
             "diffvae_layout": "diffvae.mode lays out LTX-2's DiffusionVideoDecoder (the na3d check tests the NA "
                               "backend on ltx-tui's blocks)"}


@dataclass(frozen=True)
class CheckSpec:
    name: str
    kind: str
    device: str
    params: dict


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # pass | fail | error | timeout | cancelled | not run
    seconds: float
    max_error: float | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_checks(plan: Plan) -> list[CheckSpec]:
    """One check per runtime step of `plan` that changes the model, plus NCCL for multi-GPU.

    `plan` must be resolved on this machine: a plan for another machine's capability cannot be
    checked here (`backends.machine.capability.Capability.source` says where it came from).
    """
    from backends.config.profile import to_data

    profile = to_data(plan.profile)
    device = first_device(plan.profile, plan.capability)
    names = {"diffvae_layout": lambda a: f"diffvae {a['mode']}",
             "na_backend": lambda a: f"na3d {a['backend']}",
             "dense_attention": lambda a: f"attention {a['name']}",
             "quantize": lambda a: f"linear {a['method']}",
             "offload": lambda a: f"offload {a['mode']} round trip",
             "compile": lambda a: f"compiled blocks ({a['mode']})",
             "fast_norm": lambda a: "one-pass norms (fast_norm)",
             "capture": lambda a: "captured block loop (eager blocks)"}
    effective = {d.option: d.effective for d in plan}
    runnable = [s for s in plan.steps if s.kind in names and not s.args.get("loader")]  # NVFP4: LTX-2's loader's
    specs = [CheckSpec(names[s.kind](s.args), s.kind, device,
                       {"profile": profile, "steps": [_step_data(x) for x in plan.steps if x is s or
                                                      (s.kind == "diffvae_layout" and x.kind == "na_backend")],
                        "bound": asdict(KIND_BOUNDS.get(s.kind) or step_bound(s.options, effective))})
             for s in runnable]
    if plan.profile.parallel.gpus > 1 and plan["parallel.gpus"].status is not Status.ERROR:
        devices = list(plan.profile.parallel.ordinals)
        specs.append(CheckSpec(f"nccl all-reduce x{len(devices)}", "nccl", device, {"devices": devices}))
    return specs


def _step_data(step: Step) -> dict:
    return {"kind": step.kind, "args": dict(step.args), "text": step.text, "options": list(step.options)}


def worker_command(spec: CheckSpec) -> list[str]:
    """The command line of the worker that runs `spec`."""
    return [sys.executable, "-m", "backends.smoke", json.dumps(asdict(spec))]


def run_check(spec: CheckSpec, timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None) -> CheckResult:
    """Run one check in a subprocess group; never raises, never waits past `timeout` (+ the kill)."""
    outcome = run_worker(worker_command(spec), timeout, cancel)
    if outcome.status != "done":
        return CheckResult(spec.name, outcome.status, outcome.seconds, None,
                           "cancelled" if outcome.status == "cancelled" else
                           f"no answer within {timeout:g} s (a first run imports and compiles, slowly on a CPU; "
                           "--timeout S gives each check longer)")
    row = outcome.last_json()
    if row is not None:
        return CheckResult(spec.name, row["status"], outcome.seconds, row.get("max_error"), row.get("message", ""))
    return CheckResult(spec.name, "error", outcome.seconds, None,
                       f"worker exited {outcome.returncode}: " + outcome.tail())


def run_all(specs: list[CheckSpec], timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
            on_result: Callable[[int, CheckResult], None] | None = None,
            on_start: Callable[[int], None] | None = None) -> list[CheckResult]:
    """Run the checks in order; after a cancel the rest are reported as not run."""
    results: list[CheckResult] = []
    for i, spec in enumerate(specs):
        if any(r.status == "cancelled" for r in results):
            result = CheckResult(spec.name, "not run", 0.0, None, "not run: cancelled before it started")
        else:
            if on_start:
                on_start(i)
            result = run_check(spec, timeout, cancel)
        results.append(result)
        if on_result:
            on_result(i, result)
    return results


WORDS = {"pass": "passed", "fail": "failed", "error": "error", "timeout": "timed out", "cancelled": "cancelled",
         "not run": "not run", "skipped": "skipped"}
# A check with nothing here to run on (ltx-core not importable for an LTX-2-only step): said, not failed.
NOT_FAILED = ("pass", "skipped")


def summary(results: list[CheckResult], total: int | None = None) -> str:
    """"2 passed, 1 cancelled, 1 not run": each way a check can end, counted on its own; checks of
    `total` without a result count as not run."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    if total is not None and total > len(results):
        counts["not run"] = counts.get("not run", 0) + total - len(results)
    return ", ".join(f"{counts[k]} {word}" for k, word in WORDS.items() if counts.get(k)) or "no checks"


# --- worker side ----------------------------------------------------------------------------

def _rel_err(out, ref) -> float:
    import torch

    def leaves(x):
        import torch.utils._pytree as pytree
        return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]

    a, b = leaves(out), leaves(ref)
    if len(a) != len(b):
        raise AssertionError(f"outputs differ in structure: {len(a)} vs {len(b)} tensors")
    worst = 0.0
    for x, y in zip(a, b):
        scale = max(y.float().abs().max().item(), 1e-6)
        worst = max(worst, (x.float() - y.float()).abs().max().item() / scale)
    return worst


class _Probe:
    """A probe model for one step: LTX-2's real modules when importable, else ltx-tui's."""

    def __init__(self, kind: str, device: str) -> None:
        import torch

        from backends.runtime import ltx2

        self.device = device
        self.dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.real = ltx2.import_ltx_core()[0] is not None
        decoder = kind in ("diffvae_layout", "na_backend")
        if self.real and decoder:
            self.model = ltx2.tiny_decoder()
            latent = ltx2.decoder_latent(self.model, frames=2, height=3, width=5)
            self.args = (latent.to(device, self.dtype),)
            self.label = "LTX-2 DiffusionVideoDecoder (tiny)"
        elif self.real:
            self.model = ltx2.tiny_transformer(layers=3)
            self.args = ltx2.transformer_inputs(tokens=23, device=device, dtype=self.dtype)
            self.label = "LTX-2 LTXModel (tiny, 3 blocks)"
        elif decoder:
            from backends.runtime.modules import na_stack

            torch.manual_seed(0)
            self.model = na_stack(2, 64, (3, 3, 3), head_dim=32)
            self.args = (torch.randn(1, 3, 5, 7, 64).to(device, self.dtype),)
            self.label = "ltx-tui NA blocks (LTX-2's NA protocol; ltx-core not importable)"
        else:
            from backends.runtime.modules import dense_stack

            torch.manual_seed(0)
            self.model = dense_stack(3, 64, head_dim=32)
            self.args = (torch.randn(2, 23, 64).to(device, self.dtype),)
            self.label = "ltx-tui dense blocks (LTX-2's DiT protocol; ltx-core not importable)"
        self.model = self.model.to(self.dtype).eval()

    def run(self, model, *, grad: bool = False):
        """One forward, under inference_mode (or recording gradients, to see it refused)."""
        import torch

        with torch.enable_grad() if grad else torch.inference_mode():
            if self.real and len(self.args) == 1:  # the decoder draws its own noise
                return model(*self.args, generator=torch.Generator(device=self.device).manual_seed(1))
            return model(*self.args)


def _check_step(kind: str, device: str, profile_data: dict, sent: list[dict], bound: dict
                ) -> tuple[float, float, str]:
    """Run the steps sent (the first is the one checked) on a probe model, as planned where the
    check was planned; a note says where this machine's own plan differs."""
    import copy

    import torch

    from backends.config.plan import plan_here
    from backends.config.profile import parse
    from backends.machine.capability import probe
    from backends.runtime.apply import apply_profile, find_blocks

    profile, _ = parse(profile_data)
    steps = tuple(Step(d["kind"], d["args"], d["text"], tuple(d["options"])) for d in sent)
    step, args = steps[0], steps[0].args
    plan = plan_here(profile, probe(), device)
    own = plan.step(kind)
    differs = "" if own is not None and dict(own.args) == dict(args) else \
        f" (note: this machine's plan now has {dict(own.args) if own else 'no'} {kind} step)"
    probe_model = _Probe(kind, device)
    if kind in LTX2_ONLY and not probe_model.real:
        raise CheckSkipped(f"not checked: {LTX2_ONLY[kind]}, and ltx-core is not importable here")
    model = probe_model.model
    reference = copy.deepcopy(model)
    if kind in ("diffvae_layout", "na_backend"):
        from backends.runtime.attention import NAFunction

        ref_na = "reference" if step.args.get("backend") == "eager_sdpa" else "eager_sdpa"
        if kind == "diffvae_layout" and args["mode"].startswith("chunked"):
            from backends.runtime.ltx2 import ChunkedCompile, apply_decoder_layout

            # the same layout, eager, with LTX-2's own MLP and det RoPE (combined: as built)
            apply_decoder_layout(reference, "chunked_eager", ChunkedCompile(fused_mlp=False, fused_det=False))
        for m in reference.modules():
            if hasattr(m, "kernel_size") and hasattr(m, "attention_function"):
                m.attention_function = NAFunction(ref_na)
    if kind == "dense_attention" and not probe_model.real:  # LTX-2's modules keep LTX-2's own attention
        from backends.runtime.dense_attention import DenseFunction

        for m in reference.modules():
            if hasattr(m, "heads") and hasattr(m, "attention_function") and not hasattr(m, "kernel_size"):
                m.attention_function = m.masked_attention_function = DenseFunction("sdpa_math")
    reference.to(device)
    ref = probe_model.run(reference)
    report = apply_profile(model, _only(plan, steps), device=device)
    first = probe_model.run(model)
    second = probe_model.run(model)  # a second forward: prefetch wrap-around, CUDA-graph replay
    err = max(_rel_err(first, ref), _rel_err(second, ref))
    if kind in ("na_backend", "diffvae_layout"):
        _refuses_grad(model, probe_model)
    changed = {c.option: len(c.modules) for c in report.changes if c.modules}
    if kind == "quantize" and not changed.get("transformer.quantization"):
        raise RuntimeError("no linear was replaced")
    if kind in ("compile", "offload") and not find_blocks(model)[1]:
        raise RuntimeError("the probe model has no blocks")
    if kind == "capture":
        _captured(report.loop_graphs, probe_model.label)
    if kind == "fast_norm" and device.startswith("cuda"):
        from backends.runtime import fast_norm

        ran, own = fast_norm.counts(model)
        if not ran:
            raise CheckFailed(f"the one-pass norm kernels never ran on {probe_model.label} ({own} calls took the "
                              f"blocks' own ops)")
    limit = bound["fp32"] if probe_model.dtype == torch.float32 else bound["half"]
    where = ", ".join(f"{k} in {n} module{'s' if n != 1 else ''}" for k, n in changed.items())
    health = report.compile_health()
    if health is not None and not health.compiled:  # timed or compared, eager code would pass as compiled
        raise CheckFailed(f"compiled, but {health} on {probe_model.label}")
    if health is not None:
        where += ("; " if where else "") + f"compile: {health}"
    return err, limit, f"on {probe_model.label}" + (f": {where}" if where else "") + differs


class CheckFailed(Exception):
    """The step ran but not as planned (e.g. compiled graphs ran eagerly): the check fails."""


class CheckSkipped(Exception):
    """Nothing here to check the step on: the check is reported as not run, with the reason."""


def _captured(graphs, label: str) -> None:
    """The loop graphs after a first call (eager, on static buffers) and a second (captured, replayed)."""
    if graphs is None:
        raise CheckFailed(f"no LTX-2 block loop was captured on {label}")
    if graphs.reason:
        raise CheckFailed(f"the block loop ran without a CUDA graph on {label}: {graphs.reason}")
    if not graphs.replays:
        raise CheckFailed(f"the block loop's graph was never replayed on {label}")


def _only(plan, steps):
    """`plan` running `steps` alone (a check's): an error of an option none of them realises stops
    nothing here (validation reports it; the check tests its own steps)."""
    import dataclasses

    covered = {o for s in steps for o in s.options}
    decisions = tuple(dataclasses.replace(d, status=Status.WARNING)
                      if d.status is Status.ERROR and d.option not in covered else d for d in plan.decisions)
    return dataclasses.replace(plan, steps=steps, decisions=decisions)


def _refuses_grad(model, probe_model) -> None:
    for p in model.parameters():
        p.requires_grad_(True)
    try:
        probe_model.run(model, grad=True)
    except RuntimeError as e:
        if "inference only" in str(e):
            return
        raise
    raise RuntimeError("a forward with gradients ran through a forward-only NA backend instead of being refused")


def _check_nccl(devices: list[int]) -> tuple[float, float, str]:
    import queue as queue_mod
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_rank, args=(r, devices, port, queue), daemon=True) for r in range(len(devices))]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 90
    errs = []
    try:
        for _ in procs:
            errs.append(queue.get(timeout=max(0.1, deadline - time.monotonic())))
    except queue_mod.Empty:
        raise RuntimeError(f"{len(devices) - len(errs)} rank(s) gave no answer within 90 s") from None
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return max(errs), 0.0, f"{len(devices)} ranks"


def _nccl_rank(rank: int, devices: list[int], port: int, queue) -> None:
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
    try:
        if kind == "nccl":
            err, bound, where = _check_nccl(params["devices"])
        else:
            err, bound, where = _check_step(kind, device, params["profile"], params["steps"], params["bound"])
    except CheckFailed as e:
        return {"status": "fail", "max_error": None, "message": str(e)}
    except CheckSkipped as e:
        return {"status": "skipped", "max_error": None, "message": str(e)}
    except Exception as e:  # the row says what broke
        return {"status": "error", "max_error": None, "message": f"{type(e).__name__}: {e}"}
    ok = err <= bound
    return {"status": "pass" if ok else "fail", "max_error": err,
            "message": f"max rel. error {err:.3g} {'<=' if ok else '>'} {bound:g} {where}"}


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))), flush=True)
