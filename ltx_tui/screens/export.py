"""Export: path prompt, overwrite confirmation, atomic write, then the command lines.

The path is written as `textfile.write_atomically` writes (a symlink's target, a file's mode
kept, a device or a FIFO written to; a FIFO nobody reads is an error, never a frozen app); an
existing file is replaced only after a yes. Paths are shown literally, control characters escaped.

Two command lines, for the written profile (the default path until one is written): the
`ltx-tui run` line that runs an LTX-2 pipeline with the profile applied (and records the run in
the ledger), and the equivalent LTX-2 command line. Each stays in one piece: a read-only,
non-wrapping text area that scrolls sideways (a wrapped line pasted into a shell is broken);
`ctrl+r` copies the run line, `ctrl+y` the LTX-2 one (OSC 52: works over SSH in terminals that
allow it). Messages show in the dialog, never as a toast over it. Once written the dialog is done:
the path is disabled, Save gone, and enter (on Close) or escape closes it.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TextArea

from backends.config.options import Profile
from backends.config.plan import Plan
from backends.config.rules import Status
from backends.config.profile import save
from backends.ltx_args import ltx_args, run_command
from backends.machine.capability import Capability
from backends.machine.text import printable
from backends.machine.textfile import OutputExists, check_output
from ltx_tui.screens.confirm import ConfirmScreen
from ltx_tui.widgets.ordered_input import OrderedInput
from ltx_tui.widgets.target import target_title

WAITING = "# the LTX-2 command line appears here once the capability probe has finished"


def _same_file(path: Path, other: str) -> bool:
    try:
        return path.resolve() == Path(other).expanduser().resolve()
    except OSError:
        return False


class ExportScreen(ModalScreen[Path | None]):
    """Dismisses with the written path, or None if nothing was written."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("ctrl+y", "copy", "Copy the LTX-2 command line"),
                Binding("ctrl+r", "copy_run", "Copy the ltx-tui run line")]
    DEFAULT_CSS = """
    ExportScreen #run-row { height: auto; }
    ExportScreen #run-command { width: 1fr; height: 4; }  /* the line and its sideways scrollbar */
    ExportScreen #copy-run { margin-left: 1; }
    """

    def __init__(self, profile: Profile, capability: Capability | None, default_path: str,
                 plan: Plan | None = None, unread: str | None = None) -> None:
        """`plan`: the app's plan of `profile` (the tune cache included); None while probing. `unread`:
        the profile file the app could not load (its contents are not what is edited)."""
        super().__init__()
        self.profile, self.capability, self.default_path = profile, capability, default_path
        self.plan, self.unread = plan, unread
        self.written: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog export"):
            yield Label(Text(self._where(self.default_path)), id="path-label")
            yield OrderedInput(value=self.default_path, id="path")
            yield Static("", id="export-error")
            with Horizontal(classes="buttons"):
                yield Button("Save (enter)", variant="primary", id="save")
                yield Button("Copy LTX-2 line (ctrl+y)", id="copy")
                yield Button("Close (esc)", id="close")
            with Horizontal(id="run-row"):
                yield TextArea(run_command(self.default_path).rstrip("\n"), read_only=True, soft_wrap=False,
                               id="run-command")
                yield Button("Copy (ctrl+r)", id="copy-run")
            yield TextArea(self._command(self.default_path), read_only=True, soft_wrap=False, id="ltx-args")

    @staticmethod
    def _where(path: str) -> str:
        """The path's label: where a relative path goes (the folder the app was started in)."""
        if Path(path).expanduser().is_absolute():
            return "Export profile to:"
        return f"Export profile to (a relative path is in {printable(str(Path.cwd()))}):"

    def _command(self, label: str) -> str:
        return ltx_args(self.plan, label) if self.plan is not None else WAITING

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    def _say(self, message: str, style: str) -> None:
        """`message` under the path; once written, with how the dialog closes."""
        done = "; enter or escape closes" if self.written is not None else ""
        self.query_one("#export-error", Static).update(Text(message + done, style=style))

    @on(Input.Changed, "#path")
    def _path_typed(self, event: Input.Changed) -> None:
        """The lines below follow the path as it is typed (they named the default path until a save)."""
        if self.written is None:
            path = event.value.strip() or self.default_path
            self.query_one("#path-label", Label).update(Text(self._where(path)))
            self.query_one("#export-error", Static).update("")  # said of the path before this one
            self.query_one("#run-command", TextArea).load_text(run_command(path).rstrip("\n"))
            self.query_one("#ltx-args", TextArea).load_text(self._command(path))

    @on(Input.Submitted, "#path")
    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        path = Path(self.query_one("#path", Input).value.strip()).expanduser()
        if not path.name:
            self._say("give a file name", "red")
            return
        try:
            check_output(path, overwrite=False)
        except OutputExists:
            def answered(yes: bool | None) -> None:
                if yes:
                    self._write(path, overwrite=True)
                else:
                    self._say(f"kept {printable(str(path))} as it is; nothing written", "yellow")
            question = f"{printable(str(path))} exists. Overwrite it?"
            if self.unread is not None and _same_file(path, self.unread):  # a trial: its contents went unsaid
                question = (f"{printable(str(path))} could not be loaded, so its settings are not the ones edited "
                            "here: overwriting it replaces them with this profile. Overwrite it?")
            self.app.push_screen(ConfirmScreen(question, "Overwrite", "Keep"), answered)
            return
        except OSError as e:  # a directory, a socket, a path that cannot be looked at
            self._not_written(path, e)
            return
        self._write(path, overwrite=False)

    def _not_written(self, path: Path, e: OSError) -> None:
        """Why `path` was not written, naming it (an OS error names the hidden temporary file beside it,
        or no file at all: "[Errno 28] No space left on device")."""
        why = e.strerror if e.errno is not None and e.strerror else str(e)
        why = why.removeprefix(f"{path}: ")  # a message of ours that names the path already
        if e.filename and Path(e.filename).parent == path.parent and Path(e.filename).name != path.name:
            why = f"no file can be made in {path.parent} ({why})"  # the temporary file beside it (/proc, /sys)
        self._say(f"not written: {printable(str(path))}: {printable(why)}", "red")

    def _write(self, path: Path, overwrite: bool) -> None:
        try:
            save(self.profile, path, capability=self.capability, overwrite=overwrite, wait=False)
        except OSError as e:
            self._not_written(path, e)
            return
        self.written = path
        self.query_one("#run-command", TextArea).load_text(run_command(str(path)).rstrip("\n"))
        self.query_one("#ltx-args", TextArea).load_text(self._command(str(path)))
        self.query_one("#close", Button).focus()
        self.query_one("#path", Input).disabled = True  # done: nothing left to edit or save
        self.query_one("#save", Button).display = False
        self.query_one("#close", Button).label = "Close (enter, esc)"
        self.query_one("#path-label", Label).update("Profile written to:")
        errors = [d.option for d in self.plan.decisions if d.status is Status.ERROR] if self.plan is not None else []
        if errors:  # written as asked, but it is no profile that runs here: said, not only in the header
            self._say(f"wrote {printable(str(path))}, with {len(errors)} option(s) in error for "
                      f"{printable(target_title(self.capability))} "
                      f"({', '.join(errors)}: the Options tab says each fix); ctrl+r and ctrl+y copy the lines below",
                      "yellow")
        else:
            self._say(f"wrote {printable(str(path))}; ctrl+r and ctrl+y copy the lines below", "green")

    @on(Button.Pressed, "#copy")
    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.query_one("#ltx-args", TextArea).text)
        self._say("copied the LTX-2 command line (OSC 52: the terminal must allow clipboard writes)", "green")

    @on(Button.Pressed, "#copy-run")
    def action_copy_run(self) -> None:
        self.app.copy_to_clipboard(self.query_one("#run-command", TextArea).text)
        self._say("copied the ltx-tui run line (OSC 52: the terminal must allow clipboard writes)", "green")

    @on(Button.Pressed, "#close")
    def action_close(self) -> None:
        self.dismiss(self.written)
