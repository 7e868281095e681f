"""A DataTable that says when some of its columns are out of sight: at 80 columns the Tune and Smoke
tables scroll sideways (left / right arrows, shift+wheel), and a scrollbar alone was little hint."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

KEYS = "(← → / shift+wheel)"


def fill(table: DataTable, columns: tuple[str, ...], rows: list[tuple[Any, ...]], keys: list[str] | None = None,
         last_fits: int | None = None) -> None:
    """Replace `table`'s columns and rows (`keys`: the rows' keys, else their indices). Every column gets
    the width of its widest cell up front: a DataTable measures new cells only when it is next idle, and
    lines it drew before that (a refill between two frames) would keep the cut cells until the next resize.
    `last_fits`: the last column is cut (its whole text elsewhere) to what the others leave of the table's
    width, but no narrower than that many cells (the table then scrolls sideways)."""
    table.clear(columns=True)
    widths = []
    for i, column in enumerate(columns):
        cells = [str(row[i]) for row in rows if i < len(row)]
        widths.append(max([cell_len(column)] + [cell_len(line) for cell in cells for line in cell.split("\n")]))
    if last_fits is not None and columns and table.size.width:
        room = table.size.width - sum(widths[:-1]) - 2 * table.cell_padding * len(columns)
        room -= 2 if table.size.height < len(rows) + 1 else 0  # the vertical scrollbar
        cut = min(widths[-1], max(last_fits, room))
        if cut < widths[-1]:
            rows = [(*row[:-1], _cut(row[-1], cut)) if len(row) == len(columns) else row for row in rows]
        widths[-1] = cut
    for column, width in zip(columns, widths):
        table.add_column(column, key=column, width=width)
    for i, row in enumerate(rows):
        table.add_row(*row, key=keys[i] if keys else str(i))


def _cut(cell: Any, width: int) -> Text:
    """`cell` on one line of `width` cells, an ellipsis where it is cut."""
    text = cell.copy() if isinstance(cell, Text) else Text(str(cell))
    text.truncate(width, overflow="ellipsis")
    return text


class WideTable(DataTable):
    """Its panel's bottom border (the parent's border subtitle) points to the columns out of sight."""

    def _show_hint(self) -> None:
        left, right = self.scroll_x > 0, self.scroll_x < self.max_scroll_x
        hint = f"{'← ' * left}more columns{' →' * right}  {KEYS}" if left or right else ""
        if self.parent is not None:
            self.parent.border_subtitle = hint

    def action_cursor_right(self) -> None:  # a row cursor scrolls a third of the view, not one character
        if self.cursor_type == "row":
            self.scroll_to(x=self.scroll_x + self._step(), animate=False)
        else:
            super().action_cursor_right()

    def action_cursor_left(self) -> None:
        if self.cursor_type == "row":
            self.scroll_to(x=self.scroll_x - self._step(), animate=False)
        else:
            super().action_cursor_left()

    def _step(self) -> int:
        return max(8, self.size.width // 3)

    def watch_virtual_size(self) -> None:
        self._show_hint()

    def watch_scroll_x(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_x(old_value, new_value)
        self._show_hint()

    def on_resize(self) -> None:
        self._show_hint()
