"""Runs tab: the ledger of `ltx-tui run` (newest first) and, below it, the selected run's stages
(time, a bar against the run's slowest stage, measured peak memory against the memory plan's
prediction) and the models it built.

The ledger is read by a thread worker (file I/O never runs on the event loop) when the tab opens
and on `R`; the widget only renders the snapshot it was handed, and a stale answer (an older read
finishing after a newer one) is dropped. Everything that comes from the ledger (modules, argv,
errors, paths) is shown literally, never as markup, with its control characters escaped
(`runs.displayed`: an ESC in a hand-edited record never reaches the terminal), and a hand-edited
record whose fields have the wrong types shows `?` in those cells instead of breaking the tab.
"""

from __future__ import annotations

import datetime
import shlex
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from backends.machine import runs
from backends.machine.text import printable
from backends.machine.textfile import FileProblem
from ltx_tui.widgets.wide_table import fill

HINT = "no runs yet: `ltx-tui run --profile P.toml -- ltx_pipelines.distilled ...` records one"
PIPELINES = "ltx_pipelines."  # the runs table shows LTX-2's pipeline modules without it
WIDE = 90  # from this width the runs table also shows when each run started
BAR = 10
STATUS_STYLE = {"ok": "green", "failed": "red", "not applied": "yellow", "interrupted": "yellow"}
STAGE_COLUMNS = ("stage", "s", "steps", "time", "peak GiB", "plan", "err")
MODEL_COLUMNS = ("model", "stage", "load s", "apply s", "applied")


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    """`x` formatted; blank when absent."""
    return "" if x is None else fmt.format(x)


def _seconds(x: float | None) -> str:
    return _num(x, "{:.1f}" if x is not None and x >= 100 else "{:.2f}")


def started(value: Any, wide: bool) -> str:
    """'2026-11-30 22:15' (UTC, as the run ids are) from the record's ISO time."""
    try:
        t = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)[:16]
    if t.tzinfo is not None:
        t = t.astimezone(datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M" if wide else "%m-%d %H:%M")


def error_text(stage: runs.StageRecord) -> Text:
    """The memory plan's error for this stage, coloured by size (blank without a prediction)."""
    err = stage.error_pct
    if err is None:
        return Text("")
    style = "green" if abs(err) <= 10 else "yellow" if abs(err) <= 25 else "red"
    return Text(f"{err:+.1f}%", style=style)


def steps_text(stage: runs.StageRecord) -> str:
    """Denoising: steps x mean step seconds ('8×1.23')."""
    steps = stage.step_seconds
    return f"{len(steps)}×{_seconds(sum(steps) / len(steps))}" if steps else ""


def bar(seconds: float, slowest: float) -> Text:
    if slowest <= 0:
        return Text("")
    n = max(1, round(BAR * seconds / slowest)) if seconds > 0 else 0
    return Text("█" * n + " " * (BAR - n), style="cyan")


class RunsPanel(Vertical):
    """The run ledger at `path` (None: the user data directory's `runs.jsonl`)."""

    BORDER_TITLE = "Runs"
    DEFAULT_CSS = """
    RunsPanel { border: round $primary 60%; border-title-color: $text; }
    RunsPanel #runs-status { height: auto; max-height: 3; padding: 0 1; }
    RunsPanel #runs-table { height: auto; max-height: 40%; }
    RunsPanel #runs-detail { height: 1fr; border-top: solid $primary 40%; }
    RunsPanel #runs-detail.-empty { display: none; }
    RunsPanel #run-summary, RunsPanel #run-argv { height: auto; padding: 0 1; }
    RunsPanel #stages-table, RunsPanel #models-table { height: auto; }
    RunsPanel #models-table { margin-top: 1; }
    """

    def __init__(self, path: Path | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.path = path
        self.ledger: runs.Ledger | None = None  # the snapshot on screen
        self.problem: str | None = None  # why the ledger could not be read
        self.shown: list[runs.RunRecord] = []  # the table's rows: newest first
        self._generation = 0
        self._wide: bool | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("the run ledger is read when this tab opens"), id="runs-status")
        yield DataTable(id="runs-table", cursor_type="row")
        with VerticalScroll(id="runs-detail", classes="-empty"):
            yield Static("", id="run-summary")
            for name in ("stages-table", "models-table"):
                table = DataTable(id=name, show_cursor=False, cursor_type="none")
                table.can_focus = False  # the scroll around them takes the keys
                yield table
            yield Static("", id="run-argv")

    # --- reading ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Read the ledger again in a thread; the tab shows what it has until the answer comes."""
        self._generation += 1
        if self.ledger is None and self.problem is None:
            self._status(Text("reading the run ledger…", style="dim"))
        self._read(self._generation)

    @work(thread=True, group="runs-ledger", exit_on_error=False)
    def _read(self, generation: int) -> None:
        result: runs.Ledger | str
        try:
            result = runs.load(self.path).displayed()  # control characters escaped, never sent to the terminal
        except FileProblem as e:
            result = f"cannot read the run ledger {self._where()}: {e}"
        except Exception as e:  # noqa: BLE001 - any failure is shown in the tab, never raised
            result = f"cannot read the run ledger {self._where()}: {type(e).__name__}: {e}"
        self.app.call_from_thread(self._loaded, generation, result)

    def _where(self) -> Path | str:
        try:
            return self.path if self.path is not None else runs.default_ledger()
        except Exception:  # noqa: BLE001
            return "(default location)"

    def _loaded(self, generation: int, result: runs.Ledger | str) -> None:
        if generation != self._generation:  # a newer read is on its way
            return
        if isinstance(result, str):
            self.ledger, self.problem = None, printable(result)
        else:
            self.ledger, self.problem = result, None
        self._render_ledger()

    # --- rendering -------------------------------------------------------------------------
    def _status(self, text: Text) -> None:
        self.query_one("#runs-status", Static).update(text)

    def on_resize(self) -> None:
        wide = self.size.width >= WIDE
        if wide != self._wide:
            self._wide = wide
            if self.ledger is not None:
                self._render_ledger()

    def _render_ledger(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        selected = self.selected()
        fill(table, (), [])
        self.shown = []
        if self.problem is not None:
            self._status(Text(self.problem, style="red"))
            self._show_run(None)
            return
        ledger = self.ledger
        if ledger is None:
            return
        skipped = f"; {ledger.skipped} skipped (not run records)" if ledger.skipped else ""
        where = printable(str(ledger.path))
        if not ledger.records:
            why = ledger.empty_reason()
            self._status(Text(printable(why) if why else f"{HINT} (ledger {where})", style="yellow" if why else ""))
            self._show_run(None)
            return
        part = f" (its newest {runs.size_text(runs.LEDGER_LIMIT)})" if ledger.partial else ""
        self._status(Text(f"{len(ledger.records)} run(s) in {where}{part}{skipped}; R reloads",
                          style="yellow" if skipped else ""))
        wide = bool(self._wide)
        columns = ("id", "started", "module", "status", "stage s", "GiB", "exit") if wide else \
            ("id", "module", "status", "stage s", "GiB", "exit")
        self.shown = list(reversed(ledger.records))  # newest first (the ledger holds them by start)
        rows = []
        for r in self.shown:
            cells = {
                "id": Text(str(r.id)),
                "started": Text(started(r.started, wide)),
                "module": Text(str(r.module).removeprefix(PIPELINES)),
                "status": Text(str(r.status), style=STATUS_STYLE.get(r.status, "")),
                "stage s": _seconds(r.gpu_seconds),
                "GiB": _num(r.peak_gib, "{:.1f}"),
                "exit": _num(r.exit, "{}"),
            }
            rows.append(tuple(cells[c] for c in columns))
        fill(table, columns, rows)  # row keys: indices into self.shown
        index = next((i for i, r in enumerate(self.shown) if selected is not None and r.id == selected.id), 0)
        table.move_cursor(row=index)
        self._show_run(self.shown[index])

    def selected(self) -> runs.RunRecord | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.shown or table.row_count == 0:
            return None
        return self.shown[min(table.cursor_row, len(self.shown) - 1)]

    @on(DataTable.RowHighlighted, "#runs-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None  # None: an empty table
        if key is not None and int(key) < len(self.shown):
            self._show_run(self.shown[int(key)])

    @on(DataTable.RowSelected, "#runs-table")
    def _selected(self) -> None:
        """enter: into the details (arrows scroll them; shift+tab comes back)."""
        self.query_one("#runs-detail").focus()

    def _show_run(self, r: runs.RunRecord | None) -> None:
        detail = self.query_one("#runs-detail", VerticalScroll)
        detail.set_class(r is None, "-empty")
        stages_table = self.query_one("#stages-table", DataTable)
        models_table = self.query_one("#models-table", DataTable)
        if r is None:
            fill(stages_table, (), [])
            fill(models_table, (), [])
            return
        self.query_one("#run-summary", Static).update(self.summary(r))
        stages = r.stages
        slowest = max((s.seconds for s in stages), default=0.0)
        fill(stages_table, STAGE_COLUMNS,
             [(Text(str(s.name)), _seconds(s.seconds), steps_text(s), bar(s.seconds, slowest),
               _num(s.peak_allocated_gib, "{:.1f}"), _num(s.predicted_gib, "{:.1f}"), error_text(s))
              for s in stages] or [(Text("no stages recorded", style="dim"),) + ("",) * (len(STAGE_COLUMNS) - 1)])
        models = r.models
        models_table.display = bool(models)
        fill(models_table, MODEL_COLUMNS,
             [(Text(str(m.model)), Text(str(m.stage)), _seconds(m.load_s), _seconds(m.apply_s),
               Text("yes", style="green") if m.applied else Text("no", style="yellow")) for m in models])
        self.query_one("#run-argv", Static).update(self.argv_text(r))

    @staticmethod
    def summary(r: runs.RunRecord) -> Text:
        """The selected run in a few lines: id, module, status, wall time, shape, device, profile, error."""
        shape = r.shape
        size = ("x".join(str(shape.get(k, "?")) for k in ("width", "height", "frames"))
                if shape else "")
        name = r.device.get("name") or ""
        text = Text()
        text.append(str(r.id), style="bold")
        text.append(f"  {r.module}  ")
        text.append(str(r.status), style=STATUS_STYLE.get(r.status, ""))
        text.append(f" (exit {r.exit})  wall {_seconds(r.wall_s)} s")
        for part in (size, str(name)):
            if part:
                text.append(f"  {part}")
        profile = r.profile.get("path")
        if profile:
            text.append(f"\nprofile {profile}")
        if r.error:
            text.append(f"\n{r.error}", style="red")
        return text

    @staticmethod
    def argv_text(r: runs.RunRecord) -> Text:
        argv = r.ltx_argv
        if not argv:
            return Text("")
        return Text(f"LTX-2 ran: {shlex.join(str(a) for a in argv)}", style="dim")
