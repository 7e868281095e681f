"""Smoke-test panel: progress and a row per check (the running one counting its seconds against
the timeout); rows stay after a run or a cancel."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, ProgressBar, Static
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from backends.smoke import NOT_FAILED, CheckResult, CheckSpec, summary
from ltx_tui.widgets.wide_table import WideTable

COLUMNS = ("check", "status", "seconds", "max error", "message")
STYLE = {"pass": "green", "fail": "red", "error": "red", "timeout": "red", "cancelled": "yellow", "running": "cyan",
         "queued": "dim", "not run": "dim", "skipped": "dim"}


class SmokePanel(Vertical):
    BORDER_TITLE = "Smoke test"
    TICK_S = 1.0  # how often the running check's seconds are updated

    def on_mount(self) -> None:
        self._clock = self.set_interval(self.TICK_S, self._tick, pause=True)
        self._clocked: tuple[int, float] | None = None  # the running check: (row, when it started)
        self.timeout: float | None = None

    def compose(self) -> ComposeResult:
        yield Static("press s to run the smoke checks for the current selection", id="smoke-status")
        yield ProgressBar(total=1, show_eta=False, id="smoke-progress")
        table = WideTable(id="smoke-table", cursor_type="row", fixed_columns=1)  # the check stays in sight
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield Static(id="smoke-detail")  # the highlighted check's whole message (its column is cut at 80 wide)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail(str(event.row_key.value))

    def _detail(self, key: str) -> None:
        table, detail = self.query_one(DataTable), self.query_one("#smoke-detail", Static)
        try:
            row = table.get_row(key)
        except RowDoesNotExist:
            row = None
        message = str(row[COLUMNS.index("message")]) if row else ""
        detail.update(Text(f"{row[0]}: {row[1]}: {message}") if message else "")
        detail.display = bool(message)

    def preparing(self, message: str) -> None:
        """Said at once when s is pressed, while the checks are being planned (a probe takes seconds)."""
        self._stop_clock()
        self.query_one(DataTable).clear()
        self.query_one("#smoke-detail").display = False
        self.query_one(ProgressBar).update(total=None, progress=0)  # indeterminate until the checks are known
        self.query_one("#smoke-status", Static).update(Text(f"{message} — press c to cancel", style="cyan"))

    def start(self, specs: list[CheckSpec], note: str = "", timeout: float | None = None) -> None:
        """Rows for `specs`; `note` says where the checks run when that is not the profile's machine;
        `timeout`: the seconds each check may take (shown beside the running one's)."""
        self.timeout = timeout
        self._stop_clock()
        table = self.query_one(DataTable)
        table.clear()
        self.query_one("#smoke-detail").display = False
        for i, spec in enumerate(specs):
            table.add_row(Text(spec.name), Text("queued", style=STYLE["queued"]), "", "", "", key=str(i))
        bar = self.query_one(ProgressBar)
        bar.update(total=max(len(specs), 1), progress=0)
        self.note = note
        self.query_one("#smoke-status", Static).update(Text(
            (f"running {len(specs)} check(s), each in a subprocess — press c to cancel" if specs
             else "nothing to check: every option in error or unused") + note))

    def running(self, index: int) -> None:
        self.query_one(DataTable).update_cell(str(index), "status", Text("running", style=STYLE["running"]),
                                              update_width=True)
        self._clocked = (index, time.monotonic())
        self._tick()
        self._clock.resume()

    def _tick(self) -> None:
        if self._clocked is None:
            return
        index, t0 = self._clocked
        of = f" of {self.timeout:g} s" if self.timeout else ""
        try:
            self.query_one(DataTable).update_cell(str(index), "seconds", f"{time.monotonic() - t0:.0f} s{of}",
                                                  update_width=True)
        except CellDoesNotExist:  # the table was cleared under it
            self._stop_clock()

    def _stop_clock(self, index: int | None = None, blank: bool = False) -> None:
        """Stop counting (the row `index`'s, or whichever); `blank`: clear the seconds it showed."""
        if self._clocked is not None and index in (None, self._clocked[0]):
            row, self._clocked = self._clocked[0], None
            self._clock.pause()
            if blank:
                try:
                    self.query_one(DataTable).update_cell(str(row), "seconds", "", update_width=True)
                except CellDoesNotExist:
                    pass

    def failed(self, message: str) -> None:
        """The run broke off (its runner raised): the clock stops, the status line says why."""
        self._stop_clock(blank=True)
        self.query_one("#smoke-status", Static).update(Text(message, style="red"))

    def result(self, index: int, row: CheckResult) -> None:
        self._stop_clock(index)
        table = self.query_one(DataTable)
        err = "-" if row.max_error is None else f"{row.max_error:.2e}"
        ran = row.status != "not run"
        for col, value in zip(COLUMNS[1:], (Text(row.status, style=STYLE.get(row.status, "")),
                                            f"{row.seconds:.2f}" if ran else "-", err,
                                            Text(" ".join(row.message.split())))):  # one line
            table.update_cell(str(index), col, value, update_width=True)
        if table.cursor_row == index:
            self._detail(str(index))
        if ran and row.status != "cancelled":  # the bar counts the checks that ran to their end
            self.query_one(ProgressBar).advance(1)

    def finish(self, results: list[CheckResult], total: int) -> None:
        table = self.query_one(DataTable)
        self._stop_clock(blank=True)  # a check still counting never reported
        for index in range(len(results), total):  # rows the run never reached
            table.update_cell(str(index), "status", Text("not run", style=STYLE["not run"]), update_width=True)
        bad = any(r.status in ("fail", "error", "timeout") for r in results)
        style = "red" if bad else "yellow" if len(results) < total or any(r.status not in NOT_FAILED for r in results) \
            else "green"
        self.query_one("#smoke-status", Static).update(Text(summary(results, total) + getattr(self, "note", ""),
                                                            style=style))
