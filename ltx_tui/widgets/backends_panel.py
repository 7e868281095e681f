"""Installed backends: each package and NATTEN kernel, available or not, and why."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.text import Text
from textual.widgets import Static

from backends.config.rules import natten_kernels
from backends.machine.capability import Capability


class Rows:
    """Lines of a head and a note: the note after the head where the width has room for it, else on
    the next line, indented (a reason never runs into the next column or starts at the edge); a row
    without a head is its note, indented."""

    def __init__(self) -> None:
        self.rows: list[tuple[Text, Text, int]] = []

    def add(self, head: Text, note: Text | None = None, indent: int = 4) -> None:
        self.rows.append((head, note or Text(), indent))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for head, note, indent in self.rows:
            if not head:
                yield Padding(note, (0, 0, 0, indent))
            elif not note or head.cell_len + 1 + note.cell_len <= options.max_width:
                yield Text.assemble(head, " " if note else "", note)
            else:
                yield head
                yield Padding(note, (0, 0, 0, indent))


def backends_text(cap: Capability) -> Rows:
    rows = Rows()
    t = cap.torch
    torch_line = f"torch {t.version}" + (f" CUDA {t.cuda}" if t.cuda else " (CPU build)") if t.available \
        else f"torch: {t.reason}"
    rows.add(Text(torch_line, style="bold"))
    if t.available and not t.cuda_available:
        rows.add(Text(), Text(t.cuda_reason or "", style="yellow"), indent=2)
    for p in cap.packages.values():
        mark, style = ("✓", "green") if p.available else ("✗", "red")
        head = Text.assemble((f"{mark} ", style), f"{p.name:<20}{(p.version or ''):<10}")
        if not p.available:
            rows.add(head, Text(p.reason or "", style="dim"))
        elif p.name == "natten":
            rows.add(head, Text("libnatten" if p.details.get("has_libnatten") else "no libnatten", style="dim"))
        else:
            rows.add(head)
        for kernel, avail in (natten_kernels(cap).items() if p.name == "natten" and p.available else ()):
            ok = avail.available
            head = Text.assemble((f"    {'✓' if ok else '✗'} ", "green" if ok else "red"), f"{kernel:<14}")
            rows.add(head, Text("" if ok else avail.reason or "", style="dim"), indent=8)
    rows.add(Text("SDPA: " + "  ".join(f"{n} {'✓' if a.available else '✗'}" for n, a in cap.sdpa.items())))
    return rows


class BackendsPanel(Static):
    BORDER_TITLE = "Backends"

    def show(self, cap: Capability | None) -> None:
        self.update(Text("probing packages…", style="dim") if cap is None else backends_text(cap))
