"""Every option of the vocabulary, grouped, with a line of help and its resolution.

Choice and boolean values that cannot run here stay in the list, marked with the reason. The form posts
`OptionsForm.Changed(key, value)` for valid edits; the app re-resolves and calls `show()`.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.validation import Function, Integer, Number
from textual.widgets import Input, Label, Select, Static

from backends.options import OPTIONS, OPTIONS_BY_KEY, Kind, OptionSpec, Profile
from backends.rules import Decision, Status

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DiffVAE decoder", ("diffvae.mode", "diffvae.na_backend", "diffvae.natten_kernel")),
    ("Transformer attention", ("transformer.attention",)),
    ("Transformer quantization", ("transformer.quantization",)),
    ("Sparse attention and norms", ("transformer.sparse_attention", "transformer.sla_topk", "transformer.fast_norm")),
    ("Compile", ("compile.enabled", "compile.mode", "compile.backend", "compile.fullgraph", "compile.dynamic",
                 "compile.capture")),
    ("Offload", ("offload.mode", "offload.gpu_slots", "offload.prefetch")),
    ("Memory", ("memory.expandable_segments", "memory.max_batch_size")),
    ("Parallel", ("parallel.gpus", "parallel.devices")),
)
assert {k for _, keys in GROUPS for k in keys} == {o.key for o in OPTIONS}

STATUS_STYLE = {Status.OK: "green", Status.FALLBACK: "yellow", Status.WARNING: "yellow", Status.ERROR: "red"}
MARK = {Status.OK: "", Status.FALLBACK: "↓", Status.WARNING: "!", Status.ERROR: "✗"}


def control_id(key: str) -> str:
    return "opt-" + key.replace(".", "-").replace("_", "-")


def parse_devices(text: str) -> tuple[int, ...] | None:
    """'0, 1' -> (0, 1); '' -> None. Raises ValueError with what is wrong."""
    text = text.strip().strip("[]")
    if not text:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not all(t.isdigit() for t in items):
        raise ValueError("CUDA ordinals are integers >= 0, comma separated")
    devices = tuple(int(t) for t in items)
    if len(set(devices)) != len(devices):
        raise ValueError("each GPU may appear once")
    return devices


def _devices_ok(text: str) -> bool:
    try:
        parse_devices(text)
    except ValueError:
        return False
    return True


def choice_values(spec: OptionSpec) -> list[str]:
    """The values a Select offers for a choice or boolean option, as strings."""
    return ["true", "false"] if spec.kind is Kind.BOOL else [c.value for c in spec.choices]


def value_label(value: str, mark: tuple[Status, str] | None) -> Text:
    text = Text(value)
    if mark and mark[0] is not Status.OK:
        text.append(f"  {MARK[mark[0]]} {mark[1]}", style=STATUS_STYLE[mark[0]])
    return text


def decision_text(d: Decision) -> Text:
    effective = "unused" if d.effective is None else str(d.effective).lower() if isinstance(d.effective, bool) \
        else str(d.effective)
    text = Text("→ ")
    text.append(effective, style="bold")
    text.append(f"  {d.status.value}", style=STATUS_STYLE[d.status])
    reason = d.message if d.status is not Status.OK and d.message else d.chain[-1].reason
    text.append(f"  {reason}", style="dim" if d.status is Status.OK else "")
    return text


class OptionsForm(VerticalScroll):
    """The option controls. `load(profile)` sets them; `show(decisions, marks)` annotates them."""

    BORDER_TITLE = "Options"

    class Changed(Message):
        def __init__(self, key: str, value: Any) -> None:
            super().__init__()
            self.key, self.value = key, value

    def __init__(self, profile: Profile, **kwargs) -> None:
        super().__init__(**kwargs)
        self._profile = profile

    def compose(self) -> ComposeResult:
        for title, keys in GROUPS:
            yield Label(title, classes="group-title")
            for key in keys:
                spec = OPTIONS_BY_KEY[key]
                with Vertical(classes="option-row"):
                    with Horizontal(classes="option-line"):
                        yield Label(key, classes="option-key")
                        yield self._control(spec, self._profile.get(key))
                    yield Static(Text(spec.help, style="dim italic"), classes="option-help")
                    yield Static("", classes="option-status", id=control_id(key) + "-status")

    def _control(self, spec: OptionSpec, value: Any):
        cid = control_id(spec.key)
        if spec.kind is Kind.CHOICE:
            return Select([(c.value, c.value) for c in spec.choices], value=value.value, allow_blank=False,
                          id=cid, classes="option-control", compact=True)
        if spec.kind is Kind.BOOL:
            return Select([("true", "true"), ("false", "false")], value=str(value).lower(), allow_blank=False,
                          id=cid, classes="option-control", compact=True)
        if spec.kind is Kind.DEVICES:
            return Input(value=",".join(map(str, value or ())), placeholder="default: first `gpus` ordinals",
                         validators=[Function(_devices_ok, "comma-separated distinct ordinals >= 0")],
                         id=cid, classes="option-control", compact=True)
        if spec.kind is Kind.INT:
            return Input(value=str(value), type="integer", validators=[Integer(minimum=int(spec.minimum))],
                         id=cid, classes="option-control", compact=True)
        return Input(value=f"{value:g}", type="number",
                     validators=[Number(maximum=spec.maximum),
                                 Function(lambda s: _float(s) > spec.minimum, f"must be > {spec.minimum:g}")],
                     id=cid, classes="option-control", compact=True)

    def key_of(self, widget_id: str | None) -> str | None:
        for spec in OPTIONS:
            if control_id(spec.key) == widget_id:
                return spec.key
        return None

    def load(self, profile: Profile) -> None:
        """Set every control from `profile` without posting Changed."""
        self._profile = profile
        with self.prevent(Select.Changed, Input.Changed):
            for spec in OPTIONS:
                control = self.query_one(f"#{control_id(spec.key)}")
                value = profile.get(spec.key)
                if spec.kind is Kind.CHOICE:
                    control.value = value.value
                elif spec.kind is Kind.BOOL:
                    control.value = str(value).lower()
                elif spec.kind is Kind.DEVICES:
                    control.value = ",".join(map(str, value or ()))
                else:
                    control.value = f"{value:g}" if spec.kind is Kind.FLOAT else str(value)

    def show(self, decisions: list[Decision], marks: dict[str, dict[str, tuple[Status, str]]]) -> None:
        """Annotate each option with its resolution and mark the values that cannot run."""
        for d in decisions:
            self.query_one(f"#{control_id(d.option)}-status", Static).update(decision_text(d))
        with self.prevent(Select.Changed):
            for key, value_marks in marks.items():
                select = self.query_one(f"#{control_id(key)}", Select)
                current = select.value
                select.set_options([(value_label(v, value_marks.get(v)), v) for v in choice_values(OPTIONS_BY_KEY[key])])
                select.value = current

    @on(Select.Changed)
    def _select(self, event: Select.Changed) -> None:
        key = self.key_of(event.select.id)
        if key and event.value is not Select.NULL:
            value = event.value == "true" if OPTIONS_BY_KEY[key].kind is Kind.BOOL else event.value
            self.post_message(self.Changed(key, value))

    @on(Input.Changed)
    def _input(self, event: Input.Changed) -> None:
        key = self.key_of(event.input.id)
        if key is None:
            return
        status = self.query_one(f"#{control_id(key)}-status", Static)
        if event.validation_result is not None and not event.validation_result.is_valid:
            status.update(Text("not applied: " + "; ".join(event.validation_result.failure_descriptions),
                               style="red"))
            return
        spec = OPTIONS_BY_KEY[key]
        try:
            value = parse_devices(event.value) if spec.kind is Kind.DEVICES else (
                int(event.value) if spec.kind is Kind.INT else float(event.value))
        except ValueError as e:
            status.update(Text(f"not applied: {e}", style="red"))
            return
        self.post_message(self.Changed(key, value))


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")
