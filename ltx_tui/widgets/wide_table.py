"""A DataTable that says when some of its columns are out of sight: at 80 columns the Tune and Smoke
tables scroll sideways (left / right arrows, shift+wheel), and a scrollbar alone was little hint."""

from __future__ import annotations

from textual.widgets import DataTable

KEYS = "(← → / shift+wheel)"


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
