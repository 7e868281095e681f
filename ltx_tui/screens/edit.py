"""Editing one option: a list of values (each marked if it cannot run here), or a typed value."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from backends.config.options import MAX_SHOWN, Kind, OptionSpec
from backends.config.rules import Status
from backends.config.options import show_value
from ltx_tui.widgets.options_list import MARK, STATUS_STYLE, choice_values, typed_choice
from ltx_tui.widgets.ordered_input import OrderedInput


CANCELLED = object()  # what both editors dismiss with when nothing was chosen (None is a value)


class ValuePrompt:
    """A value's line in the chooser and, indented under it, what it resolves to (wrapped lines keep
    the indent; a Text's own newline wrapped them to the left edge); `str()` is the plain text."""

    INDENT = 3

    def __init__(self, head: Text, why: Text | None) -> None:
        self.head, self.why = head, why

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.head
        if self.why is not None:
            yield Padding(self.why, (0, 0, 0, self.INDENT))

    def __str__(self) -> str:
        return self.head.plain + ("" if self.why is None else "\n" + " " * self.INDENT + self.why.plain)


def value_prompt(value: str, mark: tuple[Status, str] | None, current: bool = False) -> ValuePrompt:
    text = Text(value, style="bold")
    if current:
        text.append(" (current)", style="cyan")
    if mark is None:
        return ValuePrompt(text, None)
    status, why = mark
    text.append(f"  {MARK[status] or '✓'} {status.value}", style=STATUS_STYLE[status])
    return ValuePrompt(text, Text(why, style="dim"))


LIST_ROWS = 20  # the chooser's value list at most, where the terminal has room


class ValueList(OptionList):
    """The chooser's values: the highlight stays in sight when the list is resized (`ChoiceScreen._fit`)."""

    def on_resize(self) -> None:
        self.scroll_to_highlight()


class ChoiceScreen(ModalScreen[Any]):
    """Pick one value; dismisses with it (typed: bool for switches) or CANCELLED."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, spec: OptionSpec, current: Any, marks: dict[str, tuple[Status, str]]) -> None:
        super().__init__()
        self.spec, self.current, self.marks = spec, show_value(current), marks

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.spec.key, style="bold"))
            yield Static(Text(self.spec.help, style="italic"))
            yield Static(Text("What each value would resolve to here, with the rest of the profile as it is:",
                              style="dim"))
            yield Static(Text("up/down moves, enter chooses, escape cancels", style="dim"), id="keys")  # above a
            values = choice_values(self.spec)  # long list, which may run past the screen's foot
            yield ValueList(*(Option(value_prompt(v, self.marks.get(v), v == self.current), id=v) for v in values),
                            id="values")

    def on_mount(self) -> None:
        values = self.query_one("#values", OptionList)
        values.highlighted = choice_values(self.spec).index(self.current)
        values.focus()
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """The list takes the rows the dialog's text leaves on screen (at 24 rows it ran past the foot),
        scrolling to keep the highlight in sight."""
        dialog, values = self.query_one(".dialog"), self.query_one("#values", OptionList)
        text = sum(w.outer_size.height for w in dialog.children if w is not values)
        room = max(5, min(LIST_ROWS, self.size.height - text - dialog.styles.gutter.height))
        if values.styles.max_height is None or values.styles.max_height.value != room:
            values.styles.max_height = room

    def set_marks(self, marks: dict[str, tuple[Status, str]]) -> None:
        """Fill in what each value resolves to (the capability probe may finish while this is open)."""
        self.marks = marks
        values = self.query_one("#values", OptionList)
        for v in choice_values(self.spec):
            values.replace_option_prompt(v, value_prompt(v, marks.get(v), v == self.current))

    @on(OptionList.OptionSelected, "#values")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        value = event.option_id
        self.dismiss(typed_choice(self.spec, value))

    def action_cancel(self) -> None:
        self.dismiss(CANCELLED)


def parse_value(spec: OptionSpec, text: str) -> Any:
    """The typed value of `text` for a numeric or device-list option, checked against the option's
    range; ValueError says what is wrong (quoting at most MAX_SHOWN characters of the text)."""
    text = text.strip()
    shown = repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "...")
    try:
        if spec.kind is Kind.DEVICES:
            inner = text[1:-1] if text[:1] == "[" and text[-1:] == "]" else text  # one list, brackets optional
            if "[" in inner or "]" in inner:  # `[[0]]` was read as [0]
                raise ValueError
            items = [t.strip() for t in inner.split(",") if t.strip()]
            if not items:
                return None
            value: Any = [int(t) for t in items]
        else:
            value = int(text) if spec.kind is Kind.INT else float(text)
    except ValueError:  # not a number, or more digits than int() converts (4300)
        raise ValueError(f"{spec.key}: {shown} is not {spec.allowed()}") from None
    if value == 0 and spec.kind is Kind.FLOAT and any(c in "123456789" for c in text.lower().split("e")[0]):
        raise ValueError(f"{spec.key}: {shown} is too small for a float: it reads as 0.0; expected {spec.allowed()}")
    return spec.convert(value)


class ValueScreen(ModalScreen[Any]):
    """Type a number or a device list; enter applies a valid value (None: the default), escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, spec: OptionSpec, current: Any, check: Callable[[Any], object] | None = None) -> None:
        """`check(value)` raises ValueError when the value breaks the profile's invariants."""
        super().__init__()
        self.spec, self.current, self.check = spec, current, check

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.spec.key, style="bold"))
            yield Static(Text(f"{self.spec.help}\nAllowed: {self.spec.allowed()}"
                              + (" (empty for the default)" if self.spec.optional else ""), style="italic"))
            yield OrderedInput(value="" if self.current is None else show_value(self.current), id="value")
            yield Static("", id="value-error")
            yield Static(Text("enter applies, escape cancels", style="dim"), id="keys")

    def on_mount(self) -> None:
        self.query_one("#value", Input).focus()

    @on(Input.Submitted, "#value")
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            value = parse_value(self.spec, event.value)
            if self.check is not None:
                self.check(value)
        except ValueError as e:
            self.query_one("#value-error", Static).update(Text(f"not applied: {e}", style="red"))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(CANCELLED)
