"""Live GPU panel: what the options are validated for, then a row per GPU of this machine with
memory bar, sparklines of the last minute and the processes holding its memory."""

from __future__ import annotations

from collections import deque
from typing import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from backends.machine.capability import GPU, Capability, NvmlInfo
from backends.machine.nvml import GpuProcess
from ltx_tui.widgets.target import NO_GPU_HINT, target_text

HISTORY = 60  # samples, about one a second
BARS = " ▁▂▃▄▅▆▇█"
SHOWN_PROCESSES = 8
# NVML index -> (the processes on that GPU or None, why NVML could not list them)
Processes = Mapping[int, tuple[tuple[GpuProcess, ...] | None, str | None]]


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


def processes_text(procs: tuple[GpuProcess, ...] | None, error: str | None) -> Text:
    """The processes holding the GPU's memory, as nvitop lists them: pid, type, memory, command line
    (literal; app.tcss cuts it at the panel's edge); or why NVML could not list them."""
    text = Text()
    if procs is None:
        return text.append(f"processes: {error or 'not read'}", style="yellow")
    if not procs:
        text.append("no processes on this GPU", style="dim")
    else:
        text.append(f"{'pid':>8} type {'memory':>9}  command", style="dim")
    for p in procs[:SHOWN_PROCESSES]:
        mem = f"{p.used_memory / 1024**3:5.1f} GiB" if p.used_memory is not None else "      n/a"
        text.append(f"\n{p.pid:>8} {p.kind:<4} {mem:>9}  ")
        text.append(p.name, style="bold" if not p.name.startswith("?") else "dim")
    if len(procs) > SHOWN_PROCESSES:
        text.append(f"\n… {len(procs) - SHOWN_PROCESSES} more", style="dim")
    if error:
        text.append(f"\n{error}", style="yellow")
    return text


class GpuRow(Vertical):
    """One GPU: its readings, two sparklines of the last minute (utilisation, memory %), its processes."""

    def __init__(self, index: int) -> None:
        super().__init__(classes="gpu-row")
        self.index = index
        self.util: deque[float] = deque(maxlen=HISTORY)
        self.mem: deque[float] = deque(maxlen=HISTORY)

    def compose(self) -> ComposeResult:
        yield Static(classes="gpu-info")
        yield Static(classes="gpu-spark")
        yield Static(classes="gpu-procs")

    def show(self, gpu: GPU, procs: tuple[tuple[GpuProcess, ...] | None, str | None]) -> None:
        self.util.append(float(gpu.utilization or 0))
        used, total = gpu.memory_used or 0, gpu.memory_total or 0
        self.mem.append(100.0 * used / total if total else 0.0)
        self.query_one(".gpu-info", Static).update(gpu_text(gpu))
        self.query_one(".gpu-procs", Static).update(processes_text(*procs))
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
    """What the options are validated for, and this machine's GPUs from NVML, refreshed by the app; a
    notice when there is no driver or GPU."""

    BORDER_TITLE = "GPUs"
    can_focus = False  # display only; keyboard focus stays with the options
    live = True  # the options are validated for this machine (not a preset or a file)

    def compose(self) -> ComposeResult:
        yield Static(classes="gpu-target")
        yield Static("reading NVML…", classes="gpu-notice")
        yield Vertical(classes="gpu-rows")

    def show_target(self, cap: Capability | None) -> None:
        """Say what the options are validated for (None: this machine, still being probed)."""
        self.live = cap is None or cap.source == "live"
        text = Text("Validating for ", style="bold").append(target_text(cap))
        if cap is not None and self.live and not cap.gpus:
            text.append(f"\n{NO_GPU_HINT}", style="dim")
        self.query_one(".gpu-target", Static).update(text)

    def show(self, info: NvmlInfo, gpus: tuple[GPU, ...], processes: Processes) -> None:
        notice = self.query_one(".gpu-notice", Static)
        if not info.available or not gpus:
            why = info.reason if not info.available else "NVML sees no GPU"
            notice.update(Text(f"No GPU on this machine: {why}", style="yellow"))
        else:
            here = "" if self.live else "This machine: "
            notice.update(Text(f"{here}driver {info.driver_version or '?'}  CUDA {info.cuda_driver_version or '?'}",
                               style="dim"))
        rows = self.query_one(".gpu-rows", Vertical)
        existing = list(rows.query(GpuRow))
        readings = [(g, processes.get(g.nvml_index, (None, "not read"))) for g in gpus]
        if [r.index for r in existing] != [g.index for g in gpus]:
            rows.remove_children()
            existing = [GpuRow(g.index) for g in gpus]
            rows.mount_all(existing)
            self.call_after_refresh(self._fill, existing, readings)
        else:
            self._fill(existing, readings)

    @staticmethod
    def _fill(rows: list[GpuRow], readings) -> None:
        for row, (gpu, procs) in zip(rows, readings):
            row.show(gpu, procs)

    def show_error(self, message: str) -> None:
        notice = self.query_one(".gpu-notice", Static)
        notice.update(Text(message, style="red"))
