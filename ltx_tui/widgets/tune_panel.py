"""Tune panel: progress, a row per candidate as it finishes, then the table of all of them: each
time as a bar against the other values of its option, and for a value whose first call compiles
that call's seconds (cold, and from the warm compile cache); rows stay after a run or a cancel."""

from __future__ import annotations

import math
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, ProgressBar, Static

from backends.config.run_length import run_calls
from backends.machine.tuned import RUNNING, Candidate, Tuned
from ltx_tui.widgets.wide_table import WideTable, fill

COLUMNS = ("option", "value", "bar", "run ms", "status", "max error", "first s", "cached s", "reason")
LEGEND = ("run ms: the value's cost in the run (a decode, or a denoising step), lower is faster; bar: against "
          "its option's slowest · first s / cached s: a new process's first call, compile included, cold / "
          "from the compile cache · bold: chosen")
BAR = 16
REASON_CELLS = 16  # the reason column's least width: narrower tabs scroll to it (the detail line has it whole)
STYLE = {"measured": "green", "inaccurate": "red", "failed": "red", "skipped": "dim", "cached": "green"}


def bar(c: Candidate, slowest: float | None) -> Text:
    """A bar as long as `c`'s time against the slowest measured value of its option."""
    if c.ms is None or not slowest:
        return Text("")
    n = max(1, round(BAR * c.ms / slowest))
    return Text("█" * n + " " * (BAR - n), style="green" if c.status == "measured" else "red")


def run_ms(ms: float) -> str:
    """Three decimals below 10, four figures up to 10000, whole ms beyond: 2.000, 12.35, 397.8, 36736."""
    decimals = 3 if ms < 10 else max(0, 3 - int(math.log10(ms)))
    return f"{ms:.{decimals}f}"


class TunePanel(Vertical):
    BORDER_TITLE = "Tune"
    TICK_S = 1.0  # how often the measuring candidate's seconds are updated

    def __init__(self, label: str, **kw) -> None:
        super().__init__(**kw)
        self.label = label  # the run's shapes, e.g. 768x512x121
        self._done: list[Candidate] = []  # the running tune's candidates so far
        self._measuring: tuple[str, float] | None = None  # the status line of the one measuring, since when
        self._rows: dict[str, Candidate] = {}  # the table's rows by key, in order
        self._chosen: set[str] = set()  # the keys of the rows shown bold
        self._shown = ""  # the run shapes the rows were measured at

    def on_mount(self) -> None:
        self._clock = self.set_interval(self.TICK_S, self._tick, pause=True)

    def _tick(self) -> None:
        if self._measuring is not None:
            what, t0 = self._measuring
            self._status(Text(f"{what}: {time.monotonic() - t0:.0f} s — press c to cancel"))

    def _status(self, text: Text) -> None:
        self.query_one("#tune-status", Static).update(text)

    def _stop_clock(self) -> None:
        self._measuring = None
        self._clock.pause()

    def compose(self) -> ComposeResult:
        yield Static(self._idle_text(), id="tune-status")
        yield ProgressBar(total=1, show_eta=False, id="tune-progress")
        table = WideTable(id="tune-table", cursor_type="row", fixed_columns=2)  # option and value stay in sight
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield Static(id="tune-detail")  # the highlighted row's whole reason (its column is cut to the width)
        yield Static(Text(LEGEND, style="dim"), id="tune-legend")

    def _clear(self) -> None:
        """No rows, and no detail line of one."""
        self.query_one(DataTable).clear()
        self._rows, self._chosen = {}, set()
        self.query_one("#tune-detail").display = False

    def on_resize(self) -> None:
        if self._rows:  # the reason column takes what the other columns leave of the new width (once laid out)
            self.call_after_refresh(self._refill)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        c = self._rows.get(str(event.row_key.value))
        detail = self.query_one("#tune-detail", Static)
        detail.update(Text(f"{c.option} = {c.value}: {c.status}" + (f": {c.reason}" if c.reason else ""))
                      if c is not None else "")
        detail.display = c is not None

    def _idle_text(self) -> str:
        return (f"press u to time each value of the speed options on this machine at the run's shapes "
                f"({self.label}; w changes them)")

    def idle(self, label: str) -> None:
        """The run's shapes changed: what u would tune now (rows of an earlier tune stay)."""
        self.label = label
        if not self.query_one(DataTable).row_count:
            self._status(Text(self._idle_text()))

    def waiting(self, message: str) -> None:
        self._stop_clock()
        self._status(Text(f"{message} — press c to cancel", style="yellow"))

    def preparing(self, label: str) -> None:
        """u pressed: the tune checks it can run here (the rows shown stay until it starts)."""
        self._stop_clock()
        self._status(Text(f"tuning {label}: preparing — press c to cancel"))

    def start(self, label: str) -> None:
        self._stop_clock()
        self._done, self._shown = [], label
        self._clear()
        self.query_one(ProgressBar).update(total=1, progress=0)
        self._status(Text(f"tuning {label}: each candidate in a subprocess — press c to cancel"))

    def progress(self, done: int, total: int, c: Candidate | None) -> None:
        """A candidate finished (`c`; None: only the count moved): its row now, its bar against the
        values of its option measured so far (`show` draws the final table)."""
        # the first value's seconds show as a pulse, not as 0% (a trial: 0% for 20 s looked hung)
        self.query_one(ProgressBar).update(total=max(total, 1) if done else None, progress=done)
        if c is None:
            return
        if c.status == RUNNING:
            self._measuring = (f"measuring {c.option} = {c.value} (value {done + 1} of {total})", time.monotonic())
            self._tick()
            self._clock.resume()
            return
        self._stop_clock()
        self._done.append(c)
        self._put(c)
        self._refill()
        if c.status != "skipped":
            self._status(Text(f"{c.option} = {c.value}: {c.status} ({done} of {total} done)"))

    @staticmethod
    def _key(c: Candidate) -> str:
        return f"{c.option}={c.value}"

    def _put(self, c: Candidate) -> None:
        key = self._key(c)
        self._rows.pop(key, None)  # a value listed twice (a hand-edited cache file): its last row counts
        self._rows[key] = c

    def _refill(self) -> None:
        """The table from `_rows`: each bar against its option's slowest, the cursor kept on its row."""
        table = self.query_one(DataTable)
        at = table.cursor_row if table.row_count else 0
        slowest: dict[str, float] = {}
        for c in self._rows.values():
            if c.ms is not None:
                slowest[c.option] = max(c.ms, slowest.get(c.option, 0.0))
        rows = [(Text(c.option), Text(c.value, style="bold" if key in self._chosen else ""), bar(c, slowest.get(c.option)),
                 "-" if c.ms is None else run_ms(c.ms), Text(c.status, style=STYLE.get(c.status, "")),
                 "-" if c.max_error is None else f"{c.max_error:.2e}", "-" if c.warmup_s is None else f"{c.warmup_s:.2f}",
                 "-" if c.warmup_cached_s is None else f"{c.warmup_cached_s:.2f}", Text(c.reason))
                for key, c in self._rows.items()]
        fill(table, COLUMNS, rows, list(self._rows), last_fits=REASON_CELLS)
        if rows:
            table.move_cursor(row=min(at, len(rows) - 1), animate=False)

    def show(self, tuned: Tuned, note: str = "", cancelled: bool = False) -> None:
        """Every candidate of `tuned`, the chosen values marked; `note` ends the status line; `cancelled`:
        the tune that gave it was (its untimed rows may hold what the cache had)."""
        self._stop_clock()
        # the candidates measured or refused, not those a cancel left (a cached tune's bar sat at 0%)
        ended = sum(c.reason != "cancelled" for c in tuned.candidates)
        self.query_one(ProgressBar).update(total=max(len(tuned.candidates), 1),
                                           progress=ended if tuned.candidates else 1)
        self._clear()
        self._shown = tuned.shapes
        chosen = tuned.chosen(run_calls(tuned))
        options = list(dict.fromkeys(c.option for c in tuned.candidates))
        # per option: what was timed first, then what was not (and why)
        for c in sorted(tuned.candidates, key=lambda c: (options.index(c.option), c.status == "skipped")):
            self._put(c)
        self._chosen = {self._key(c) for c in tuned.candidates if chosen.get(c.option) == c.value}
        self._refill()
        picked = ", ".join(f"{k} = {v}" for k, v in chosen.items())
        picked = f"chosen {picked}" if picked else "nothing measured, nothing chosen"
        cancelled = cancelled or any(c.reason == "cancelled" for c in tuned.candidates)
        head = f"cancelled: {tuned.shapes} partly measured" if cancelled else tuned.shapes
        skipped = sum(c.status == "skipped" for c in tuned.candidates)
        skipped = f" ({skipped} of {len(tuned.candidates)} values skipped: their reason says why)" if skipped else ""
        self._status(Text(f"{head}: {picked}{skipped}{note}", style="green" if chosen and not cancelled else "yellow"))

    def failed(self, message: str) -> None:
        self._stop_clock()
        self.query_one(ProgressBar).update(total=1, progress=0)  # not a pulse beside the failure
        if self._rows and self._shown != self.label:  # the rows that stay are another run's (a trial: unsaid)
            message += f" The rows below were measured at {self._shown}, not this run's {self.label}."
        self._status(Text(message, style="red"))
