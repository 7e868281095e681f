"""Every key binding of the app."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

EXTRA_KEYS = [
    ("tab / shift+tab", "move between controls"),
    ("enter / space", "open a list, toggle a switch"),
    ("up / down", "choose in an open list"),
    ("y / n", "answer a question"),
    ("escape", "close a dialog"),
    ("ctrl+p", "command palette: set OPTION = VALUE, explain OPTION, smoke, tune, export, switch tab"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close")]

    def __init__(self, bindings: list[tuple[str, str]]) -> None:
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys (escape closes)")
            table = DataTable(show_cursor=False)
            table.add_columns("key", "action")
            for key, description in self.bindings + EXTRA_KEYS:
                table.add_row(Text(key), Text(description))
            yield table
