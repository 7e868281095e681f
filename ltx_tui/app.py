"""The ltx-tui Textual app: GPUs, backends, options with validation, the run's plan, smoke test,
tune, export, and the ledger of `ltx-tui run`.

Slow work never runs on the UI thread: NVML is read by a thread worker that never
overlaps itself, the capability probe (torch, CUDA) runs in a subprocess after the first
frame (the UI process never creates a CUDA context), and smoke checks run in subprocesses
from a thread worker. Text from users and files is shown literally, never as markup.
Quitting (q, ctrl+c, ctrl+q, the palette's Quit) or a SIGTERM/SIGHUP/SIGINT cancels the smoke
run and the tune and kills their workers' process groups first, so the app exits at once.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from rich.cells import cell_len, chop_cells
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane
from textual.widgets._header import HeaderTitle

from backends.machine import capability as capmod
from backends.machine.presets import load_capability
from backends.config import profile as profmod
from backends.machine.nvml import NvmlSession
from backends.machine.text import shell_word
from backends.config.options import OPTIONS_BY_KEY, InvalidValue, Kind, Profile, show_value
from backends.config.plan import Plan, explain, plan_here, resolve
from backends.config.ltx2_shapes import DEFAULT_RUN, RunShapes  # DEFAULT_RUN: until the Plan tab changes it
from backends.config.memory import plan_memory
from backends.config.rules import Decision, Status, summarize
from backends.machine.tuned import Candidate, Tuned, load_tuned
from backends.machine.worker import kill_all, run_worker
from backends.smoke import DEFAULT_TIMEOUT as SMOKE_TIMEOUT
from backends.smoke import CheckResult, CheckSpec, plan_checks, run_all
from ltx_tui.check import free_bytes
from ltx_tui.screens.confirm import QuitQuestion
from ltx_tui.screens.edit import CANCELLED, ChoiceScreen, ValueScreen
from ltx_tui.screens.explain import ExplainScreen
from ltx_tui.screens.export import ExportScreen
from ltx_tui.screens.help import HelpScreen
from ltx_tui.screens.palette import LtxCommands
from ltx_tui.widgets.backends_panel import BackendsPanel
from ltx_tui.widgets.gpu_panel import GpuPanel, Processes
from ltx_tui.widgets.memory_bars import MemoryBars
from ltx_tui.widgets.options_list import OptionsList, choice_values, typed_choice
from ltx_tui.widgets.resolution import ResolutionView, RunShapeForm
from ltx_tui.widgets.runs_panel import RunsPanel
from ltx_tui.widgets.smoke_panel import SmokePanel
from ltx_tui.widgets.target import target_text, target_title
from ltx_tui.widgets.tune_panel import TunePanel

DEFAULT_EXPORT = "ltx-profile.toml"
NVML_BACKOFF_S = 30.0
PROBE_TIMEOUT_S = 120.0
_PROBE_CODE = ("import json, sys; from backends.machine.capability import probe; "
               "json.dump(probe().to_dict(), sys.stdout)")


def probe_in_subprocess() -> capmod.Capability:
    """The live capability, probed by a fresh interpreter (torch and CUDA stay out of the UI
    process; a worker, so quitting kills it); raises RuntimeError with the reason when it fails."""
    done = run_worker([sys.executable, "-c", _PROBE_CODE], PROBE_TIMEOUT_S)
    if done.status == "timeout":
        raise RuntimeError(f"the capability probe gave no answer within {PROBE_TIMEOUT_S:g} s")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the capability probe exited {done.returncode}: {tail[0]}")
    try:
        return capmod.from_dict(json.loads(done.stdout), "live")
    except (json.JSONDecodeError, capmod.CapabilityError) as e:
        raise RuntimeError(f"the capability probe's answer is unreadable: {e}") from None
# runner(specs, cancel, on_start, on_result) -> results
SmokeRunner = Callable[[list[CheckSpec], threading.Event, Callable[[int], None],
                        Callable[[int, CheckResult], None]], list[CheckResult]]


def default_smoke_runner(specs, cancel, on_start, on_result, timeout: float = SMOKE_TIMEOUT) -> list[CheckResult]:
    return run_all(specs, timeout, cancel=cancel, on_start=on_start, on_result=on_result)


# tuner(profile, capability, shapes, on_event, cancel) -> what it measured (and cached)
Tuner = Callable[[Profile, capmod.Capability, RunShapes, Callable[[int, int, Candidate | None], None],
                  threading.Event], Tuned]


def value_marks(profile: Profile, cap: capmod.Capability, key: str, tuned: Tuned | None = None
                ) -> dict[str, tuple[Status, str]]:
    """What each value of choice/boolean option `key` would resolve to, the rest unchanged (`auto`
    following `tuned`, as the app's plan does)."""
    spec = OPTIONS_BY_KEY[key]
    marks = {}
    for value in choice_values(spec):
        d = resolve(profile.replace(**{key: typed_choice(spec, value)}), cap, tuned)[key]
        marks[value] = (d.status, d.chain[-1].reason)
    return marks


class FitHeader(Header):
    """The header, which fits its text to its width again when resized (`LtxTuiApp.format_title`), and
    tells the app that the screen took a new width (its breakpoint classes set)."""

    def on_resize(self) -> None:
        self.app.refit_header()
        self.app.call_after_refresh(self.app._leave_hidden_tab)


def middle_cut(text: str, width: int) -> str:
    """`text` in at most `width` cells (at least 9, never more than its own): its middle replaced by
    "…", most of what is kept from its end (a path's file name)."""
    width = max(width, 9)
    if cell_len(text) <= width:  # never longer than the text itself
        return text
    tail = (2 * (width - 1)) // 3
    return chop_cells(text, width - 1 - tail)[0] + "…" + chop_cells(text[::-1], tail)[0][::-1]


class LtxTuiApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "ltx-tui"
    COMMANDS = App.COMMANDS | {LtxCommands}
    TABS = {"options": "Options", "resolution": "Plan", "smoke": "Smoke", "tune": "Tune", "runs": "Runs",
            "system": "GPU/Backends"}  # id: label
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # -short: the memory plan's verdict without its bars
    AUTO_FOCUS = "#options-list"
    BINDINGS = [
        Binding("s", "smoke", "Smoke"),
        Binding("u", "tune", "Tune"),
        Binding("U", "tune(True)", "Tune afresh: measure every value again (--tune --fresh)", show=False),
        Binding("c", "cancel", "Cancel", tooltip="Cancel the smoke run or tune (one at a time)"),
        Binding("e", "export", "Export"),
        Binding("o", "tab('options')", "Options", show=False),
        Binding("r", "tab('resolution')", "Plan tab (run shape, resolved options)", show=False),
        Binding("w", "run_shape", "Run shape: WxH, frames, batch", show=False),
        Binding("t", "tab('smoke')", "Smoke tab", show=False),
        Binding("n", "tab('tune')", "Tune tab", show=False),
        Binding("l", "tab('runs')", "Runs tab", show=False),
        Binding("R", "reload_runs", "Reload runs", show=False),
        Binding("g", "tab('system')", "GPU/backends", show=False),
        Binding("p", "retry_probe", "Probe again", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("f1", "help", "Help", show=False),
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+c", "quit_app", "Quit (in a text field: copy)", show=False),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, profile_path: str | None = None, capability: str | capmod.Capability | None = None, *,
                 nvml_module: Any = None, smoke_runner: SmokeRunner | None = None,
                 env: Mapping[str, str] | None = None, poll_interval: float = 1.0, probe_live: bool = True,
                 smoke_capability: capmod.Capability | None = None,
                 prober: Callable[[], capmod.Capability] = probe_in_subprocess, tuner: Tuner | None = None,
                 ledger: Path | None = None, handle_signals: bool = False, smoke_timeout: float = SMOKE_TIMEOUT) -> None:
        super().__init__()
        self.ledger_path = ledger  # the run ledger of the Runs tab (None: the user data directory's)
        self.tuner = tuner or self._tune_here
        self.handle_signals = handle_signals  # SIGTERM, SIGHUP, SIGINT quit as q does (the console app)
        self._saved_handlers: dict[int, Any] = {}
        self.run_shapes = DEFAULT_RUN
        self.tuned: Tuned | None = None  # this machine's --tune measurements: `auto` follows them
        self.prober = prober
        self.profile_path = profile_path
        self.env = os.environ if env is None else env
        self.nvml = NvmlSession(nvml_module, processes=True)
        self.nvml_gpus: tuple[capmod.GPU, ...] = ()  # this machine's GPUs as NVML last read them
        self.nvml_module = nvml_module
        self.smoke_timeout = smoke_timeout  # seconds each smoke check may take (`ltx-tui --timeout S`)
        self.smoke_runner = smoke_runner or functools.partial(default_smoke_runner, timeout=smoke_timeout)
        self.poll_interval = poll_interval
        self.probe_live = probe_live
        self.smoke_capability = smoke_capability  # what smoke checks are planned for; default: probe here
        self._this_machine: capmod.Capability | None = None  # probed for a tune or smoke run under a preset
        self.problems: list[str] = []
        self.profile = Profile()
        self.new_file = False  # --profile names a file that does not exist yet: the export creates it
        self.load_failed = False  # --profile names a file that could not be read: the default is edited
        self.link_target: str | None = None
        if profile_path:
            try:
                self.profile, warnings = profmod.read(profile_path)
                self.problems += [str(w) for w in warnings]
            except profmod.ProfileError as e:
                if Path(profile_path).exists() or Path(profile_path).is_dir():
                    # what the app does first: a file with several problems takes a line each, more than
                    # the banner's lines at 80x24
                    n = 1 + len(e.more)
                    count = f" ({n} problems: ltx-tui --check --profile {shell_word(profile_path)} lists them)" \
                        if n > 1 else ""
                    self.problems.append(f"Could not load the profile{count}, editing the default profile (exporting "
                                         f"asks before replacing the file):\n{e}")
                    self.load_failed = True
                else:
                    self.new_file = True
                    # a dangling symbolic link: the export creates its target
                    self.link_target = os.path.realpath(profile_path) if os.path.islink(profile_path) else None
        self._saved = self.profile  # what the file holds (or the default profile): `dirty` compares with it
        self.capability: capmod.Capability | None = None
        if isinstance(capability, capmod.Capability):
            self.capability = capability
        elif capability:
            try:
                self.capability = load_capability(capability)
            except capmod.CapabilityError as e:
                self.problems.append(f"Capability error: {e}. Using this machine instead.")
        self.decisions: Plan | list[Decision] = []  # the plan here, once the capability is known
        self._polling = False
        self._nvml_paused_until = 0.0
        self._smoke_cancel: threading.Event | None = None
        self._tune_cancel: threading.Event | None = None
        self._tune_fresh = False  # the running tune measures every value again (U), not only what is not cached
        self._first_frame = self._gpus_shown = self._probing = self._probed = False
        self._quit_question: QuitQuestion | None = None
        # (tab, widget): what `action_tab` asked that tab to focus once its activation arrives
        self._focus_in_tab: tuple[str, str] | None = None

    # --- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield FitHeader()
        with VerticalScroll(id="banner-box", classes="visible" if self.problems else ""):
            yield Static(Text("\n".join(self.problems)), id="banner")
        with Horizontal(id="body"):
            with VerticalScroll(id="side"):
                yield GpuPanel(id="side-gpu")
                yield BackendsPanel(id="side-backends")
            with TabbedContent(id="tabs", initial="options"):
                with TabPane(self.TABS["options"], id="options"):
                    yield OptionsList(self.profile, id="options-list")
                    yield MemoryBars(id="memory-bars")
                with TabPane(self.TABS["resolution"], id="resolution"):
                    yield ResolutionView(self.run_shapes, id="resolution-view")
                with TabPane(self.TABS["smoke"], id="smoke"):
                    yield SmokePanel(id="smoke-panel")
                with TabPane(self.TABS["tune"], id="tune"):
                    yield TunePanel(self.run_shapes.label, id="tune-panel")
                with TabPane(self.TABS["runs"], id="runs"):
                    yield RunsPanel(self.ledger_path, id="runs-panel")
                with TabPane(self.TABS["system"], id="system"):
                    with VerticalScroll(id="system-scroll"):
                        yield GpuPanel(id="tab-gpu")
                        yield BackendsPanel(id="tab-backends")
        yield Footer()

    def on_mount(self) -> None:
        if self.handle_signals:  # a signal quits like q: the workers are killed first
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                self._saved_handlers[signum] = signal.getsignal(signum)
                loop.add_signal_handler(signum, self._signalled, signum)
        if self.new_file:
            target = self.link_target
            self.notify(f"{self.profile_path} is a symbolic link to {target}, which does not exist yet: editing the "
                        "default profile; export (e) creates the target" if target else
                        f"{self.profile_path} does not exist yet: editing the default profile; export (e) creates "
                        "it there", title="New profile", markup=False, timeout=10)
        self._show_target()
        for panel in self.query(BackendsPanel):
            panel.show(self.capability)
        self.set_interval(self.poll_interval, self._poll)
        self._poll()
        if self.capability is not None:
            self._resolve()

    def on_ready(self) -> None:
        self._first_frame = True
        self._start_probe()

    def _start_probe(self) -> None:
        """Probe the live capability once the first frame, with the GPUs, is on screen.

        The probe imports torch (about a second, holding the GIL): it must not delay either.
        """
        if self.capability is None and self.probe_live and self._first_frame and self._gpus_shown and not self._probing:
            self._probing = True
            self.call_after_refresh(self._probe)

    def _update_title(self) -> None:
        """What the options are validated for, then the summary, so a narrow terminal cuts the path, not
        the target or the error count."""
        self.title = target_title(self.capability, self.nvml_gpus)
        self._title_path = self.profile_path or ""  # the part `format_title` shortens to fit
        target = self.link_target if self.new_file else None
        where = (f"{self.profile_path} (new file" + (f": the link's target {target})" if target else ")")
                 if self.new_file else f"{self.profile_path} (not loaded)" if self.load_failed
                 else self.profile_path) or "default profile"
        summary = f"{summarize(self.decisions)} — " if self.decisions else ""
        self.sub_title = f"{summary}{where}{' *' if self.dirty else ''}"

    def format_title(self, title: str, sub_title: str):
        """The header's text; a profile path too long for the header loses its middle, so the file's
        name and the unsaved-changes `*` after it stay in sight (the header cut them at 80 columns)."""
        path = getattr(self, "_title_path", "")
        header = self._header_title()
        room = header.size.width if header is not None else 0
        over = cell_len(f"{title} — {sub_title}") - room
        if room and path and over > 0 and path in sub_title:
            sub_title = sub_title.replace(path, middle_cut(path, cell_len(path) - over), 1)
        return super().format_title(title, sub_title)

    def _leave_hidden_tab(self) -> None:
        """Keys never go to a hidden widget after a resize. Widened while the GPU/Backends tab was open:
        its panels now stand beside the tabs and its tab is hidden, so Options opens and the panels keep
        the focus (they showed twice, no tab marked). Narrowed while the side panels had the focus (or
        nothing had it): the open tab's main widget takes it."""
        main = self.screen_stack[0] if self.screen_stack else None
        try:
            tabs, side = main.query_one(TabbedContent), main.query_one("#side")
        except (AttributeError, NoMatches):  # before the main screen is mounted
            return
        if main.has_class("-wide") and tabs.active == "system":
            self._focus_in_tab = ("options", "#side") if self.screen is main else None
            tabs.active = "options"
        elif not main.has_class("-wide") and (main.focused is None or side in main.focused.ancestors_with_self):
            main.query_one(self.FOCUS[tabs.active]).focus()  # (Textual drops the focus of a widget it hides)

    def refit_header(self) -> None:
        """The header's text again for its width now (`FitHeader` calls it when resized)."""
        header = self._header_title()
        if header is not None:
            header.update(self.format_title(self.title, self.sub_title))

    def _header_title(self) -> HeaderTitle | None:
        """The main screen's header text (a dialog on top has none), None before it is mounted."""
        try:
            return self.screen_stack[0].query_one(HeaderTitle)
        except (IndexError, NoMatches):
            return None

    def _show_target(self) -> None:
        """The title, the GPU panels and the options' border say what the options are validated for."""
        self._update_title()
        for panel in self.query(GpuPanel):
            panel.show_target(self.capability)
        self.query_one(OptionsList).border_title = Text(f"Options for {target_text(self.capability)}")

    def _show_banner(self) -> None:
        self.query_one("#banner", Static).update(Text("\n".join(self.problems)))
        self.query_one("#banner-box").set_class(bool(self.problems), "visible")

    # --- GPUs -----------------------------------------------------------------------------
    def _poll(self) -> None:
        if self._polling or time.monotonic() < self._nvml_paused_until:
            return
        self._polling = True
        self._read_nvml()

    @work(thread=True, group="nvml", exit_on_error=False)
    def _read_nvml(self) -> None:
        try:
            info, devices, gpus = capmod.read_nvml(self.nvml, self.env, timeout=5.0)
            if info.reason and "did not answer" in info.reason:
                self._nvml_paused_until = time.monotonic() + NVML_BACKOFF_S
            processes = {d["nvml_index"]: (d.get("processes"), d.get("processes_error")) for d in devices}
            self.call_from_thread(self._show_gpus, info, gpus, processes)
        except Exception as e:  # shown inline; the next tick tries again
            self.call_from_thread(self._show_nvml_error, f"NVML error: {type(e).__name__}: {e}")
        finally:
            self._polling = False

    def _show_gpus(self, info: capmod.NvmlInfo, gpus: tuple[capmod.GPU, ...], processes: Processes) -> None:
        for panel in self.query(GpuPanel):
            panel.show(info, gpus, processes)
        if self.capability is None:  # the title names them until the probe ends
            self.nvml_gpus = gpus
            self._update_title()
        if not self._gpus_shown:
            self._gpus_shown = True
            self._start_probe()

    def _show_nvml_error(self, message: str) -> None:
        for panel in self.query(GpuPanel):
            panel.show_error(message)
        if not self._gpus_shown:
            self._gpus_shown = True
            self._start_probe()

    # --- capability and resolution --------------------------------------------------------
    @work(thread=True, group="probe", exit_on_error=False)
    def _probe(self) -> None:
        try:
            cap = self.prober()
        except Exception as e:  # shown in the banner with the retry key
            self.call_from_thread(self._probe_failed, str(e))
            return
        tuned = load_tuned(cap, self.run_shapes.label, or_latest=True)  # a small file, read off the UI thread too
        self.call_from_thread(self._capability_ready, cap, tuned)

    def _cached_note(self, tuned: Tuned) -> str:
        if tuned.shapes == self.run_shapes.label:
            return f" (cached {tuned.written}; u measures what is not cached, U every value again)"
        from backends.tune.run import can_time

        how = "press u to tune at it" if self.capability is None or can_time(self.capability, self.run_shapes) \
            else "tune at it on the GPU machine: a CPU cannot time it"
        return f" (cached {tuned.written}; measured at {tuned.shapes}, not this run's {self.run_shapes.label}: {how})"

    def _probe_failed(self, reason: str) -> None:
        self._probing = False
        self.problems = [p for p in self.problems if not p.startswith("Capability probe failed")]
        self.problems.append(f"Capability probe failed: {reason}. Press p to probe again.")
        self._show_banner()
        for view in self.query(ResolutionView):
            view.waiting(f"no capability: {reason} (press p to probe again)")

    def action_retry_probe(self) -> None:
        """Probe this machine (again: a package installed since the last probe shows); a capability
        given with --capability stays as given."""
        if self._probing:
            self.notify("The probe is running.", markup=False)
            return
        if self.capability is not None and not self._probed:
            self.notify("The capability is the one --capability gave; p probes this machine's only.", markup=False)
            return
        if self.capability is not None:
            self.notify("Probing this machine again: the options follow what it finds.", markup=False)
        self.problems = [p for p in self.problems if not p.startswith("Capability probe failed")]
        self._show_banner()
        self._probing = True
        self._probe()

    def _capability_ready(self, cap: capmod.Capability, tuned: Tuned | None = None) -> None:
        self._probing = False
        self._probed = True  # the live probe's, which p may repeat
        self.capability = cap
        if tuned is not None:
            self.tuned = tuned
            self.query_one(TunePanel).show(tuned, self._cached_note(tuned))
        for panel in self.query(BackendsPanel):
            panel.show(cap)
        self._show_target()
        self._resolve()
        if isinstance(self.screen, ChoiceScreen):  # a chooser opened while probing gets its marks now
            self.screen.set_marks(self.value_marks(self.screen.spec.key))

    def _resolve(self) -> None:
        if self.capability is None:
            return
        self.decisions = resolve(self.profile, self.capability, self._tuned_here(), run=self.run_shapes)
        self.query_one(OptionsList).show(self.profile, self.decisions)
        self.query_one(MemoryBars).show(plan_memory(self.decisions, self.run_shapes, free_bytes(self.capability,
                                                                                               self.profile)))
        self.query_one(ResolutionView).show(self.decisions)
        self._update_title()

    @on(OptionsList.EditRequested)
    def _edit(self, event: OptionsList.EditRequested) -> None:
        self.edit_option(event.key)

    def edit_option(self, key: str) -> None:
        """Open the editor of option `key`: a chooser that marks each value, or a number field."""
        spec = OPTIONS_BY_KEY[key]
        current = self.profile.get(key)

        def apply(value: Any) -> None:
            if value is CANCELLED:
                return
            self.set_option(key, value)

        if spec.kind in (Kind.CHOICE, Kind.BOOL):
            self.push_screen(ChoiceScreen(spec, current, self.value_marks(key)), apply)
        else:  # the whole profile's invariants are checked in the dialog, before anything applies
            self.push_screen(ValueScreen(spec, current, lambda v: self.profile.replace(**{key: v})), apply)

    def value_marks(self, key: str) -> dict[str, tuple[Status, str]]:
        """What each value of option `key` would resolve to here ({} while probing)."""
        return value_marks(self.profile, self.capability, key, self._tuned_here()) if self.capability else {}

    def explain_option(self, key: str) -> None:
        """What option `key` means for this profile here (`ltx-tui --explain KEY`), in a dialog."""
        if self.capability is None:
            self.notify("Still probing this machine; explain needs its capability.", markup=False)
            return
        self.push_screen(ExplainScreen(key, explain(key, self.decisions)))

    def _tuned_here(self) -> Tuned | None:
        """The measurements `auto` follows: this machine's, when the options are validated for it."""
        return self.tuned if self._here() else None

    @property
    def dirty(self) -> bool:
        """Whether the profile differs from what was loaded or last exported (a change set back is none)."""
        return self.profile != self._saved

    def set_option_said(self, key: str, value: Any) -> None:
        """The command palette's `set KEY = VALUE`: set it, highlight it in the Options list and say what
        it resolved to (a trial: only the header's error count moved)."""
        self.set_option(key, value)
        options = self.query_one(OptionsList)
        options.highlighted = options.get_option_index(key)
        d = next((d for d in self.decisions if d.option == key), None)
        if d is None:  # still probing: resolved once the capability is known
            self.notify(f"{key} = {show_value(self.profile.get(key))}", markup=False)
            return
        said = f"{key} = {show_value(d.requested)} → {d.effective_text} ({d.status.value})"
        self.notify(said + (f": {d.message}" if d.status is not Status.OK and d.message else ""), markup=False,
                    severity="error" if d.status is Status.ERROR else "warning" if d.status is not Status.OK
                    else "information")

    def set_option(self, key: str, value: Any) -> None:
        """Change one option of the profile and re-resolve (a value the profile refuses is reported)."""
        try:
            new = self.profile.replace(**{key: value})
        except InvalidValue as e:
            self.notify(f"not applied: {e}", severity="error", markup=False)
            return
        if new == self.profile:
            return
        self.profile = new
        if self.capability is None:
            self.query_one(OptionsList).show(self.profile, None)
        self._resolve()
        self._update_title()

    # --- actions --------------------------------------------------------------------------
    FOCUS = {"options": "#options-list", "resolution": "#resolution-table", "smoke": "#smoke-table",
             "tune": "#tune-table", "runs": "#runs-table", "system": "#system-scroll"}

    def action_tab(self, tab: str, target: str | None = None) -> None:
        """Open `tab` and focus `target` in it (default: its main widget, `FOCUS`)."""
        if tab == "system" and self.screen.has_class("-wide"):  # already beside the tabs: no duplicate
            self.query_one("#side").focus()
            return
        tabs = self.query_one(TabbedContent)
        target = target or self.FOCUS[tab]
        if tabs.active == tab:
            self.query_one(target).focus()
        else:  # focused once the tab is open (`_tab_activated`)
            self._focus_in_tab = (tab, target)
            tabs.active = tab

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """Focus follows the tab: its main widget takes the keys (arrows, enter) at once. An event of a
        tab no longer open (two tab keys pressed fast) is dropped: focusing a widget of a hidden tab
        opens that tab again (TabbedContent follows focus), and two such events then reopened their
        tabs in turn forever, the UI frozen."""
        pane = event.pane.id
        pending, self._focus_in_tab = self._focus_in_tab, None  # meant for the next activation only
        if pane != event.tabbed_content.active:
            return
        target = pending[1] if pending and pending[0] == pane else self.FOCUS.get(pane)
        widget = next(iter(self.query(target)), None) if target else None  # None: the app is closing
        if widget is not None:
            widget.focus()
        if pane == "runs":  # the ledger as it is now (read in a thread)
            self.query_one(RunsPanel).reload()

    def action_reload_runs(self) -> None:
        """R: the Runs tab with the ledger read again."""
        if self.query_one(TabbedContent).active == "runs":
            self.query_one(RunsPanel).reload()
        else:
            self.action_tab("runs")  # opening the tab reads it

    def action_help(self) -> None:
        """The keys: the app's, then the export dialog's copy keys (ctrl+c, not ^c, as its buttons say)."""
        def shown(b: Binding) -> str:
            key = self.get_key_display(b)
            return f"ctrl+{key[1:]}" if key.startswith("^") else key
        keys = [(shown(b), b.tooltip or b.description) for b in self.BINDINGS if b.description]
        keys += [(shown(b), f"export dialog: {b.description}") for b in ExportScreen.BINDINGS if b.key != "escape"]
        self.push_screen(HelpScreen(keys))

    def _refuse_if_busy(self) -> bool:
        """Smoke runs and tunes go one at a time (a smoke run's workers would share the GPU with the
        tune's timings, and c cancels the one running): whether one runs, said with how to cancel it
        (or that it is being cancelled)."""
        for what, tab, cancel in (("smoke run", "Smoke tab: t", self._smoke_cancel),
                                  ("tune", "Tune tab: n", self._tune_cancel)):
            if cancel is not None:
                state = "being cancelled" if cancel.is_set() else "running"
                then = "it stops when its current step ends" if cancel.is_set() else "c cancels it"
                self.notify(f"A {what} is {state} ({tab}); {then}. Smoke runs and tunes go one at a time.",
                            severity="warning")
                return True
        return False

    def action_smoke(self) -> None:
        if self._refuse_if_busy():
            return
        self.action_tab("smoke")
        self._smoke_cancel = threading.Event()
        probing = self.smoke_capability is None and not self._here() and self._this_machine is None
        self.query_one(SmokePanel).preparing("probing this machine (torch, CUDA) to plan the checks…" if probing
                                             else "planning the checks…")
        self._run_smoke(self.profile, self._smoke_cancel)

    def action_cancel(self) -> None:
        """Cancel the smoke run or the tune, whichever is going (one at a time: `_refuse_if_busy`)."""
        if self._smoke_cancel is None and self._tune_cancel is None:
            self.notify("Nothing to cancel: no smoke run or tune is going.")
            return
        for event, status in ((self._smoke_cancel, "#smoke-status"), (self._tune_cancel, "#tune-status")):
            if event is not None:
                event.set()
                self.query_one(status, Static).update(Text("cancelling…", style="yellow"))

    def action_tune(self, fresh: bool = False) -> None:
        """u: tune at the run's shape, reusing what is cached there; U (`fresh`): measure every value again."""
        if self._refuse_if_busy():
            return
        self._tune_fresh = fresh
        self.action_tab("tune")
        self._tune_cancel = threading.Event()
        panel = self.query_one(TunePanel)
        panel.preparing(self.run_shapes.label)  # the table stays until the tune starts (it may be refused)
        if not self._here() and self._this_machine is None:
            panel.waiting(f"probing this machine (torch, CUDA): the tune times this machine, and the options are "
                          f"validated for {target_title(self.capability)}")
        self._run_tune(self.profile, self.run_shapes, self._tune_cancel)

    def _here(self) -> bool:
        """Whether the options are validated for this machine (its live probe)."""
        return self.capability is not None and self.capability.source == "live"

    def _probe_this_machine(self) -> capmod.Capability:
        """This machine's capability, for a tune or smoke run while the options are validated for
        another one: probed once (out of the UI process, by the app's prober), then kept."""
        if self._this_machine is None:
            self._this_machine = self.prober()
        return self._this_machine

    @work(thread=True, group="tune", exit_on_error=False)
    def _run_tune(self, profile: Profile, shapes: RunShapes, cancel: threading.Event) -> None:
        from backends.tune.run import can_time, cpu_refusal

        panel = self.query_one(TunePanel)
        try:
            here = self._here()
            cap = self.capability if here else self._probe_this_machine()
            if not can_time(cap, shapes):
                why = cpu_refusal(shapes, cap.torch.cuda_reason or "no CUDA device", in_app=True)
                self.call_from_thread(panel.failed, f"Not tuned: {why}.")
                return
            self.call_from_thread(panel.start, shapes.label)
            tuned = self.tuner(profile, cap, shapes, lambda d, t, c: self.call_from_thread(panel.progress, d, t, c),
                               cancel)
            self.call_from_thread(self._tuned_ready, tuned, here, cancel.is_set())
        except Exception as e:
            self.call_from_thread(panel.failed, f"Tune failed: {type(e).__name__}: {e}")
        finally:
            self._tune_cancel = None
            self.call_from_thread(self._run_ended, "tune")

    def _tune_here(self, profile: Profile, cap: capmod.Capability, shapes: RunShapes,
                   on_event: Callable[[int, int, Candidate | None], None], cancel: threading.Event) -> Tuned:
        """The tuner: `ltx-tui --tune`'s, its wait for another tune shown in the Tune tab."""
        from backends.tune.run import tune

        panel = self.query_one(TunePanel)
        return tune(profile, cap, shapes, on_event=on_event, cancel=cancel, fresh=self._tune_fresh,
                    on_wait=lambda message: self.call_from_thread(panel.waiting, message))

    def _tuned_ready(self, tuned: Tuned, here: bool, cancelled: bool = False) -> None:
        self.tuned = tuned
        note = "" if here else (" (measured on this machine; the options are validated for "
                                f"{target_title(self.capability)}, so auto does not follow)")
        self.query_one(TunePanel).show(tuned, note, cancelled)
        self._resolve()

    @work(thread=True, group="smoke", exit_on_error=False)
    def _run_smoke(self, profile: Profile, cancel: threading.Event) -> None:
        panel = self.query_one(SmokePanel)
        try:
            here = self._here()
            cap = self.smoke_capability or (self.capability if here else self._probe_this_machine())
            note = "" if here or self.capability is None else (
                f" (checks planned for this machine: the options are validated for "
                f"{target_title(self.capability)})")
            specs = plan_checks(plan_here(profile, cap))  # as the workers and --check plan it: the tune cache too
            self.call_from_thread(panel.start, specs, note, self.smoke_timeout)
            results = self.smoke_runner(specs, cancel, lambda i: self.call_from_thread(panel.running, i),
                                        lambda i, r: self.call_from_thread(panel.result, i, r))
            self.call_from_thread(panel.finish, results, len(specs))
        except Exception as e:
            self.call_from_thread(panel.failed, f"Smoke run failed: {e}")
            self.call_from_thread(self.notify, f"Smoke run failed: {e}", severity="error", markup=False)
        finally:
            self._smoke_cancel = None
            self.call_from_thread(self._run_ended, "smoke run")

    def action_export(self) -> None:
        default = self.profile_path or DEFAULT_EXPORT

        def done(path: Path | None) -> None:
            if path is not None:
                self.profile_path = str(path)
                self._saved, self.new_file, self.load_failed = self.profile, False, False
                self._update_title()
                self.notify(f"Profile written to {path}", title="Exported", markup=False)
        self.push_screen(ExportScreen(self.profile, self.capability, default,
                                      self.decisions if self.capability is not None else None,
                                      unread=self.profile_path if self.load_failed else None), done)

    # --- the run's shapes --------------------------------------------------------------------
    @on(RunShapeForm.Changed)
    def _run_shapes_changed(self, event: RunShapeForm.Changed) -> None:
        if event.shapes != self.run_shapes:
            self.run_shapes = event.shapes
            self.query_one(TunePanel).idle(self.run_shapes.label)
            self._resolve()
            if self.capability is not None and self.tuned is not None:
                self._load_tune(self.capability, self.run_shapes)

    @work(thread=True, group="tune-cache", exclusive=True, exit_on_error=False)
    def _load_tune(self, cap: capmod.Capability, shapes: RunShapes) -> None:
        self.call_from_thread(self._cached_tune_ready, load_tuned(cap, shapes.label, or_latest=True), shapes)

    def _cached_tune_ready(self, tuned: Tuned | None, shapes: RunShapes) -> None:
        """The run's shapes changed: `auto` follows the tune at them where one is cached."""
        if tuned is None or shapes != self.run_shapes or self._tune_cancel is not None:
            return
        changed = tuned != self.tuned
        self.tuned = tuned
        self.query_one(TunePanel).show(tuned, self._cached_note(tuned))
        if changed:
            self._resolve()

    def action_run_shape(self) -> None:
        """w: the Plan tab, in the run's width x height."""
        self.action_tab("resolution", "#run-resolution")

    # --- quitting -----------------------------------------------------------------------------
    def _stop_work(self) -> None:
        """Cancel the smoke run and the tune, and kill every worker's process group now (a probe's
        too): their threads end at once, so the app exits at once and leaves nothing running."""
        for event in (self._smoke_cancel, self._tune_cancel):
            if event is not None:
                event.set()
        kill_all()

    def _quit(self, return_code: int = 0, message: str | None = None) -> None:
        self._stop_work()
        self.exit(return_code=return_code, message=message)

    def _quit_reasons(self) -> list[str]:
        """What quitting now would stop or lose: a tune or smoke run going, unsaved changes."""
        reasons = [what for event, what in ((self._tune_cancel, "a tune is running (what it measured so far "
                                             "is kept in the tune cache)"),
                                            (self._smoke_cancel, "a smoke run is going"))
                   if event is not None and not event.is_set()]
        if self.dirty:
            reasons.append("the profile has unsaved changes")
        return reasons

    def action_quit_app(self) -> None:
        """q, ctrl+c, ctrl+q, the palette's Quit: asks first when a tune or smoke run is going or there
        are unsaved changes (the same key again at the question quits)."""
        reasons = self._quit_reasons()
        if not reasons or (self._quit_question is not None and self.screen is self._quit_question):
            self._quit()
            return

        def answered(yes: bool | None) -> None:
            self._quit_question = None
            if yes:
                self._quit()
        self._quit_question = QuitQuestion(self._quit_text(reasons), "Quit", "Stay")
        self.push_screen(self._quit_question, answered)

    def _quit_text(self, reasons: list[str], ended: str = "") -> str:
        """The quit question for `reasons`; `ended`: the run that finished while it was shown."""
        what = "; ".join(([f"the {ended} has ended"] if ended else []) + reasons)
        ask = "Quit without exporting?" if self.dirty else "Stop it and quit?" if reasons else "Quit?"
        return f"{what[0].upper()}{what[1:]}. {ask} (the same key again quits)"

    def _run_ended(self, what: str) -> None:
        """A smoke run or tune ended (its worker's last step): a quit question on screen says so."""
        if self._quit_question is not None and self.screen is self._quit_question:
            self._quit_question.ask(self._quit_text(self._quit_reasons(), what))

    async def action_quit(self) -> None:
        """Textual's quit (the command palette's "Quit"): the same as q."""
        self.action_quit_app()

    def _signalled(self, signum: int) -> None:
        """SIGTERM, SIGHUP (the terminal went away: nothing is printed), SIGINT: quit now, without asking."""
        name = signal.Signals(signum).name
        self._quit(128 + signum, None if signum == signal.SIGHUP else f"ltx-tui: stopped by {name}")

    def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for signum, handler in self._saved_handlers.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)


def run(profile_path: str | None, capability: str | None, ledger: Path | None = None,
        smoke_timeout: float = SMOKE_TIMEOUT) -> int:
    """The app on this terminal; its exit code (128 + the signal's number after a signal)."""
    app = LtxTuiApp(profile_path, capability, ledger=ledger, handle_signals=True, smoke_timeout=smoke_timeout)
    app.run()
    return app.return_code or 0
