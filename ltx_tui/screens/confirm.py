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

    def __init__(self, question: str, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

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

    def ask(self, question: str) -> None:
        """Put another question (what it asks about changed while it was shown)."""
        self.question = question
        self.query_one(".question", Label).update(Text(question))


class QuitQuestion(ConfirmScreen):
    """The quit question: the key that asked it (q, ctrl+c) answers yes. A modal screen does not see
    the app's keys, and these win over the screen's own (ctrl+c's copy)."""

    BINDINGS = [Binding("q,ctrl+c", "answer(True)", "Quit", show=False, priority=True)]
