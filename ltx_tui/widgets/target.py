"""What the options are validated for, in words: a preset, a capability file, or this machine's GPUs."""

from __future__ import annotations

from collections import Counter
from pathlib import PurePath

from backends.machine.capability import GPU, Capability
from backends.machine.presets import PRESETS

GIB = 1024**3
NO_GPU_HINT = ("Options that need CUDA show errors. To validate for a GPU box instead: --capability ID (a preset: "
               f"{', '.join(p for p in PRESETS if PRESETS[p].gpu)}; h100x8 for eight) or --capability FILE "
               "(saved on that box with ltx-tui --check --json).")


def describe_gpus(gpus: tuple[GPU, ...]) -> str:
    """'NVIDIA H200 (SM 9.0, 141 GiB)', '2× NVIDIA H200 (SM 9.0, 141 GiB each)', models joined by commas."""
    models = Counter((g.name, g.sm, f"{g.memory_total / GIB:.0f}" if g.memory_total else "?") for g in gpus)
    return ", ".join(f"{f'{n}× ' if n > 1 else ''}{name} ({sm}, {gib} GiB{' each' if n > 1 else ''})"
                     for (name, sm, gib), n in models.items())


def short_gpus(gpus: tuple[GPU, ...]) -> str:
    """'H200', 'H200 ×2', 'H200 + L40S': the models without the vendor, for the title."""
    models = Counter(g.name.removeprefix("NVIDIA ") for g in gpus)
    return " + ".join(f"{name} ×{n}" if n > 1 else name for name, n in models.items())


def _kind(cap: Capability) -> tuple[str, str] | None:
    """(short, long) name of a capability that is not this machine; None for the live one."""
    kind, _, name = cap.source.partition(":")
    if kind == "preset":
        return f"preset {name}", f"preset {name}"
    if kind == "file":
        return f"file {PurePath(name).name}", f"capability file {name}"
    return None if cap.source == "live" else (cap.source, cap.source)


def target_title(cap: Capability | None, nvml_gpus: tuple[GPU, ...] = ()) -> str:
    """The title's few words: 'preset h200', 'file cap.json', 'H200 ×2 here', 'no GPU here'
    (`nvml_gpus`: this machine's GPUs as NVML sees them, while the capability is being probed)."""
    if cap is not None and (other := _kind(cap)):
        return other[0]
    gpus = cap.gpus if cap is not None else nvml_gpus
    if gpus:
        return f"{short_gpus(gpus)} here"
    return "no GPU here" if cap is not None else "this machine"


def target_text(cap: Capability | None) -> str:
    """What the options are validated for, in one line: 'preset h200: NVIDIA H200 (SM 9.0, 141 GiB) — not
    this machine', 'this machine: 2× NVIDIA H200 (...)', 'this machine: no GPU, CPU only (why)'."""
    if cap is None:
        return "this machine (probing torch and CUDA…)"
    if other := _kind(cap):
        return f"{other[1]}: {describe_gpus(cap.gpus) or 'no GPU'} — not this machine"
    if cap.gpus:
        no_cuda = "" if cap.cuda else f", but torch cannot use them ({cap.torch.cuda_reason or cap.torch.reason})"
        return f"this machine: {describe_gpus(cap.gpus)}{no_cuda}"
    why = cap.torch.cuda_reason or cap.nvml.reason or "no CUDA device"
    return f"this machine: no GPU, CPU only ({why})"
