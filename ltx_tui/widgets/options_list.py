"""Every option of the vocabulary in one keyboard list, grouped, each with its value, its
resolution and a line of help. Enter on an option asks the app to edit it.
"""

from __future__ import annotations

from typing import Any

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

KEY_WIDTH = max(len(o.key) for o in OPTIONS) + 2
STATUS_STYLE = {Status.OK: "green", Status.FALLBACK: "yellow", Status.WARNING: "yellow", Status.ERROR: "red"}
MARK = {Status.OK: "", Status.FALLBACK: "↓", Status.WARNING: "!", Status.ERROR: "✗"}


def choice_values(spec: OptionSpec) -> list[str]:
    """The values offered for a choice or boolean option, as strings."""
    return ["true", "false"] if spec.kind is Kind.BOOL else [c.value for c in spec.choices]


def typed_choice(spec: OptionSpec, value: str) -> Any:
    """A value of `choice_values(spec)` as the profile takes it (bool for a boolean option)."""
    return value == "true" if spec.kind is Kind.BOOL else value


def row_text(spec: OptionSpec, value: Any, decision: Decision | None) -> Text:
    text = Text(f"{spec.key:<{KEY_WIDTH}}", style="bold")
    text.append(show_value(value))
    if decision is not None:
        effective = show_value(decision.effective) if decision.effective is not None else (
            "cannot run" if decision.status is Status.ERROR else "unused")
        text.append("  → ")
        text.append(effective, style="bold")
        text.append(f"  {decision.status.value}", style=STATUS_STYLE[decision.status])
        reason = decision.message if decision.status is not Status.OK and decision.message \
            else decision.chain[-1].reason
        text.append(f"\n    {reason}", style="" if decision.status is not Status.OK else "dim")
    text.append(f"\n    {spec.help}", style="dim italic")
    return text


class OptionsList(OptionList):
    """The options, each an entry; group titles are disabled entries."""

    BORDER_TITLE = "Options — enter to change"

    class EditRequested(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, profile: Profile, **kwargs) -> None:
        content: list[Option] = []
        for i, (title, keys) in enumerate(GROUPS):
            content.append(Option(Text(title, style="bold underline"), id=f"group-{i}", disabled=True))
            content += [Option(row_text(OPTIONS_BY_KEY[k], profile.get(k), None), id=k) for k in keys]
        super().__init__(*content, **kwargs)

    def show(self, profile: Profile, decisions: list[Decision] | None) -> None:
        """Re-render every entry for `profile` and its decisions (None while probing)."""
        by_key = {d.option: d for d in decisions or ()}
        for spec in OPTIONS:
            self.replace_option_prompt(spec.key, row_text(spec, profile.get(spec.key), by_key.get(spec.key)))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id in OPTIONS_BY_KEY:
            self.post_message(self.EditRequested(event.option_id))
