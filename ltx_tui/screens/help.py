"""Every key binding of the app: the keys every screen shares first (they fit at 80x24), then the
app's, then the dialogs'. The table has the focus: up/down, pgup/pgdn, home/end scroll it."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label

GENERAL_KEYS = [
    ("escape", "close a dialog (this one too), leave a field"),
    ("enter / space", "change an option, choose, press a button; Runs tab: into the run's details"),
    ("tab / shift+tab", "move between controls"),
    ("up/down, pgup/pgdn", "move in a list or table (scroll this help)"),
    ("left / right", "scroll a wide table sideways (Smoke, Tune, Runs)"),
    ("ctrl+p", "command palette (options, smoke, tune, tabs)"),
]
DIALOG_KEYS = [("y / n", "answer a question")]
ACTION_WIDTH = 46  # what the 76-column dialog leaves the action column beside the keys and a scrollbar


class HelpScreen(ModalScreen[None]):
    AUTO_FOCUS = "DataTable"
    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]  # the keys that open it close it

    def __init__(self, bindings: list[tuple[str, str]]) -> None:
        """`bindings`: (key, what it does) of the app and its dialogs, listed after `GENERAL_KEYS`."""
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys (escape closes; up/down, pgup/pgdn scroll)")
            table = DataTable(show_cursor=False)
            table.add_columns("key", "action")
            for key, description in GENERAL_KEYS + self.bindings + DIALOG_KEYS:  # long texts wrap, never cut
                table.add_row(Text(key), Text("\n".join(textwrap.wrap(description, ACTION_WIDTH))), height=None)
            yield table
