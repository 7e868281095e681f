"""Live GPU panel: a row per GPU with memory bar and sparklines of the last minute."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from backends.machine.capability import GPU, NvmlInfo

HISTORY = 60  # samples, about one a second
BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values, width: int = HISTORY) -> Text:
    """Percentages (0-100, fixed scale) as a row of bars, newest on the right."""
    cells = [BARS[min(8, max(1 if v > 0 else 0, round(v / 100 * 8)))] for v in list(values)[-width:]]
    return Text("".join(cells).rjust(width, " "), style="cyan")


def _bar(used: int | None, total: int | None, width: int = 12) -> Text:
    if not used or not total:
        return Text("-" * width, style="dim")
    filled = round(width * used / total)
    style = "red" if used / total > 0.9 else "yellow" if used / total > 0.7 else "green"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def gpu_text(g: GPU) -> Text:
    """One GPU's readings as text; unreadable fields show as '-' with the error after."""
    gib = 1024**3
    mem = f"{g.memory_used / gib:5.1f}/{g.memory_total / gib:5.1f} GiB" if g.memory_used is not None and g.memory_total \
        else "  -/- GiB"
    text = Text.assemble((f"[{g.index}] ", "bold"), (g.name, "bold"), f"  {g.sm}\n", "mem ", _bar(g.memory_used, g.memory_total),
                         f" {mem}\n")
    parts = [f"util {g.utilization if g.utilization is not None else '-':>3}%",
             f"{g.temperature if g.temperature is not None else '-'}°C",
             f"{g.power_draw:.0f}/{g.power_limit or 0:.0f} W" if g.power_draw is not None else "- W",
             f"{g.sm_clock if g.sm_clock is not None else '-'}/{g.mem_clock if g.mem_clock is not None else '-'} MHz"]
    text.append("  ".join(parts))
    for key, err in g.errors.items():
        text.append(f"\n{key}: {err}", style="yellow")
    return text


class GpuRow(Vertical):
    """One GPU: its readings and two sparklines of the last minute (utilisation, memory %)."""

    def __init__(self, index: int) -> None:
        super().__init__(classes="gpu-row")
        self.index = index
        self.util: deque[float] = deque(maxlen=HISTORY)
        self.mem: deque[float] = deque(maxlen=HISTORY)

    def compose(self) -> ComposeResult:
        yield Static(classes="gpu-info")
        yield Static(classes="gpu-spark")

    def show(self, gpu: GPU) -> None:
        self.util.append(float(gpu.utilization or 0))
        used, total = gpu.memory_used or 0, gpu.memory_total or 0
        self.mem.append(100.0 * used / total if total else 0.0)
        self.query_one(".gpu-info", Static).update(gpu_text(gpu))
        self._draw_sparklines()

    def _draw_sparklines(self) -> None:
        width = max(8, (self.size.width - 12) // 2) if self.size.width else 24
        self.query_one(".gpu-spark", Static).update(
            Text("util ") + sparkline(self.util, width) + Text("  mem ") + sparkline(self.mem, width))

    def on_resize(self) -> None:
        """The sparklines fill the row's width, whenever it is known (after the first reading too)."""
        if self.util:
            self._draw_sparklines()


class GpuPanel(VerticalScroll):
    """GPUs from NVML, refreshed by the app; a notice when there is no driver or GPU."""

    BORDER_TITLE = "GPUs"
    can_focus = False  # display only; keyboard focus stays with the options
    def compose(self) -> ComposeResult:
        yield Static("reading NVML…", classes="gpu-notice")
        yield Vertical(classes="gpu-rows")

    def show(self, info: NvmlInfo, gpus: tuple[GPU, ...], capability_source: str | None) -> None:
        notice = self.query_one(".gpu-notice", Static)
        if not info.available or not gpus:
            why = info.reason if not info.available else "NVML sees no GPU"
            authoring = f"\nvalidating against capability {capability_source}" \
                if capability_source and capability_source != "live" else ""
            notice.update(Text(f"No GPU here: {why}{authoring}", style="yellow"))
            notice.display = True
        else:
            driver = f"driver {info.driver_version or '?'}  CUDA {info.cuda_driver_version or '?'}"
            if capability_source and capability_source != "live":
                driver += f"\nvalidating against capability {capability_source}"
            notice.update(Text(driver, style="dim"))
        rows = self.query_one(".gpu-rows", Vertical)
        existing = list(rows.query(GpuRow))
        if [r.index for r in existing] != [g.index for g in gpus]:
            rows.remove_children()
            existing = [GpuRow(g.index) for g in gpus]
            rows.mount_all(existing)
            self.call_after_refresh(self._fill, existing, gpus)
        else:
            self._fill(existing, gpus)

    @staticmethod
    def _fill(rows: list[GpuRow], gpus: tuple[GPU, ...]) -> None:
        for row, gpu in zip(rows, gpus):
            row.show(gpu)

    def show_error(self, message: str) -> None:
        notice = self.query_one(".gpu-notice", Static)
        notice.update(Text(message, style="red"))
        notice.display = True
