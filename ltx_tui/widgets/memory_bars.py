"""Memory bars: the plan's peak per stage of the run (the Plan tab's shapes) against the GPU's free memory."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backends.config.memory import GIB, MemoryPlan

WIDTH = 24


class MemoryBars(Static):
    BORDER_TITLE = "Memory per stage"

    def show(self, plan: MemoryPlan | None) -> None:
        if plan is None:
            self.update(Text("waiting for the capability…", style="dim"))
            return
        top = max([s.peak_bytes for s in plan.stages] + [plan.free_bytes or 0])
        free = plan.free_bytes
        text = Text()
        for s in plan.stages:
            n = max(1, round(WIDTH * s.peak_bytes / top))
            over = free is not None and s.peak_bytes > free
            text.append(f"{s.stage:<16} {s.peak_bytes / GIB:5.1f} GiB ")
            text.append("█" * n, style="red" if over else "green")
            text.append("\n")
        if free is not None:
            text.append(f"{'free':<16} {free / GIB:5.1f} GiB ")
            text.append("│" * round(WIDTH * free / top), style="dim")
            text.append("\n")
        text.append(f"{plan.shapes.label}: {plan.verdict()}", style="red" if plan.fits is False else "")
        if plan.fits is False and plan.fixes:
            change, peak = plan.fixes[0]
            text.append(f"\nfix: {change} -> {peak / GIB:.1f} GiB")
        self.update(text)
