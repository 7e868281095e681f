"""Export: path prompt, overwrite confirmation, atomic write, then the LTX-2 flags."""

from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from backends.machine.capability import Capability
from backends.ltx_args import ltx_args
from backends.config.options import Profile
from backends.config.plan import resolve
from backends.config.profile import save
from ltx_tui.screens.confirm import ConfirmScreen


class ExportScreen(ModalScreen[Path | None]):
    """Dismisses with the written path, or None if nothing was written."""

    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, profile: Profile, capability: Capability | None, default_path: str) -> None:
        super().__init__()
        self.profile, self.capability, self.default_path = profile, capability, default_path
        self.plan = resolve(profile, capability) if capability is not None else None
        self.written: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog export"):
            yield Label("Export profile to:")
            yield Input(value=self.default_path, id="path")
            yield Static("", id="export-error")
            with Horizontal(classes="buttons"):
                yield Button("Save (enter)", variant="primary", id="save")
                yield Button("Close (esc)", id="close")
            with VerticalScroll(id="ltx-args-scroll"):
                yield Static("", id="ltx-args")

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    @on(Input.Submitted, "#path")
    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        path = Path(self.query_one("#path", Input).value.strip()).expanduser()
        error = self.query_one("#export-error", Static)
        if not path.name:
            error.update("[red]give a file name[/]")
            return
        if path.is_dir():
            error.update(f"[red]{path} is a directory; add a file name such as ltx-profile.toml[/]")
            return
        if path.exists():
            def answered(yes: bool | None) -> None:
                if yes:
                    self._write(path, overwrite=True)
            self.app.push_screen(ConfirmScreen(f"{path} exists. Overwrite it?", "Overwrite", "Keep"), answered)
        else:
            self._write(path, overwrite=False)

    def _write(self, path: Path, overwrite: bool) -> None:
        error = self.query_one("#export-error", Static)
        try:
            save(self.profile, path, capability=self.capability, overwrite=overwrite)
        except OSError as e:
            error.update(f"[red]not written: {e}[/]")
            return
        self.written = path
        error.update(f"[green]wrote {path}[/]")
        self.query_one("#ltx-args", Static).update(ltx_args(self.plan, str(path)) if self.plan else
                                                   "(the LTX-2 flags appear once the capability probe has finished)")
        self.app.notify(f"Profile written to {path}", title="Exported")
        self.query_one("#close", Button).focus()

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(self.written)
