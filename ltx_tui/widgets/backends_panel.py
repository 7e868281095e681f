"""Installed backends: each package and NATTEN kernel, available or not, and why."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backends.config.rules import natten_kernels
from backends.machine.capability import Capability


def backends_text(cap: Capability) -> Text:
    text = Text()
    t = cap.torch
    torch_line = f"torch {t.version}" + (f" CUDA {t.cuda}" if t.cuda else " (CPU build)") if t.available \
        else f"torch: {t.reason}"
    text.append(torch_line + "\n", style="bold")
    if t.available and not t.cuda_available:
        text.append(f"  {t.cuda_reason}\n", style="yellow")
    for p in cap.packages.values():
        mark, style = ("✓", "green") if p.available else ("✗", "red")
        text.append(f"{mark} ", style=style)
        text.append(f"{p.name:<20}{(p.version or ''):<10}")
        if not p.available:
            text.append(f" {p.reason}", style="dim")
        elif p.name == "natten":
            text.append(" libnatten" if p.details.get("has_libnatten") else " no libnatten", style="dim")
        text.append("\n")
        for kernel, avail in (natten_kernels(cap).items() if p.name == "natten" and p.available else ()):
            ok = avail.available
            text.append(f"    {'✓' if ok else '✗'} ", style="green" if ok else "red")
            text.append(f"{kernel:<14}")
            if not ok:
                text.append(f" {avail.reason}", style="dim")
            text.append("\n")
    sdpa = "  ".join(f"{n} {'✓' if a.available else '✗'}" for n, a in cap.sdpa.items())
    text.append(f"SDPA: {sdpa}")
    return text


class BackendsPanel(Static):
    BORDER_TITLE = "Backends"

    def show(self, cap: Capability | None) -> None:
        self.update(Text("probing packages…", style="dim") if cap is None else backends_text(cap))
