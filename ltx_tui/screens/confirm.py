"""A yes/no question, shown literally (a path like `/tmp/x[/]y.toml` is text, never markup)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str = "Yes", no: str = "No", yes_keys: str = "") -> None:
        """`yes_keys`: more keys that answer yes (comma-separated; they win over the screen's own, as
        ctrl+c's copy): a modal screen does not see the app's keys."""
        super().__init__()
        self.question, self.yes, self.no = question, yes, no
        if yes_keys:
            self._bindings.bind(yes_keys, "answer(True)", yes, show=False, priority=True)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.question), classes="question")
            with Horizontal(classes="buttons"):
                yield Button(Text(f"{self.yes} (y)"), variant="error", id="yes")
                yield Button(Text(f"{self.no} (n)"), variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
