"""Every option of the vocabulary in one keyboard list, grouped, each with its value, its
resolution and a line of help. Enter on an option asks the app to edit it.

The first line of each entry is a row of aligned columns (option, value, → effective, status)
sized to the list's width: a value too long for its column folds inside it, never into the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from backends.config.options import OPTIONS, OPTIONS_BY_KEY, Kind, OptionSpec, Profile, show_value
from backends.config.rules import Decision, Status

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DiffVAE decoder", ("diffvae.mode", "diffvae.na_backend", "diffvae.natten_kernel")),
    ("Transformer attention", ("transformer.attention",)),
    ("Transformer quantization", ("transformer.quantization", "transformer.quantization_scope")),
    ("Sparse attention and norms", ("transformer.sparse_attention", "transformer.sla_topk", "transformer.fast_norm")),
    ("Compile", ("compile.enabled", "compile.mode", "compile.backend", "compile.fullgraph", "compile.dynamic",
                 "compile.capture")),
    ("Offload", ("offload.mode", "offload.gpu_slots", "offload.prefetch")),
    ("Memory", ("memory.expandable_segments", "memory.max_batch_size")),
    ("Parallel", ("parallel.gpus", "parallel.devices")),
)
assert sorted(k for _, keys in GROUPS for k in keys) == sorted(o.key for o in OPTIONS)

KEY_WIDTH = max(len(o.key) for o in OPTIONS)
STATUS_STYLE = {Status.OK: "green", Status.FALLBACK: "yellow", Status.WARNING: "yellow", Status.ERROR: "red"}
MARK = {Status.OK: "", Status.FALLBACK: "↓", Status.WARNING: "!", Status.ERROR: "✗"}
GAP = 2  # spaces between columns


def choice_values(spec: OptionSpec) -> list[str]:
    """The values offered for a choice or boolean option, as strings."""
    return ["true", "false"] if spec.kind is Kind.BOOL else [c.value for c in spec.choices]


def typed_choice(spec: OptionSpec, value: str) -> Any:
    """A value of `choice_values(spec)` as the profile takes it (bool for a boolean option)."""
    return value == "true" if spec.kind is Kind.BOOL else value


def fold(value: str, width: int) -> str:
    """`value` in lines of at most `width`, broken after a '-', '_' or '.' where it can be (values have no
    spaces to wrap at), else anywhere."""
    lines: list[str] = []
    width = max(width, 1)
    while len(value) > width:
        cut = max((i + 1 for i, c in enumerate(value[:width]) if c in "-_."), default=width)
        lines.append(value[:cut])
        value = value[cut:]
    return "\n".join(lines + [value])


@dataclass(frozen=True)
class Columns:
    """Widths of the first line's columns: option, value, effective, status."""

    key: int
    value: int
    effective: int
    status: int

    @classmethod
    def fit(cls, width: int, values: list[str], effectives: list[str], statuses: list[str]) -> Columns:
        """Columns as wide as their longest entry; when they do not fit in `width`, the value and
        effective columns share what is left (16 columns at least: then the option column gives way)."""
        value, effective = max(map(len, values), default=1), max(map(len, effectives), default=1)
        status = max(map(len, statuses), default=0)
        key = KEY_WIDTH
        room = width - key - status - 3 * GAP - 2  # the arrow column and its gaps
        if value + effective > room:
            share = max(room, 16)
            value = min(value, max(share - effective, share // 2))
            effective = share - value
            key -= max(0, 16 - room)
        return cls(max(key, 8), value, effective, status)


def row_text(spec: OptionSpec, value: Any, decision: Decision | None, columns: Columns) -> Group:
    """The entry of one option: its columns, then why it resolves so and its help, indented."""
    row = Table.grid(padding=(0, GAP, 0, 0), pad_edge=False)
    row.add_column(width=columns.key, overflow="fold")
    row.add_column(width=columns.value, overflow="fold")
    cells = [Text(spec.key, style="bold"), Text(fold(show_value(value), columns.value))]
    lines: list[Any] = [row]
    if decision is not None:
        row.add_column(width=columns.effective + 2, overflow="fold")
        row.add_column(width=columns.status)
        cells += [Text.assemble("→ ", (fold(decision.effective_text, columns.effective), "bold")),
                  Text(decision.status.value, style=STATUS_STYLE[decision.status])]
        reason = decision.message if decision.status is not Status.OK and decision.message \
            else decision.chain[-1].reason
        lines.append(Padding(Text(reason, style="" if decision.status is not Status.OK else "dim"), (0, 0, 0, 4)))
    row.add_row(*cells)
    lines.append(Padding(Text(spec.help, style="dim italic"), (0, 0, 0, 4)))
    return Group(*lines)


class OptionsList(OptionList):
    """The options, each an entry; group titles are disabled entries. The app sets the title to what
    the options are validated for."""

    BORDER_TITLE = "Options"
    BORDER_SUBTITLE = "enter to change"

    class EditRequested(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, profile: Profile, **kwargs) -> None:
        self.profile, self.decisions = profile, {}
        content: list[Option] = []
        for i, (title, keys) in enumerate(GROUPS):
            content.append(Option(Text(title, style="bold underline"), id=f"group-{i}", disabled=True))
            content += [Option(self._entry(OPTIONS_BY_KEY[k], self._columns(80)), id=k) for k in keys]
        super().__init__(*content, **kwargs)

    def _columns(self, width: int) -> Columns:
        shown = list(self.decisions.values())
        return Columns.fit(width, [show_value(self.profile.get(o.key)) for o in OPTIONS],
                           [d.effective_text for d in shown], [d.status.value for d in shown])

    def _entry(self, spec: OptionSpec, columns: Columns) -> Group:
        return row_text(spec, self.profile.get(spec.key), self.decisions.get(spec.key), columns)

    def show(self, profile: Profile, decisions: list[Decision] | None) -> None:
        """Re-render every entry for `profile` and its decisions (None while probing)."""
        self.profile, self.decisions = profile, {d.option: d for d in decisions or ()}
        self._render_entries()

    def _render_entries(self) -> None:
        padding = self.get_component_styles("option-list--option").padding.width
        columns = self._columns(self.scrollable_content_region.width - padding)
        for spec in OPTIONS:
            self.replace_option_prompt(spec.key, self._entry(spec, columns))

    def on_resize(self) -> None:
        """The columns follow the list's width."""
        self._render_entries()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id in OPTIONS_BY_KEY:
            self.post_message(self.EditRequested(event.option_id))
