"""What one option means here (`ltx-tui --explain KEY`'s text), shown literally in a dialog."""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static


HANG = re.compile(r"(\s*)([\w.\-]+:\s+)?")  # a line's indent and its label ("values:", "fix:", the key)


class HangingLines:
    """Text whose lines wrap under their own text: a line's continuation starts after its indent and
    label ("  values:   "), or two columns in from its indent where it has no label or the label
    takes more than half the width (one Text wrapped them all at the left edge). Wrapped by terminal
    cells (wide characters count two), tabs expanded; `str()` is the text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, 1)
        for line in self.text.expandtabs().splitlines():
            indent, label = HANG.match(line).groups()
            head = len(indent) + len(label or "")
            hang = head if label and head <= width // 2 else min(len(indent) + 2, width // 2)
            first, rest = line[:min(head, hang)], line[min(head, hang):]
            if not rest.strip() or cell_len(line) <= width:
                yield Text(line)
                continue
            wrapped = Text(rest).wrap(console, max(width - hang, 1), overflow="fold")
            out = Text(first)  # at most `hang` wide: the first part fits beside it as the rest do
            for i, part in enumerate(wrapped):
                out.append_text(part if i == 0 else Text("\n" + " " * hang) + part)
            yield out

    def __str__(self) -> str:
        return self.text


class ExplainScreen(ModalScreen[None]):
    """The explanation of option `key`; escape, enter or q closes it."""

    BINDINGS = [Binding("escape,enter,q", "app.pop_screen", "Close")]

    def __init__(self, key: str, explanation: str) -> None:
        super().__init__()
        self.key, self.explanation = key, explanation

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog explain"):
            title = Text(f"explain {self.key}", style="bold")
            title.append("\n↑ ↓ pgup pgdn scroll · escape, enter or q closes", style="dim")
            yield Label(title, id="explain-title")
            with VerticalScroll(id="explain-scroll"):
                yield Static(HangingLines(self.explanation.rstrip("\n")), id="explanation")

    def on_mount(self) -> None:
        self.query_one("#explain-scroll").focus()
