"""Pilot flows of the Textual app, with fake NVML data and capability presets."""

import dataclasses
import io
import re
import threading
import time

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Label, OptionList, ProgressBar, Static, TextArea

from backends import load_profile
from backends.machine.presets import preset
from backends.smoke import CheckResult
from fakes import FakeNvml, NVMLError_LibraryNotFound, fake_gpu
from ltx_tui.app import LtxTuiApp
from ltx_tui.screens.confirm import ConfirmScreen
from ltx_tui.screens.edit import ChoiceScreen, ValueScreen
from ltx_tui.screens.export import ExportScreen
from ltx_tui.screens.help import HelpScreen
from ltx_tui.widgets.options_list import OptionsList
from test_profile import BROKEN


def make_app(capability="h100", **kw):
    kw.setdefault("nvml_module", FakeNvml([fake_gpu(0), fake_gpu(1)]))
    kw.setdefault("poll_interval", 3600)
    return LtxTuiApp(kw.pop("profile_path", None), preset(capability) if isinstance(capability, str) else capability,
                     env={}, **kw)


def table_row(app, option):
    table = app.query_one("#resolution-table", DataTable)
    return [str(c) for c in table.get_row(option)]


async def edit(pilot, key):
    """Highlight option `key` in the list and press enter."""
    options = pilot.app.query_one(OptionsList)
    options.focus()
    options.highlighted = options.get_option_index(key)
    await pilot.press("enter")
    await pilot.pause()


async def choose(pilot, key, value):
    """Open option `key` and pick `value` with the keyboard."""
    await edit(pilot, key)
    values = pilot.app.screen.query_one("#values", OptionList)
    target = values.get_option_index(value)
    steps = target - values.highlighted
    await pilot.press(*(["down"] * steps if steps > 0 else ["up"] * -steps), "enter")
    await pilot.pause()


def row_lines(app, key) -> list[str]:
    """Option `key`'s entry as the list draws it at its width, line by line."""
    options = app.query_one(OptionsList)
    width = options.scrollable_content_region.width - options.get_component_styles("option-list--option").padding.width
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(options.get_option(key).prompt)
    return console.export_text().splitlines()


def entry(app, key):
    return "\n".join(row_lines(app, key))


async def test_changing_an_option_re_resolves():
    app = make_app("a100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert table_row(app, "transformer.quantization")[0] == "ok"
        await choose(pilot, "transformer.quantization", "fp8-scaled-mm")
        row = table_row(app, "transformer.quantization")
        assert row[0] == "error" and row[2].startswith("fp8-scaled-mm uses") and row[2].endswith("…")
        assert "8.9" in str(app.query_one("#detail").render())  # the line under the table has the reason whole
        assert app.profile.transformer.quantization.value == "fp8-scaled-mm"
        assert "1 error" in app.sub_title and "*" in app.sub_title
        assert re.search(r"fp8-scaled-mm +→ cannot run +error", entry(app, "transformer.quantization"))  # not "unused"


async def test_impossible_values_stay_visible_and_marked():
    app = make_app("a100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "transformer.quantization")
        assert isinstance(app.screen, ChoiceScreen)
        values = app.screen.query_one("#values", OptionList)
        labels = {o.id: str(o.prompt) for o in values.options}
        assert set(labels) == {"none", "fp8-cast", "fp8-scaled-mm", "nvfp4-cast", "nvfp4-prequant",
                               "fp8-blockwise", "int8-w8a8"}
        assert "✗ error" in labels["fp8-scaled-mm"] and "SM >= 8.9" in labels["fp8-scaled-mm"]
        assert "✓ ok" in labels["fp8-cast"]
        assert values.highlighted == values.get_option_index("none")
        await pilot.press("escape")
        await pilot.pause()
        assert app.profile.transformer.quantization.value == "none" and not app.dirty
        await edit(pilot, "compile.mode")
        modes = {o.id: str(o.prompt) for o in app.screen.query_one("#values", OptionList).options}
        assert "error" not in modes["reduce-overhead"]  # compile is off: unused, not an error


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_invalid_number_is_not_applied():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "offload.gpu_slots")
        assert isinstance(app.screen, ValueScreen)
        box = app.screen.query_one("#value", Input)
        box.value = ""
        await pilot.press("0", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ValueScreen)
        assert "out of range" in str(app.screen.query_one("#value-error", Static).render())
        await pilot.press("backspace", "4", "enter")
        await pilot.pause()
        assert app.profile.offload.gpu_slots == 4
        assert "offload.gpu_slots               4" in entry(app, "offload.gpu_slots")
        await edit(pilot, "parallel.devices")
        await pilot.press("1", ",", "1", "enter")
        await pilot.pause()
        assert "each GPU may appear once" in str(app.screen.query_one("#value-error", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.profile.parallel.devices is None


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_export_writes_a_profile_that_loads_back(tmp_path):
    app = make_app()
    path = tmp_path / "out.toml"
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await choose(pilot, "transformer.quantization", "fp8-cast")
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen)
        box = app.screen.query_one("#path", Input)
        box.value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert load_profile(path) == app.profile
        flags = app.screen.query_one("#ltx-args", TextArea)
        assert "--quantization fp8-cast" in flags.text and not flags.soft_wrap  # one line per flag, never wrapped
        copied = []
        app.copy_to_clipboard = copied.append
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert copied == [flags.text] and "copied" in str(app.screen.query_one("#export-error", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.dirty is False and app.profile_path == str(path)


async def test_the_export_dialog_says_where_a_relative_path_goes(tmp_path, monkeypatch):
    """The default `ltx-profile.toml` did not say which folder it would be written in."""
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        label = lambda: str(app.screen.query_one("#path-label", Label).render())
        assert label() == f"Export profile to (a relative path is in {tmp_path}):"
        app.screen.query_one("#path", Input).value = str(tmp_path / "x.toml")
        await pilot.pause()
        assert label() == "Export profile to:"


async def test_after_an_export_the_dialog_is_done_and_enter_closes_it(tmp_path):
    """After a write the path field still looked editable, yet enter closed the dialog: it is done now,
    the field disabled and Save gone, the message saying what was written and how to close."""
    from textual.widgets import Button

    path = tmp_path / "out.toml"
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert path.exists()
        assert app.screen.query_one("#path", Input).disabled and not app.screen.query_one("#save", Button).display
        assert app.focused is app.screen.query_one("#close", Button)
        said = str(app.screen.query_one("#export-error", Static).render())
        assert said.startswith(f"wrote {path}") and "enter or escape closes" in said
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)


async def test_an_export_of_a_profile_in_error_says_so(tmp_path):
    """A trial: with 4 errors in the header, the export said only "wrote ..."."""
    path = tmp_path / "out.toml"
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await choose(pilot, "transformer.quantization", "nvfp4-cast")  # Blackwell's: an error on the H100
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert load_profile(path) == app.profile  # written as asked
        said = str(app.screen.query_one("#export-error", Static).render())
        assert said.startswith(f"wrote {path}, with 1 option(s) in error for preset h100 "
                               "(transformer.quantization: the Options tab says each fix)")


async def test_export_asks_before_overwriting(tmp_path):
    path = tmp_path / "out.toml"
    path.write_text("keep")
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert path.read_text() == "keep"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert load_profile(path) == app.profile


class FakeRunner:
    """Each check waits for `step` (or a cancel), then passes."""

    def __init__(self):
        self.step = threading.Semaphore(0)

    def __call__(self, specs, cancel, on_start, on_result):
        results = []
        for i, spec in enumerate(specs):
            on_start(i)
            while not self.step.acquire(timeout=0.02):
                if cancel.is_set():
                    r = CheckResult(spec.name, "cancelled", 0.1, None, "cancelled")
                    results.append(r)
                    on_result(i, r)
                    return results
            r = CheckResult(spec.name, "pass", 0.5, 1e-3, "max error 0.001 <= 0.02")
            results.append(r)
            on_result(i, r)
        return results


async def wait_for(pilot, predicate, tries=250):
    for _ in range(tries):
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached")


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_smoke_run_shows_progress_results_and_cancels():
    runner = FakeRunner()
    app = make_app(smoke_runner=runner, smoke_capability=preset("h100"))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await choose(pilot, "transformer.quantization", "fp8-cast")
        await choose(pilot, "compile.enabled", "true")
        await pilot.press("s")
        table = app.query_one("#smoke-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 5)
        assert app.query_one("TabbedContent").active == "smoke"
        runner.step.release()
        await wait_for(pilot, lambda: str(table.get_row("0")[1]) == "pass")
        bar = app.query_one("#smoke-progress")
        assert bar.progress == 1 and bar.total == 5
        assert str(table.get_row("1")[1]) == "running"
        await pilot.press("c")
        await wait_for(pilot, lambda: str(table.get_row("1")[1]) == "cancelled")
        await wait_for(pilot, lambda: app._smoke_cancel is None)
        status = str(app.query_one("#smoke-status", Static).render())
        assert "1 passed, 1 cancelled, " in status and "failed" not in status  # a cancel is not a failure
        assert "planned for this machine" in status and "validated for preset h100" in status
        names = [str(table.get_row(str(k))[0]) for k in range(table.row_count)]
        assert names[:2] == ["diffvae chunked_eager", "na3d triton"] and "linear fp8-cast" in names
        assert "compiled blocks (default)" in names
        assert [str(table.get_row(str(k))[1]) for k in range(2, table.row_count)] == ["not run"] * (table.row_count - 2)


async def test_quit_with_unsaved_changes_asks():
    """At 80x24 the question is shown whole: it was one line cut at the dialog's edge (a Label is as
    wide as its text): "... (q again quit"."""
    from textual.widgets import Label

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await choose(pilot, "offload.mode", "cpu")
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.query_one(".question", Label)
        assert question.size.height >= 2 and question.region.right <= question.parent.content_region.right
        assert "the same key again quits" in str(question.render())
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
    assert not app.is_running


async def test_quit_without_changes_does_not_ask():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running


async def test_start_without_gpu_shows_a_notice():
    app = make_app("cpu", nvml_module=FakeNvml(init_error=NVMLError_LibraryNotFound("no lib")))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: "No GPU" in str(app.query_one("#tab-gpu .gpu-notice", Static).render()))
        notice = str(app.query_one("#tab-gpu .gpu-notice", Static).render())
        assert "No GPU on this machine: NVML library not found" in notice
        target = str(app.query_one("#tab-gpu .gpu-target", Static).render())
        assert target == "Validating for preset cpu: no GPU — not this machine"
        assert table_row(app, "parallel.gpus")[0] == "error"


async def test_nvml_field_errors_are_shown_inline():
    app = make_app(nvml_module=FakeNvml([fake_gpu(0)], unsupported={"power_mw"}))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.query("#tab-gpu .gpu-info")
                       and "H200" in str(app.query_one("#tab-gpu .gpu-info", Static).render()))
        info = str(app.query_one("#tab-gpu .gpu-info", Static).render())
        assert "NVIDIA H200" in info and "power_draw: not supported by this GPU" in info


async def test_broken_profile_shows_the_error_instead_of_crashing():
    path = BROKEN / "unknown_enum.toml"
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        banner = app.query_one("#banner", Static)
        assert app.query_one("#banner-box").has_class("visible")
        assert "unknown_enum.toml:4" in str(banner.render()) and "fp8-cast" in str(banner.render())
        assert app.profile == load_profile(BROKEN.parent / "good" / "empty.toml")


async def test_a_profile_with_several_problems_shows_each_and_says_first_what_the_app_does():
    """What the app does with the file ("editing the default profile") came after the error: with a
    line a problem it fell below the banner's six lines."""
    app = make_app(profile_path=str(BROKEN / "several_problems.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        banner = app.query_one("#banner", Static)
        lines = str(banner.render()).splitlines()
        assert sum(":4: transformer.attention" in x or ":6: diffvae.mode" in x or ":8: compile.enabld" in x
                   for x in lines) == 3
        # what is in sight of the banner's six lines: the count, where to read them all, what the app does
        shown = " ".join("".join(seg.text for seg in line) for line in banner.render_lines(banner.region.reset_offset)[:6])
        shown = " ".join(shown.split())
        box = app.query_one("#banner-box")
        assert box.outer_size.height == 6 and "(3 problems: ltx-tui --check --profile" in shown
        assert "several_problems.toml lists them), editing the default profile" in shown
        # the rest is a scroll away, and the bar says so (a trial: cut at six lines, nothing to say so)
        assert box.max_scroll_y > 0 and box.show_vertical_scrollbar
        box.scroll_end(animate=False)
        await pilot.pause()
        assert box.scroll_y == box.max_scroll_y


async def test_profile_is_loaded_into_the_list():
    path = BROKEN.parent / "good" / "every_key.toml"
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert "max-autotune-no-cudagraphs" in entry(app, "compile.mode")
        assert "memory.max_batch_size           4" in entry(app, "memory.max_batch_size")
        assert app.dirty is False


async def test_poller_never_overlaps():
    nvml = FakeNvml([fake_gpu(0)])
    active, peak = [0], [0]
    original = nvml.nvmlDeviceGetCount

    def slow_count():
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        threading.Event().wait(0.15)
        active[0] -= 1
        return original()

    calls = [0]

    def counted():
        calls[0] += 1
        return slow_count()

    nvml.nvmlDeviceGetCount = counted
    app = make_app(nvml_module=nvml, poll_interval=0.02)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: calls[0] >= 3)  # ticks every 20 ms, each read takes 150 ms
        assert peak[0] == 1


async def test_help_lists_every_binding():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        actions = [" ".join(str(table.get_row_at(i)[1]).split()) for i in range(table.row_count)]  # wrapped
        for b in app.BINDINGS:
            assert (b.tooltip or b.description) in actions
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        # F1 did nothing (only ? opened the help); the help lists it, and left/right, and F1 closes it
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        keys = [str(table.get_row_at(i)[0]).strip() for i in range(table.row_count)]
        assert "f1" in keys
        assert "left / right" in keys  # the wide tables' sideways scroll was not listed
        await pilot.press("f1")  # closes it, as ? does
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


def test_snapshot_80x24(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24))


def test_snapshot_160x50(snap_compare, monkeypatch):
    monkeypatch.chdir(BROKEN.parent / "good")  # the title shows the path: keep it the same in every checkout
    assert snap_compare(make_app(profile_path="every_key.toml"), terminal_size=(160, 50))


def test_sparkline_keeps_a_fixed_scale():
    from ltx_tui.widgets.gpu_panel import sparkline

    assert str(sparkline([0, 50, 100], width=5)) == "   ▄█"
    assert str(sparkline([0] * 3, width=3)) == "   "  # idle stays low, not a full bar
    assert str(sparkline([0.5], width=1)) == "▁"  # anything above zero shows
    assert len(str(sparkline(range(100), width=60))) == 60


async def test_gpu_history_grows_with_each_reading():
    app = make_app(poll_interval=0.05)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.query("#tab-gpu GpuRow") and len(app.query("#tab-gpu GpuRow").first().util) >= 3)
        assert len(app.query("#tab-gpu GpuRow").first().util) <= 60


# --- issue 10: markup-like text, focus, probe failures, narrow and wide screens ------------------

@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_bracketed_paths_are_written_and_shown_literally(tmp_path):
    path = tmp_path / "x[" / "][red]ltx [h100].toml"  # the path holds "[/]" and "[red]"
    assert "[/]" in str(path)
    path.parent.mkdir()  # export makes no folder (test_an_export_into_a_missing_folder_...)
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await choose(pilot, "offload.mode", "cpu")
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert load_profile(path) == app.profile
        assert str(path) in str(app.screen.query_one("#export-error", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.is_running and "[red]ltx [h100].toml" in app.sub_title


async def test_an_export_error_names_the_path_typed(tmp_path):
    """It named the hidden temporary file beside it: "[Errno 2] No such file or directory:
    '/proc/.x.toml.10e75e31.tmp'"."""
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        (tmp_path / "a-file").write_text("")
        for path in ("/proc/x.toml", str(tmp_path / "a-file" / "x.toml")):
            said = await submit_export(pilot, path)
            assert said.startswith(f"not written: {path}: ") and ".tmp" not in said, said
        # a trial: "No such file or directory" of /proc, which exists: the file beside it cannot be made
        said = await submit_export(pilot, "/proc/x.toml")
        assert said.startswith("not written: /proc/x.toml: no file can be made in /proc (No such file"), said


async def submit_export(pilot, path) -> str:
    """In the open export dialog: `path` into its input, enter; what the dialog then says ("" while a
    question covers it)."""
    box = pilot.app.screen.query_one("#path", Input)
    box.value = str(path)
    box.focus()
    await pilot.press("enter")
    await pilot.pause()
    said = pilot.app.screen.query("#export-error")
    return str(said.first(Static).render()) if said else ""


async def test_an_export_to_a_directory_names_it_once_and_keep_says_so(tmp_path):
    """A user saw "not written: D.toml: D.toml: is a directory", and after answering Keep (n) to the
    overwrite question the old error stayed, with nothing saying the file was kept."""
    (tmp_path / "d.toml").mkdir()
    (tmp_path / "old.toml").write_text("# mine\n")
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        said = await submit_export(pilot, tmp_path / "d.toml")
        assert said.count(str(tmp_path / "d.toml")) == 1 and "is a directory" in said, said
        await submit_export(pilot, tmp_path / "old.toml")  # the overwrite question
        await pilot.press("n")  # Keep
        await pilot.pause()
        said = str(app.screen.query_one("#export-error", Static).render())
        assert "kept" in said and str(tmp_path / "old.toml") in said and "is a directory" not in said, said
    assert (tmp_path / "old.toml").read_text() == "# mine\n"


async def test_profile_value_that_looks_like_markup_shows_the_banner(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[diffvae]\nmode = "[/]"\n')
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        banner = str(app.query_one("#banner", Static).render())
        assert '"[/]" is not allowed' in banner


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_focus_follows_the_tab():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        options = app.query_one(OptionsList)
        start = options.highlighted
        await pilot.press("g", "o", "down")
        await pilot.pause()
        assert app.focused is options and options.highlighted != start
        await pilot.press("r")
        await pilot.pause()
        table = app.query_one("#resolution-table", DataTable)
        row = table.cursor_row
        await pilot.press("down")
        await pilot.pause()
        assert app.focused is table and table.cursor_row == row + 1


async def test_a_tab_left_before_its_focus_came_stays_left():
    """u then r pressed fast: the Tune tab's activation arrived after the Plan tab had opened. Focusing
    the Tune tab's table then reopened that tab (TabbedContent follows focus), whose own late event
    reopened the Plan tab, in turn forever: the footer recomposed at 100 % CPU and no key worked."""
    from textual.widgets import TabbedContent

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        tabs = app.query_one(TabbedContent)
        app.post_message(TabbedContent.TabActivated(tabs, tabs.get_tab("tune")))  # the late event
        await pilot.pause()
        await pilot.pause()
        assert tabs.active == "resolution" and app.focused is app.query_one("#resolution-table")


async def test_w_then_another_tab_faster_than_the_events_ends_on_that_tab():
    """w asks the Plan tab to focus its run-shape field once open; another tab key before that tab's
    activation arrived leaves the request unused, not carried to the other tab (which it reopened the
    Plan tab from)."""
    from textual.widgets import TabbedContent

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.action_run_shape()
        app.action_tab("tune")  # w then u, with no event handled between them
        await pilot.pause()
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "tune" and app.focused is app.query_one("#tune-table")
        await pilot.press("w")
        await pilot.pause()
        assert app.focused is app.query_one("#run-resolution")  # w still focuses the field


async def test_failed_probe_says_why_and_p_probes_again():
    answers = [RuntimeError("the capability probe exited 1: ImportError: libcuda.so"), preset("h100")]

    def prober():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    app = LtxTuiApp(None, None, nvml_module=FakeNvml([fake_gpu(0)]), env={}, poll_interval=3600, prober=prober)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: "probe failed" in str(app.query_one("#banner", Static).render()))
        assert "libcuda.so" in str(app.query_one("#banner", Static).render())
        assert "press p" in str(app.query_one("#banner", Static).render()).lower()
        await pilot.press("p")
        await wait_for(pilot, lambda: app.capability is not None)
        await wait_for(pilot, lambda: not app.query_one("#banner", Static).has_class("visible"))
        assert table_row(app, "transformer.quantization")[0] == "ok"


async def test_chooser_opened_while_probing_gets_its_marks():
    gate = threading.Event()

    def prober():
        gate.wait(10)
        return preset("a100")

    app = LtxTuiApp(None, None, nvml_module=FakeNvml([fake_gpu(0)]), env={}, poll_interval=3600, prober=prober)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "transformer.quantization")
        assert isinstance(app.screen, ChoiceScreen)
        gate.set()
        values = app.screen.query_one("#values", OptionList)
        await wait_for(pilot, lambda: "✗ error" in str(values.get_option("fp8-scaled-mm").prompt))


async def test_help_at_80x24_shows_the_general_keys_first_and_scrolls_with_the_keyboard():
    """enter, escape, tab and ctrl+p were below the fold at 80x24, the keys did not scroll the help, and
    the export dialog's ctrl+r and ctrl+y were missing."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        keys = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert "ctrl+r" in keys and "ctrl+y" in keys
        assert "?" in keys and "question_mark" not in keys  # keys as typed
        shown = " ".join(keys[:table.scrollable_content_region.height - table.header_height])
        assert all(key in shown for key in ("escape", "enter", "tab", "ctrl+p"))
        assert app.focused is table and table.max_scroll_y > 0
        # every action whole within the dialog: long ones wrap ("... (--tune --fresh)" was cut at any width)
        assert table.virtual_size.width <= table.scrollable_content_region.width and table.max_scroll_x == 0
        assert any("(--tune --fresh)" in " ".join(str(table.get_row_at(i)[1]).split()) for i in range(table.row_count))
        await pilot.press("pagedown", "pagedown")
        await pilot.pause()
        assert table.scroll_y == table.max_scroll_y


async def test_narrow_title_keeps_the_error_count():
    app = make_app("cpu", profile_path="a/rather/long/path/to/some/profile-with-a-long-name.toml")
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        assert app.sub_title.startswith("1 error — ")


async def test_resolution_reason_column_is_readable_at_80_columns():
    app = make_app("a100")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert app.query_one("#resolution-table", DataTable).columns["why"].width >= 20


async def test_wide_screen_g_does_not_duplicate_the_side_panels():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert app.query_one("TabbedContent").active == "options"
        assert app.focused is app.query_one("#side")


async def test_widening_while_on_the_gpu_tab_moves_to_options_and_narrowing_keeps_the_panels():
    """A trial: `g` at 80 columns, then the terminal widened to 130: the panels showed beside the tabs
    and again as the (now labelless) tab's content."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        tabs = app.query_one("TabbedContent")
        assert tabs.active == "system"
        await pilot.resize_terminal(130, 30)
        for _ in range(40):  # the resize reaches the screen after a timer, then the header
            await pilot.pause(0.05)
            if tabs.active == "options":
                break
        assert app.screen.has_class("-wide") and tabs.active == "options"
        assert app.focused is app.query_one("#side")  # the panels the user was reading, where they are now
        await pilot.resize_terminal(80, 24)
        for _ in range(40):
            await pilot.pause(0.05)
            if app.focused is app.query_one("#options-list"):
                break
        assert tabs.active == "options" and app.focused is app.query_one("#options-list")  # not a hidden panel


async def test_value_dialog_checks_the_whole_profile():
    app = make_app("h100x2")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "parallel.devices")
        await pilot.press("0", ",", "1", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ValueScreen)
        assert "parallel.gpus = 1" in str(app.screen.query_one("#value-error", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.profile.parallel.devices is None


class FakeTuner:
    """Emits two candidates, then waits for the test (or the cancel) before the third."""

    def __init__(self):
        self.step = threading.Event()

    def __call__(self, profile, cap, shapes, on_event, cancel):
        from backends.machine.tuned import Candidate, Tuned

        na = "diffvae.na_backend"
        rows = [Candidate(na, "triton", "measured", 2.0, 1e-3), Candidate(na, "eager_sdpa", "measured", 80.0, 1e-3)]
        for i, c in enumerate(rows):
            on_event(i + 1, 3, c)
        on_event(2, 3, Candidate(na, "natten:hopper-fna", "running"))  # its worker starts
        self.step.wait(10)
        last = Candidate(na, "natten:hopper-fna", "skipped", reason="cancelled") if cancel.is_set() else \
            Candidate(na, "natten:hopper-fna", "inaccurate", 1.0, 0.5, "[b]max error 0.5 > 0.02[/b]")
        on_event(3, 3, last)
        return Tuned(cap.fingerprint(), shapes.label, tuple(rows + [last]))


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes
async def test_tune_tab_shows_bars_and_auto_follows_the_measurements():
    from dataclasses import replace

    tuner = FakeTuner()
    app = make_app(replace(preset("h100"), source="live"), tuner=tuner)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        assert app.query_one("TabbedContent").active == "tune"
        assert app.focused is app.query_one("#tune-table")
        bar = app.query_one("#tune-progress")
        await wait_for(pilot, lambda: bar.progress == 2)
        table = app.query_one("#tune-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 2)  # each candidate's row as it finishes
        live = [[str(c) for c in table.get_row_at(i)] for i in range(2)]
        assert [r[1] for r in live] == ["triton", "eager_sdpa"] and live[0][3] == "2.000" and live[1][2] == "█" * 16
        assert live[0][2].strip() == "█"  # the first row's bar rescaled when a slower value came (it stayed full)
        assert table.fixed_columns == 2  # option and value stay in sight when the table scrolls sideways
        await wait_for(pilot, lambda: "measuring diffvae.na_backend = natten:hopper-fna (value 3 of 3)" in
                       str(app.query_one("#tune-status", Static).render()))  # not the last result: it looked hung
        await pilot.press("o")  # the UI keeps working while the tune runs
        assert app.query_one("TabbedContent").active == "options"
        tuner.step.set()
        await wait_for(pilot, lambda: app._tune_cancel is None)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[1] for r in rows] == ["triton", "eager_sdpa", "natten:hopper-fna"]
        assert rows[0][2].strip() == "█" and rows[1][2] == "█" * 16  # bars against the slowest
        assert rows[2][4] == "inaccurate" and rows[2][8] == "[b]max error 0.5 > 0.02[/b]"  # shown literally
        status = str(app.query_one("#tune-status", Static).render())
        assert "chosen diffvae.na_backend = triton" in status
        d = next(d for d in app.decisions if d.option == "diffvae.na_backend")
        assert d.effective == "triton" and "fastest measured here (768x512x121)" in d.chain[-1].reason


async def test_tune_cancels_and_measurements_of_this_machine_do_not_steer_a_preset():
    from dataclasses import replace

    tuner = FakeTuner()
    probed = []
    app = make_app("h100", tuner=tuner,  # options validated for a preset: the tune probes this machine
                   prober=lambda: probed.append(1) or replace(preset("a100"), source="live"))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        bar = app.query_one("#tune-progress")
        await wait_for(pilot, lambda: bar.progress == 2)
        await pilot.press("c")
        tuner.step.set()
        await wait_for(pilot, lambda: app._tune_cancel is None)
        table = app.query_one("#tune-table", DataTable)
        assert str(table.get_row_at(2)[4]) == "skipped" and str(table.get_row_at(2)[8]) == "cancelled"
        status = str(app.query_one("#tune-status", Static).render())
        assert "auto does not follow" in status and status.startswith("cancelled")
        assert (bar.progress, bar.total) == (2, 3)  # it filled to 100% with the third never measured
        d = next(d for d in app.decisions if d.option == "diffvae.na_backend")
        assert "fastest measured here" not in d.chain[-1].reason and "prior" in d.chain[-1].reason
        await pilot.press("c")  # nothing left to cancel: said so, nothing breaks
        await pilot.pause()
        assert probed == [1]  # through the app's prober (a subprocess by default), not in the UI process


async def test_a_cancelled_tune_says_so_though_its_rows_came_from_the_cache():
    """A cancelled --fresh tune puts the cached rows back where it timed nothing (`tune`): its status
    line still starts "cancelled", not green "chosen ..." as if it had measured them all."""
    from backends.machine.tuned import Candidate, Tuned

    def tuner(profile, cap, shapes, on_event, cancel):
        cancel.wait(10)
        return Tuned("fp", shapes.label, (Candidate("transformer.attention", "sdpa_math", "measured", ms=5.0),))

    app = make_app(dataclasses.replace(preset("h100"), source="live"), tuner=tuner)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("c")
        await wait_for(pilot, lambda: app._tune_cancel is None)
        assert str(app.query_one("#tune-status", Static).render()).startswith("cancelled")


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_a_smoke_run_and_a_tune_go_one_at_a_time():
    """Both could run at once and one c cancelled both: starting one while the other runs is refused,
    saying what runs and that c cancels it."""
    from dataclasses import replace

    tuner, runner = FakeTuner(), FakeRunner()
    app = make_app(replace(preset("h100"), source="live"), tuner=tuner, smoke_runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        try:
            await pilot.pause()
            await pilot.press("u")
            await wait_for(pilot, lambda: app.query_one("#tune-progress").progress == 2)
            await pilot.press("s")
            await pilot.pause()
            assert app._smoke_cancel is None
            said = list(app._notifications)[-1].message
            assert "tune is running" in said and "c cancels it" in said
            assert app.query_one("TabbedContent").active == "tune"
            await pilot.press("c")
            await pilot.press("s")  # the tune has not stopped yet: said so, not "c cancels it" again
            await pilot.pause()
            said = list(app._notifications)[-1].message
            assert "tune is being cancelled" in said and "current step ends" in said and app._smoke_cancel is None
            tuner.step.set()
            await wait_for(pilot, lambda: app._tune_cancel is None)
            await pilot.press("s")
            table = app.query_one("#smoke-table", DataTable)
            await wait_for(pilot, lambda: table.row_count > 0)
            await pilot.press("u")
            await pilot.pause()
            assert app._tune_cancel is None
            said = list(app._notifications)[-1].message
            assert "smoke run is running" in said and "c cancels it" in said
            await pilot.press("c")
            await wait_for(pilot, lambda: app._smoke_cancel is None)
        finally:  # a failure ends the fakes' threads too
            tuner.step.set()
            app._stop_work()


async def test_tune_tab_shows_a_compiled_values_first_calls_cold_and_cached():
    from backends.machine.tuned import Candidate, Tuned
    from ltx_tui.widgets.tune_panel import TunePanel

    app = make_app("h100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        mode = "diffvae.mode"
        app.query_one(TunePanel).show(Tuned("x", "768x512x121", (
            Candidate(mode, "chunked_eager", "measured", 1190.0, 1e-3, warmup_s=1.5),
            Candidate(mode, "chunked_compile", "measured", 550.0, 1e-3, warmup_s=27.07, warmup_cached_s=3.27))))
        await pilot.pause()
        table = app.query_one("#tune-table", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [r[6:8] for r in rows] == [["1.50", "-"], ["27.07", "3.27"]]
        status = str(app.query_one("#tune-status", Static).render())
        assert "chosen diffvae.mode = chunked_eager" in status  # one decode does not pay for the compile


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_tables_wider_than_80_columns_say_they_scroll_sideways():
    """At 80x24 the Tune and Smoke tables scrolled sideways with little hint: the panel's bottom border
    says there are more columns, and which way, while some are out of sight."""
    from backends.machine.tuned import Candidate, Tuned
    from backends.smoke import CheckResult, CheckSpec
    from ltx_tui.widgets.smoke_panel import SmokePanel
    from ltx_tui.widgets.tune_panel import TunePanel

    app = make_app("h100")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        tune, table = app.query_one(TunePanel), app.query_one("#tune-table", DataTable)
        assert not tune.border_subtitle  # the headers alone fit
        tune.show(Tuned("x", "768x512x121", (Candidate("diffvae.na_backend", "triton", "measured", 2.0, 1e-3),)))
        await pilot.pause()
        assert str(tune.border_subtitle).startswith("more columns →")
        await pilot.press("right")  # the table has the focus: the arrows scroll it, a third of the view a press
        await pilot.pause()  # (one character a press took ~60 presses to reach the reasons)
        assert table.scroll_x == min(table.max_scroll_x, table.size.width // 3) > 8
        assert str(tune.border_subtitle).startswith("← more columns")
        table.scroll_to(x=table.max_scroll_x, animate=False)
        await pilot.pause()
        assert str(tune.border_subtitle).startswith("← more columns  ")
        await pilot.press("left", "left", "left")
        await pilot.pause()
        assert table.scroll_x == 0 and str(tune.border_subtitle).startswith("more columns →")
        await pilot.press("t")
        smoke = app.query_one(SmokePanel)
        smoke.start([CheckSpec("na3d triton", "na3d", "cpu", {})])
        smoke.result(0, CheckResult("na3d triton", "fail", 1.0, 0.5, "max error 0.5 > 0.02 " * 4))
        await pilot.pause()
        assert "more columns →" in str(smoke.border_subtitle)


async def test_a_running_smoke_check_shows_its_seconds_against_the_timeout(monkeypatch):
    """A check running for two minutes on a CPU showed only "running" and a bar at 0%: its row now
    counts its seconds against the timeout the app was given (`ltx-tui --timeout S`)."""
    from ltx_tui.widgets.smoke_panel import SmokePanel

    monkeypatch.setattr(SmokePanel, "TICK_S", 0.05)
    release, seen = threading.Event(), {}

    def runner(specs, cancel, on_start, on_result):
        seen["n"] = len(specs)
        on_start(0)
        release.wait(10)
        return []

    app = make_app(smoke_runner=runner, smoke_capability=preset("h100"), smoke_timeout=300)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        table = app.query_one("#smoke-table", DataTable)
        await wait_for(pilot, lambda: table.row_count and re.fullmatch(
            r"\d+ s of 300 s", str(table.get_cell("0", "seconds"))))
        release.set()
        await wait_for(pilot, lambda: app._smoke_cancel is None)
        assert "of 300 s" not in str(table.get_cell("0", "seconds"))  # the clock stops with the run


async def test_a_smoke_runner_that_raises_stops_the_running_checks_clock(monkeypatch):
    """Review: after a runner raised, the row kept counting for good, and the next s (which clears the
    table) crashed the app at the clock's next tick (no such row)."""
    from ltx_tui.widgets.smoke_panel import SmokePanel

    monkeypatch.setattr(SmokePanel, "TICK_S", 0.02)

    calls = []

    def runner(specs, cancel, on_start, on_result):
        on_start(0)
        time.sleep(0.1)
        calls.append(1)
        raise RuntimeError("the runner broke")

    app = make_app(smoke_runner=runner, smoke_capability=preset("h100"))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        table = app.query_one("#smoke-table", DataTable)
        for attempt in range(2):
            await pilot.press("s")
            await wait_for(pilot, lambda: len(calls) == attempt + 1 and app._smoke_cancel is None)
            await pilot.pause(0.1)  # ticks that would find a cleared table
            assert "of 120 s" not in str(table.get_cell("0", "seconds"))
            assert "the runner broke" in str(app.query_one("#smoke-status", Static).render())
        assert app.is_running and app.query_one(SmokePanel).is_running is True  # (it shadowed Textual's _running)


async def test_a_smoke_message_of_several_lines_is_shown_whole():
    """Its first line alone ("the profile cannot run here:") was shown, the reason never."""
    from backends.smoke import CheckResult, CheckSpec
    from ltx_tui.widgets.smoke_panel import SmokePanel

    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("t")
        smoke = app.query_one(SmokePanel)
        smoke.start([CheckSpec("na3d triton", "na3d", "cpu", {})])
        smoke.result(0, CheckResult("na3d triton", "error", 1.0, None, "the profile cannot run here:\n  x = 1: why"))
        await pilot.pause()
        assert str(app.query_one("#smoke-table", DataTable).get_cell("0", "message")) == \
            "the profile cannot run here: x = 1: why"


async def test_the_tune_candidate_being_measured_counts_its_seconds(monkeypatch):
    """natten:flex-fna ran 38.6 s with only "[4/4] measuring ... 75%" on screen (the smoke rows count
    their seconds); and a tune shown whole (from the cache too) left the bar at 0%."""
    from backends.machine.tuned import RUNNING, Candidate, Tuned
    from ltx_tui.widgets.tune_panel import TunePanel

    monkeypatch.setattr(TunePanel, "TICK_S", 0.02)
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("n")
        tune = app.query_one(TunePanel)
        status = lambda: str(app.query_one("#tune-status", Static).render())
        tune.start("768x512x121")
        bar = app.query_one("#tune-progress", ProgressBar)
        tune.progress(0, 4, Candidate("diffvae.na_backend", "triton", RUNNING))
        assert bar.total is None  # the first value's seconds pulse (0% for its 20 s looked hung)
        tune.progress(3, 4, Candidate("diffvae.na_backend", "natten", RUNNING))
        assert (bar.total, bar.progress) == (4, 3)
        await wait_for(pilot, lambda: re.search(r"measuring diffvae.na_backend = natten \(value 4 of 4\): \d+ s",
                                                status()))
        tune.show(Tuned("x", "768x512x121", (Candidate("diffvae.na_backend", "triton", "measured", 2.0, 1e-3),
                                             Candidate("diffvae.na_backend", "natten", "skipped", reason="no"))))
        await pilot.pause(0.1)
        assert "measuring" not in status()  # the clock stops with the tune
        # the table's rows beside the count of the values timed ("[n/4]" over 29 rows)
        assert "(1 of 2 values skipped: their reason says why)" in status()
        assert bar.percentage == 1
        tune.start("768x512x121")
        tune.progress(0, 4, Candidate("diffvae.na_backend", "triton", RUNNING))
        tune.failed("Tune failed: the worker died")  # the bar stops pulsing with it
        assert (bar.total, bar.progress) == (1, 0)
        tune.show(Tuned("x", "224x224x9", (Candidate("diffvae.na_backend", "triton", "measured", 2.0, 1e-3),)))
        tune.idle("768x512x121")
        tune.failed("Not tuned: no CUDA device here.")  # the rows that stay say which run they are
        assert "The rows below were measured at 224x224x9, not this run's 768x512x121." in status()


async def test_a_cancelled_smoke_run_does_not_fill_its_bar_nor_time_what_never_ran():
    """It showed 100% and 0.00 s on the rows that never ran; then 100% after a check cancelled midway,
    the last of a run (a user trial: "2 passed, 1 cancelled" over a full bar): it counts what finished."""
    from backends.smoke import CheckResult, CheckSpec
    from ltx_tui.widgets.smoke_panel import SmokePanel

    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("t")
        smoke = app.query_one(SmokePanel)
        smoke.start([CheckSpec(f"c{i}", "na3d", "cpu", {}) for i in range(4)])
        smoke.result(0, CheckResult("c0", "cancelled", 1.5, None, "cancelled"))
        for i in (1, 2, 3):
            smoke.result(i, CheckResult(f"c{i}", "not run", 0.0, None, "not run: cancelled before it started"))
        await pilot.pause()
        table = app.query_one("#smoke-table", DataTable)
        assert [str(table.get_cell(str(i), "seconds")) for i in range(4)] == ["1.50", "-", "-", "-"]
        assert app.query_one("#smoke-progress", ProgressBar).percentage == 0.0


async def test_the_editors_mark_the_current_value_and_say_their_keys():
    """The chooser did not mark the value set now, and neither editor said enter applies / escape
    cancels (the footer shrinks to ^p palette under a dialog)."""
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "transformer.quantization")
        values = app.screen.query_one("#values", OptionList)
        prompts = {values.get_option_at_index(i).id: str(values.get_option_at_index(i).prompt)
                   for i in range(values.option_count)}
        assert prompts["none"].startswith("none (current)") and "(current)" not in prompts["fp8-cast"]
        assert "enter chooses, escape cancels" in str(app.screen.query_one("#keys", Static).render())
        await pilot.press("escape")
        await edit(pilot, "offload.gpu_slots")
        assert "enter applies, escape cancels" in str(app.screen.query_one("#keys", Static).render())


async def test_the_chooser_fits_a_small_terminal_and_keeps_its_highlight_in_sight():
    """A user trial at 80x24: transformer.attention's list ran past the dialog's foot (no bottom border)
    and the highlight went out of sight on its last values, which enter then chose blindly."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await edit(pilot, "transformer.attention")
        await pilot.pause()
        dialog, values = app.screen.query_one(".dialog"), app.screen.query_one("#values", OptionList)
        assert dialog.region.bottom <= 24 and values.region.bottom <= dialog.region.bottom - 2  # border + padding
        for _ in range(values.option_count - 1):
            await pilot.press("down")
        await pilot.pause()
        assert values.highlighted == values.option_count - 1
        assert values.scroll_offset.y == values.max_scroll_y > 0  # scrolled to the last value, inside the dialog
        await pilot.press("enter")  # sdpa_math's next-to-last: opened again, the current value is in sight
        await pilot.pause()
        await edit(pilot, "transformer.attention")
        for _ in range(3):
            await pilot.pause()
        values = app.screen.query_one("#values", OptionList)
        assert values.highlighted == values.get_option_index("mps_sdpa")
        assert values.scroll_offset.y == values.max_scroll_y > 0


def test_the_app_takes_the_smoke_timeout(monkeypatch):
    """`--timeout S` went with --check --smoke only: the app's smoke runs had a fixed 120 s."""
    import sys

    import ltx_tui.app
    from ltx_tui.cli import main

    got = {}
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(ltx_tui.app, "run", lambda *a, **kw: got.update(kw) or 0)
    assert main(["--timeout", "300"]) == 0 and got["smoke_timeout"] == 300


async def test_memory_bars_follow_the_options():
    app = make_app("rtx4090")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        bars = app.query_one("#memory-bars")
        text = bars.text
        assert "DiT denoising" in text and "does not fit: DiT denoising needs" in text
        # ltx-tui quantizes the DiT after LTX-2's builder placed it in bf16: fp8-cast lowers the
        # running peak, not the build's; streaming the blocks fits
        assert "fix: offload.mode = cpu" in text
        await choose(pilot, "offload.mode", "cpu")
        text = bars.text
        assert "fits with" in text and "fix:" not in text


async def test_an_export_into_a_missing_folder_is_refused_and_the_lines_follow_the_path(tmp_path):
    """A user's export to new/x.toml made the folder `new` without asking, where `--output` refuses; and
    while a path was typed, the run line still named the default ltx-profile.toml until a save."""
    from textual.widgets import TextArea

    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(tmp_path / "new" / "x.toml")
        await pilot.pause()
        assert str(tmp_path / "new" / "x.toml") in app.screen.query_one("#run-command", TextArea).text
        assert str(tmp_path / "new" / "x.toml") in app.screen.query_one("#ltx-args", TextArea).text
        said = await submit_export(pilot, tmp_path / "new" / "x.toml")
        assert f"{tmp_path / 'new'} does not exist" in said and "mkdir -p" in said, said
        app.screen.query_one("#path", Input).value = str(tmp_path / "y.toml")  # another path: the old
        await pilot.pause()  # refusal went on showing under it (beside the overwrite question)
        assert str(app.screen.query_one("#export-error", Static).render()) == ""
    assert not (tmp_path / "new").exists()


async def test_u_reuses_the_cache_and_shift_u_measures_afresh(monkeypatch):
    """'press u to tune again' measured nothing again (every value came from the cache)."""
    from dataclasses import replace

    from backends.machine.tuned import Tuned
    from backends.tune import run as runmod

    asked = []

    def fake_tune(profile, cap, shapes, **kw):
        asked.append(kw["fresh"])
        return Tuned(cap.fingerprint(), shapes.label, ())
    monkeypatch.setattr(runmod, "tune", fake_tune)
    app = make_app(replace(preset("h100"), source="live"))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        await wait_for(pilot, lambda: asked and app._tune_cancel is None)
        await pilot.press("U")
        await wait_for(pilot, lambda: len(asked) == 2 and app._tune_cancel is None)
    assert asked == [False, True]


@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
async def test_help_grows_with_the_terminal():
    """At 200x50 the help stayed 22 rows tall and still had to be scrolled; at 80x24 it keeps its 22."""
    for size, rows in (((80, 24), 22), ((200, 50), 46)):
        app = make_app()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            dialog = app.screen.query_one(".dialog")
            table = app.screen.query_one(DataTable)
            assert dialog.outer_size.height == rows
            if size[1] == 50:
                assert table.max_scroll_y == 0  # every key in sight


def test_a_wrapped_reason_in_the_chooser_keeps_its_indent():
    """A user trial: a reason longer than the list wrapped to the list's left edge, under the values."""
    from rich.console import Console

    from backends.config.rules import Status
    from ltx_tui.screens.edit import value_prompt

    prompt = value_prompt("flash_attention_3", (Status.ERROR, "needs SM 9.x (here: no CUDA device) and " * 3))
    console = Console(width=40, record=True, color_system=None)
    console.print(prompt)
    lines = console.export_text().splitlines()
    assert lines[0].startswith("flash_attention_3") and len(lines) > 3
    assert all(line.startswith("   ") for line in lines[1:] if line.strip())
    assert str(prompt).startswith("flash_attention_3  ✗ error\n   needs SM 9.x")


async def test_a_short_terminal_shows_the_memory_plan_in_its_verdict_lines():
    """A trial at 80x24: the per-stage bars took 7 of the Options tab's lines, two options and a half
    stayed in sight; a short terminal keeps the verdict (and its fix), a taller one brings the bars back."""
    app = make_app("rtx4090")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        bars = app.query_one("#memory-bars")
        assert not app.query_one("#memory-stages").display and bars.outer_size.height == 3  # a border, 2 lines
        lines = str(app.query_one("#memory-verdict", Static).render()).splitlines()
        assert len(lines) == 2 and "does not fit: DiT denoising needs" in lines[0] and lines[1].startswith("fix: ")
        await pilot.resize_terminal(80, 40)  # taller only
        await pilot.pause()
        assert app.query_one("#memory-stages").display and "DiT denoising" in bars.text.splitlines()[1]
        bars.show(None)  # no plan yet: the waiting line alone, not a blank line above it
        await pilot.pause()
        assert not app.query_one("#memory-stages").display and bars.outer_size.height == 2


async def test_p_probes_a_known_capability_again_but_not_a_given_one():
    """A package installed while the app runs: p probes again and the options follow (before: "The
    capability is known; nothing to probe"); a --capability preset stays as given."""
    answers = [preset("a100"), preset("h100")]
    app = LtxTuiApp(None, None, nvml_module=FakeNvml([fake_gpu(0)]), env={}, poll_interval=3600,
                    prober=lambda: answers.pop(0))
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.capability is not None)
        first, title = app.capability, app.title
        await pilot.press("p")
        await wait_for(pilot, lambda: app.capability is not first)
        assert app.capability == preset("h100") and not answers
        await wait_for(pilot, lambda: app.title != title)  # the target follows the new probe
    given = LtxTuiApp(None, "h200", nvml_module=FakeNvml([fake_gpu(0)]), env={}, poll_interval=3600,
                      prober=lambda: pytest.fail("a given capability is not probed"))
    async with given.run_test(size=(100, 40)) as pilot:
        await pilot.press("p")
        await pilot.pause()
        assert given.capability == preset("h200")
