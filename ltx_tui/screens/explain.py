"""What one option means here (`ltx-tui --explain KEY`'s text), shown literally in a dialog."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static


class ExplainScreen(ModalScreen[None]):
    """The explanation of option `key`; escape, enter or q closes it."""

    BINDINGS = [Binding("escape,enter,q", "app.pop_screen", "Close")]

    def __init__(self, key: str, explanation: str) -> None:
        super().__init__()
        self.key, self.explanation = key, explanation

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog explain"):
            yield Label(Text(f"explain {self.key} (escape closes)", style="bold"))
            with VerticalScroll(id="explain-scroll"):
                yield Static(Text(self.explanation.rstrip("\n")), id="explanation")

    def on_mount(self) -> None:
        self.query_one("#explain-scroll").focus()
