"""The Plan tab: the run's shapes (width x height, frames, batch: what the memory plan and the
tune use), then how each option resolved here (`requested -> effective`, status, reason) and a
summary."""

from __future__ import annotations

import argparse

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Label, Static

from backends.config.ltx2_shapes import MAX_FRAMES, MAX_SIDE, RunShapes, parse_resolution, shape_problems
from backends.config.rules import Decision, Status, summarize
from backends.config.options import show_value
from ltx_tui.cli import _positive_int
from ltx_tui.widgets.options_list import STATUS_STYLE
from ltx_tui.widgets.ordered_input import OrderedInput


def parse_run(resolution: str, frames: str, batch: str) -> RunShapes:
    """The run of the three inputs, checked as `--resolution`, `--frames` and `--batch` are;
    ValueError with the same words, every field's problem, one a line."""
    problems, parts = [], {}
    try:
        parts["width"], parts["height"] = parse_resolution(resolution)
        problems += shape_problems(parts["width"], parts["height"])
    except ValueError as e:
        problems.append(str(e))
    for name, text in (("frames", frames), ("batch", batch)):
        try:
            parts[name] = _positive_int(text.strip())
            problems += shape_problems(**{name: parts[name]})
        except argparse.ArgumentTypeError as e:
            problems.append(f"{name}: {e}")
    if problems:
        raise ValueError("\n".join(problems))
    return RunShapes(**parts)


class RunShapeForm(Vertical):
    """Three inputs and a status line. A run is checked as it is typed and applied (posted as
    `Changed`) by enter or by leaving its field; one that is not valid is said, and not applied."""

    BINDINGS = [Binding("escape", "leave", "Back to the table", show=False)]

    class Changed(Message):
        def __init__(self, shapes: RunShapes) -> None:
            super().__init__()
            self.shapes = shapes

    def __init__(self, shapes: RunShapes, **kw) -> None:
        super().__init__(**kw)
        self.shapes = shapes

    def compose(self) -> ComposeResult:
        text = self._texts()
        with Horizontal(id="run-inputs"):
            yield Label("run ")
            yield OrderedInput(text["resolution"], id="run-resolution", compact=True,
                        tooltip=f"width x height, multiples of 32 up to {MAX_SIDE} (as --resolution)")
            yield Label(" frames ")
            yield OrderedInput(text["frames"], id="run-frames", compact=True,
                               tooltip=f"8k+1 up to {MAX_FRAMES} (as --frames)")
            yield Label(" batch ")
            yield OrderedInput(text["batch"], id="run-batch", compact=True, tooltip=">= 1 (as --batch)")
        yield Static(self._applied_note(), id="run-status")

    def _texts(self) -> dict[str, str]:
        """The run in use as its three fields show it."""
        return {"resolution": f"{self.shapes.width}x{self.shapes.height}", "frames": str(self.shapes.frames),
                "batch": str(self.shapes.batch)}

    def _applied_note(self) -> Text:
        return Text(f"the memory plan and the tune (u) use {self.shapes.label}", style="dim")

    def _typed(self) -> RunShapes:
        return parse_run(*(self.query_one(f"#run-{n}", Input).value for n in ("resolution", "frames", "batch")))

    @on(Input.Changed)
    def _edited(self, event: Input.Changed) -> None:
        event.stop()
        status = self.query_one("#run-status", Static)
        try:
            typed = self._typed()
        except ValueError as e:
            status.update(Text(f"{e}\nthe run is still {self.shapes.label}", style="red"))
            return
        status.update(self._applied_note() if typed == self.shapes else
                      Text(f"{typed.label}: enter applies (the run is still {self.shapes.label})", style="yellow"))

    @on(Input.Submitted)
    @on(Input.Blurred)
    def _apply(self, event: Input.Submitted | Input.Blurred) -> None:
        event.stop()
        try:
            typed = self._typed()
        except ValueError:
            return  # the status line says why
        if typed != self.shapes:
            self.shapes = typed
            self.query_one("#run-status", Static).update(self._applied_note())
            self.post_message(self.Changed(typed))
        if isinstance(event, Input.Submitted):  # applied: the keys are the app's again (a refused run stays)
            self._to_table()

    def action_leave(self) -> None:
        """escape: back to the plan's table; a valid run typed is applied as the field is left, one that
        is not goes back to the run in use (the fields and the status line say it again)."""
        try:
            self._typed()
        except ValueError:
            for name, text in self._texts().items():
                self.query_one(f"#run-{name}", Input).value = text
            self.query_one("#run-status", Static).update(self._applied_note())
        self._to_table()

    def _to_table(self) -> None:
        self.screen.set_focus(self.parent.query_one(DataTable))  # now, not after the keys queued behind escape


def reason(d: Decision) -> str:
    if d.status is not Status.OK and d.message:
        return d.message + (f"  fix: {d.remedy}" if d.remedy else "")
    return " ← ".join(s.text for s in reversed(d.chain)) if len(d.chain) > 1 \
        else d.chain[0].reason


SEVERITY = {Status.ERROR: 0, Status.FALLBACK: 1, Status.WARNING: 2, Status.OK: 3}


def detail_text(d: Decision) -> Text:
    """The whole chain of one decision, for the line under the table."""
    text = Text(f"{d.option}: ", style="bold")
    text.append(f"{show_value(d.requested)} → {d.effective_text} ({d.status.value})", style=STATUS_STYLE[d.status])
    for step in d.chain:
        text.append(f"\n  {step.text}")
    if d.remedy and d.status is not Status.OK:
        text.append(f"\n  fix: {d.remedy}", style="italic")
    if d.rules:
        text.append(f"\n  rules: {', '.join(d.rules)}", style="dim")
    return text


class ResolutionView(Vertical):
    BORDER_TITLE = "Plan"

    STATUS_WIDTH, OPTION_WIDTH = 8, 30

    def __init__(self, shapes: RunShapes, **kw) -> None:
        super().__init__(**kw)
        self.shapes = shapes

    def compose(self) -> ComposeResult:
        yield RunShapeForm(self.shapes, id="run-form")
        yield Static("waiting for the capability probe…", id="summary")
        table = DataTable(id="resolution-table", cursor_type="row", zebra_stripes=True)
        table.add_column("status", width=self.STATUS_WIDTH, key="status")
        table.add_column("option: requested → effective", width=self.OPTION_WIDTH, key="option")
        table.add_column("why", key="why")
        yield table
        yield Static("", id="detail")

    def waiting(self, message: str) -> None:
        self.query_one("#summary", Static).update(Text(message, style="yellow"))

    def _why_width(self) -> int:
        """What is left of the table's width for the reason (two lines of it per row)."""
        width = self.query_one(DataTable).size.width or self.size.width
        return max(20, width - self.STATUS_WIDTH - self.OPTION_WIDTH - 8)

    def on_mount(self) -> None:
        self._decisions: dict[str, Decision] = {}

    def _option_cell(self, d: Decision) -> str:
        """The option, then "requested → effective" on its line where it fits the column, else the
        effective value on a line of its own (the table cuts a row's text at its height)."""
        change = f" {show_value(d.requested)} → {d.effective_text}"
        if cell_len(change) <= self.OPTION_WIDTH:
            return f"{d.option}\n{change}"
        return f"{d.option}\n {show_value(d.requested)} →\n   {d.effective_text}"

    def _clip(self, why: str, width: int, lines: int) -> Text:
        """`why` wrapped to `width` cells, at most `lines` lines, the last ending in "…" where it was cut
        (the line under the table has it whole)."""
        wrapped = Text(why).wrap(self.app.console, width)
        if len(wrapped) <= lines:
            return Text("\n".join(line.plain.rstrip() for line in wrapped))
        kept = [line.plain.rstrip() for line in wrapped[:lines]]
        last = Text(kept[-1])
        last.truncate(width - 1)
        kept[-1] = last.plain.rstrip() + "…"
        return Text("\n".join(kept))

    def on_resize(self) -> None:
        """The reason column takes the width left over: rebuild the rows when that changes."""
        if self._decisions and self.query_one(DataTable).columns["why"].width != self._why_width():
            self.show(list(self._decisions.values()))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        d = self._decisions.get(event.row_key.value) if event.row_key else None
        if d is not None:
            self.query_one("#detail", Static).update(detail_text(d))

    def show(self, decisions: list[Decision]) -> None:
        s = summarize(decisions)
        style = "red" if s.error else "yellow" if s.fallback or s.warning else "green"
        self.query_one("#summary", Static).update(Text(str(s), style=f"bold {style}"))
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        self._decisions = {d.option: d for d in decisions}
        decisions = sorted(decisions, key=lambda d: SEVERITY[d.status])  # problems first, then vocabulary order
        table.columns["why"].width = self._why_width()
        table.columns["why"].auto_width = False
        for d in decisions:
            option = self._option_cell(d)
            height = max(2, option.count("\n") + 1)
            table.add_row(Text(d.status.value, style=STATUS_STYLE[d.status]), Text(option),
                          self._clip(reason(d), table.columns["why"].width, height), key=d.option, height=height)
        if decisions:
            table.move_cursor(row=min(row, len(decisions) - 1))
            self.query_one("#detail", Static).update(detail_text(decisions[table.cursor_row]))
