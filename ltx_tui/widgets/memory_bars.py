"""Memory bars: the plan's peak per stage of the run (the Plan tab's shapes) against the GPU's free
memory, then the verdict (and its fix); a short terminal (`Screen.-short`) shows the verdict only."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from backends.config.memory import GIB, MemoryPlan

WIDTH = 24


class MemoryBars(Vertical):
    BORDER_TITLE = "Memory per stage"

    def compose(self) -> ComposeResult:
        yield Static(id="memory-stages", classes="empty")  # no line of its own until there is a plan
        yield Static(Text("waiting for the capability…", style="dim"), id="memory-verdict")

    @property
    def text(self) -> str:
        """What the bars say, as shown on a tall terminal."""
        return "\n".join(str(self.query_one(f"#memory-{n}", Static).render()) for n in ("stages", "verdict"))

    def show(self, plan: MemoryPlan | None) -> None:
        stages, verdict = self.query_one("#memory-stages", Static), self.query_one("#memory-verdict", Static)
        stages.set_class(plan is None, "empty")
        if plan is None:
            verdict.update(Text("waiting for the capability…", style="dim"))
            return
        top = max([s.peak_bytes for s in plan.stages] + [plan.free_bytes or 0])
        free = plan.free_bytes
        bars = Text()
        for s in plan.stages:
            n = max(1, round(WIDTH * s.peak_bytes / top))
            over = free is not None and s.peak_bytes > free
            bars.append(f"{s.stage:<16} {s.peak_bytes / GIB:5.1f} GiB ")
            bars.append("█" * n, style="red" if over else "green")
            bars.append("\n")
        if free is not None:
            bars.append(f"{'free':<16} {free / GIB:5.1f} GiB ")
            bars.append("│" * round(WIDTH * free / top), style="dim")
        bars.rstrip()
        stages.update(bars)
        text = Text(f"{plan.shapes.label}: {plan.verdict()}", style="red" if plan.fits is False else "")
        if plan.fits is False and plan.fixes:
            change, peak = plan.fixes[0]
            text.append(f"\nfix: {change} -> {peak / GIB:.1f} GiB")
        verdict.update(text)
