"""Resolution view: each option `requested -> effective`, status, reason; and a summary."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from backends.config.rules import Decision, Status, summarize
from backends.config.options import show_value
from ltx_tui.widgets.options_list import STATUS_STYLE


def reason(d: Decision) -> str:
    if d.status is not Status.OK and d.message:
        return d.message + (f"  fix: {d.remedy}" if d.remedy else "")
    return " ← ".join(f"{show_value(s.value)}: {s.reason}" for s in reversed(d.chain)) if len(d.chain) > 1 \
        else d.chain[0].reason


SEVERITY = {Status.ERROR: 0, Status.FALLBACK: 1, Status.WARNING: 2, Status.OK: 3}


def detail_text(d: Decision) -> Text:
    """The whole chain of one decision, for the line under the table."""
    text = Text(f"{d.option}: ", style="bold")
    text.append(f"{show_value(d.requested)} → {show_value(d.effective)} ({d.status.value})", style=STATUS_STYLE[d.status])
    for step in d.chain:
        text.append(f"\n  {show_value(step.value)}: {step.reason}")
    if d.remedy and d.status is not Status.OK:
        text.append(f"\n  fix: {d.remedy}", style="italic")
    if d.rules:
        text.append(f"\n  rules: {', '.join(d.rules)}", style="dim")
    return text


class ResolutionView(Vertical):
    BORDER_TITLE = "Resolution"

    STATUS_WIDTH, OPTION_WIDTH = 8, 30

    def compose(self) -> ComposeResult:
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
            table.add_row(Text(d.status.value, style=STATUS_STYLE[d.status]),
                          Text(f"{d.option}\n {show_value(d.requested)} → {show_value(d.effective)}"),
                          Text(reason(d)), key=d.option, height=2)
        if decisions:
            table.move_cursor(row=min(row, len(decisions) - 1))
            self.query_one("#detail", Static).update(detail_text(decisions[table.cursor_row]))
