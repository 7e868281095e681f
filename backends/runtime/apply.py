"""Apply a profile: environment (`apply_env`) and model (`apply_profile`), with a report.

`apply_profile` resolves the profile against the live capability (as seen from the model's
device), refuses options that cannot run with the rule's message, then installs: the NA
backend on every module with `attention_function` and `kernel_size`, the dense attention on
every module with `attention_function` and no `kernel_size`, quantized linears,
weight streaming for offload, and torch.compile per block. Every option appears in the
report, including those the runtime leaves to the LTX-2 pipeline.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import MutableMapping

import torch
import torch.nn as nn

from backends.runtime.attention import implementation
from backends.runtime.dense_attention import attention_function
from backends.probe.capability import Capability, probe
from backends.runtime.offload import BlockStreamer
from backends.config.options import OffloadMode, Profile, Quantization
from backends.runtime.quant import quantize_linears
from backends.config.rules import Decision, Status, resolve

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
# Options apply_profile leaves to the LTX-2 pipeline / launcher, and why.
PIPELINE_OPTIONS = {
    "diffvae.mode": "decode chunking is the pipeline's (--diffvae-optimization; see --ltx-args)",
    "transformer.sparse_attention": "sparse attention is TurboDiffusion's; ltx-tui's runtime does not install it",
    "transformer.sla_topk": "used by TurboDiffusion's sparse attention only",
    "transformer.fast_norm": "fused norms are TurboDiffusion's; ltx-tui's runtime does not install them",
    "memory.max_batch_size": "batching is the pipeline's (--max-batch-size)",
    "parallel.gpus": "multi-GPU launch is the pipeline's (*_mgpu modules)",
    "parallel.devices": "device selection is the launcher's (CUDA_VISIBLE_DEVICES)",
}


class ProfileNotRunnable(RuntimeError):
    """Some option of the profile cannot run here; the message lists each with its remedy."""


@dataclass(frozen=True)
class Change:
    option: str
    action: str
    detail: str
    modules: tuple[str, ...] = ()


@dataclass
class ApplyReport:
    changes: list[Change] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    streamer: BlockStreamer | None = None

    def add(self, option: str, action: str, detail: str, modules=()) -> None:
        self.changes.append(Change(option, action, detail, tuple(modules)))

    def change(self, option: str) -> Change:
        """What was done for `option` (every option of the vocabulary has an entry)."""
        return next(c for c in self.changes if c.option == option)

    def __str__(self) -> str:
        width = max((len(c.option) for c in self.changes), default=10)
        lines = []
        for c in self.changes:
            where = f" [{len(c.modules)} module(s): {', '.join(c.modules[:4])}{', ...' if len(c.modules) > 4 else ''}]" \
                if c.modules else ""
            lines.append(f"{c.option:<{width}}  {c.action:<12} {c.detail}{where}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def apply_env(profile: Profile, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the allocator environment for `profile`; returns warnings (e.g. CUDA already initialised)."""
    environ = os.environ if environ is None else environ
    warnings = []
    if profile.memory.expandable_segments:
        parts = [p for p in environ.get(ALLOC_CONF, "").split(",") if p and not p.startswith("expandable_segments")]
        environ[ALLOC_CONF] = ",".join(parts + ["expandable_segments:True"])
        torch_mod = sys.modules.get("torch")
        if torch_mod is not None and torch_mod.cuda.is_initialized():
            warnings.append(f"CUDA is already initialised: {ALLOC_CONF}=expandable_segments:True takes effect only "
                            "in a new process; call backends.apply_env(profile) before any CUDA work")
    return warnings


def find_blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    """The model's repeated blocks: the first ModuleList whose name ends in 'blocks', else the model."""
    for name, child in model.named_modules():
        if isinstance(child, nn.ModuleList) and name.split(".")[-1].endswith("blocks"):
            return name, list(child)
    return "", [model]


def _install_attention(model: nn.Module, make_function, *, neighborhood: bool) -> list[str]:
    """Set `attention_function` on the modules of one protocol; returns their names.

    Neighborhood modules also carry `kernel_size`; dense ones do not. `make_function` is
    called only when some module needs it, so a missing package fails only then.
    """
    names = [n for n, m in model.named_modules()
             if hasattr(m, "attention_function") and hasattr(m, "kernel_size") == neighborhood]
    if names:
        function = make_function()
        for name in names:
            model.get_submodule(name).attention_function = function
    return names


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    return torch.device("cpu")


def _na_backend(decisions: dict[str, Decision]) -> str:
    na = decisions["diffvae.na_backend"].effective
    if na == "natten":
        return f"natten:{decisions['diffvae.natten_kernel'].effective}"
    if na == "blackwell_dsl":
        raise ProfileNotRunnable("diffvae.na_backend blackwell_dsl: ltx-tui's runtime does not drive the Blackwell "
                                 "DSL kernels; run it through ltx-pipelines (--ltx-args)")
    return na


def compile_kwargs(profile: Profile) -> dict:
    """torch.compile keyword arguments for the profile's [compile] table."""
    c = profile.compile
    kwargs: dict = {"backend": c.backend.value, "fullgraph": c.fullgraph,
                    "dynamic": {"auto": None, "true": True, "false": False}[c.dynamic.value]}
    if c.backend.value == "inductor":
        if c.mode.value != "default":
            kwargs["mode"] = c.mode.value
        elif c.capture:
            kwargs["options"] = {"triton.cudagraphs": True}
    return kwargs


def apply_profile(model: nn.Module, profile: Profile, capability: Capability | None = None, *,
                  device: torch.device | str | None = None, include: str | None = None) -> ApplyReport:
    """Configure `model` in place as `profile` says; returns what was done.

    `device`: where the model runs (default: where its parameters are). With offload, the
    blocks' weights go to host memory and stream to `device`; the rest moves to `device`.
    `include`: a glob over module names narrowing which nn.Linear are quantized.
    """
    device = torch.device(device) if device is not None else _model_device(model)
    cap = (capability or probe()).for_device(device)
    decisions = {d.option: d for d in resolve(profile, cap)}
    report = ApplyReport(decisions=list(decisions.values()))
    blocking = [d for d in decisions.values() if d.status is Status.ERROR and d.option not in PIPELINE_OPTIONS]
    if blocking:
        raise ProfileNotRunnable("the profile cannot run here:\n" + "\n".join(
            f"  {d.option} = {d.requested}: {d.message} (fix: {d.remedy})" for d in blocking))

    report.warnings += apply_env(profile)
    report.add("memory.expandable_segments", "set" if profile.memory.expandable_segments else "kept",
               f"{ALLOC_CONF}={os.environ.get(ALLOC_CONF, '')!r}")

    backend = _na_backend(decisions)
    na_modules = _install_attention(model, lambda: implementation(backend), neighborhood=True)
    report.add("diffvae.na_backend", "installed" if na_modules else "no target",
               f"na3d backend {backend} ({decisions['diffvae.na_backend'].chain[-1].reason})"
               if na_modules else "no module with attention_function and kernel_size", na_modules)
    kernel = decisions["diffvae.natten_kernel"].effective
    report.add("diffvae.natten_kernel", "installed" if kernel and na_modules else "unused",
               kernel or decisions["diffvae.natten_kernel"].chain[-1].reason)

    attention = decisions["transformer.attention"].effective
    dense_modules = _install_attention(model, lambda: attention_function(attention), neighborhood=False)
    report.add("transformer.attention", "installed" if dense_modules else "no target",
               f"{attention} ({decisions['transformer.attention'].chain[-1].reason})" if dense_modules
               else "no module with attention_function and no kernel_size", dense_modules)

    q = profile.transformer.quantization
    if profile.parallel.gpus > 1 and q is not Quantization.FP8_CAST:
        report.warnings.append(f"transformer.quantization {q}: multi-GPU LTX-2 runs fp8-cast; applied {q} to this model")
    replaced = quantize_linears(model, q.value, include)
    report.add("transformer.quantization", "replaced" if replaced else "kept",
               f"{q} linears" if replaced else ("weights unchanged" if q is Quantization.NONE
                                                 else f"no nn.Linear matched {include!r}"), replaced)

    blocks_name, blocks = find_blocks(model)
    where = blocks_name or "the whole model"
    o = profile.offload
    if o.mode is not OffloadMode.NONE:
        block_params = {id(p) for b in blocks for p in b.parameters()} | {id(b_) for b in blocks for b_ in b.buffers()}
        streamer = BlockStreamer(blocks, device, gpu_slots=o.gpu_slots, prefetch=o.prefetch, mode=o.mode.value)
        for t in list(model.parameters()) + list(model.buffers()):
            if id(t) not in block_params:
                t.data = t.data.to(device)
        report.streamer = streamer
        report.add("offload.mode", "offloaded",
                   f"{len(blocks)} blocks of {where} ({streamer.streamed_bytes / 2**20:.0f} MiB) in "
                   f"{'pinned CPU memory' if o.mode is OffloadMode.CPU else 'a memory-mapped file'}, streamed to {device}")
        report.add("offload.gpu_slots", "set", f"{streamer.gpu_slots} slots of {streamer.slot_bytes / 2**20:.0f} MiB")
        report.add("offload.prefetch", "set", f"{streamer.prefetch} block(s) ahead"
                   + (f" (asked {o.prefetch}; at most gpu_slots - 1)" if streamer.prefetch != o.prefetch else ""))
    else:
        model.to(device)
        report.add("offload.mode", "kept", f"weights resident on {device}")

    c = profile.compile
    if c.enabled:
        kwargs = compile_kwargs(profile)
        for block in blocks:
            block.forward = torch.compile(block.forward, **kwargs)
        names = [f"{blocks_name}.{i}" for i in range(len(blocks))] if blocks_name else [type(model).__name__]
        report.add("compile.enabled", "compiled", f"torch.compile per block of {where}: "
                   + ", ".join(f"{k}={v}" for k, v in kwargs.items()), names)
    else:
        report.add("compile.enabled", "kept", "eager")

    for option, why in PIPELINE_OPTIONS.items():
        d = decisions[option]
        report.add(option, "pipeline", f"{d.requested}: {why}")
    return report
