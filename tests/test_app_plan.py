"""The app's Plan tab (the run's shapes that the memory plan and the tune use, checked as the
command line checks them), the tune refused at once on a CPU for LTX-2's shapes, `u` and `s`
saying what they do at once, a new profile file, and the side column's width."""

import dataclasses
import threading

import pytest
from textual.widgets import Input, Static

from backends.machine.presets import preset
from ltx_tui.app import LtxTuiApp
from test_app import FakeNvml, fake_gpu, make_app, wait_for


def text(app, selector):
    return str(app.query_one(selector, Static).render())


async def open_run(pilot) -> Input:
    """w: the Plan tab, the focus in its resolution input (returned)."""
    await pilot.press("w")
    await pilot.pause()
    field = pilot.app.query_one("#run-resolution", Input)
    assert pilot.app.focused is field
    return field


async def set_run(pilot, resolution=None, frames=None, batch=None, enter=True):
    """Type into the Plan tab's run inputs (w opens it in the resolution input), then enter."""
    if not isinstance(pilot.app.focused, Input):  # in a field, w is a letter
        await open_run(pilot)
    for name, value in (("resolution", resolution), ("frames", frames), ("batch", batch)):
        if value is not None:
            field = pilot.app.query_one(f"#run-{name}", Input)
            field.focus()
            await pilot.pause()  # the field left is applied first, as when typing
            field.value = value  # as typed (test_w_opens_the_run_inputs... types with the keys)
    if enter:
        await pilot.press("enter")
    await pilot.pause()


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_the_plan_tab_sets_the_run_that_memory_and_the_tune_use():
    shapes_tuned = []

    def tuner(profile, cap, shapes, on_event, cancel):
        from backends.machine.tuned import Tuned

        shapes_tuned.append(shapes.label)
        return Tuned(cap.fingerprint(), shapes.label, ())

    app = make_app(dataclasses.replace(preset("h100"), source="live"), tuner=tuner)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        tabs = app.query_one("TabbedContent")
        assert tabs.active == "resolution" and str(tabs.get_tab("resolution").label) == "Plan"
        assert "768x512x121" in app.query_one("#memory-bars").text
        await set_run(pilot, frames="120")  # refused with the words of --frames, the run unchanged
        assert app.focused is app.query_one("#run-frames", Input)
        status = text(app, "#run-status")
        assert "frames 120: must be 8k+1" in status and "the run is still 768x512x121" in status
        await set_run(pilot, frames="0")
        assert "frames: '0' is not a whole number >= 1" in text(app, "#run-status")
        await set_run(pilot, resolution="770x512", frames="121")
        assert "multiples of 32" in text(app, "#run-status")
        assert app.run_shapes.label == "768x512x121" and "768x512x121" in app.query_one("#memory-bars").text
        await set_run(pilot, resolution="1536x1024")
        assert "use 1536x1024x121" in text(app, "#run-status") and "1536x1024x121:" in app.query_one("#memory-bars").text
        await set_run(pilot, batch="2", enter=False)
        assert "1536x1024x121 batch 2: enter applies" in text(app, "#run-status")  # typed, not applied yet
        assert "batch 2" not in app.query_one("#memory-bars").text
        await pilot.press("enter")
        await pilot.pause()
        assert "use 1536x1024x121 batch 2" in text(app, "#run-status")
        assert "1536x1024x121 batch 2" in app.query_one("#memory-bars").text
        await pilot.press("escape", "u")  # out of the inputs: the keys are the app's again
        await wait_for(pilot, lambda: shapes_tuned)
        assert shapes_tuned == ["1536x1024x121 batch 2"]


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes
async def test_every_problem_of_the_run_shape_is_shown_at_once():
    """A bad resolution and bad frames showed only the first problem: each field's now, one a line."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await set_run(pilot, resolution="770x512", frames="12x", batch="0", enter=False)
        lines = text(app, "#run-status").splitlines()
        assert [line.split(":")[0] for line in lines[:3]] == ["resolution 770x512", "frames", "batch"]
        assert "'12x' is not a whole number" in lines[1] and lines[-1] == "the run is still 768x512x121"
        assert len(lines) == 4 and app.query_one("#run-status").size.height >= 4  # none cut
        await set_run(pilot, resolution="abc", frames="120", batch="1", enter=False)
        lines = text(app, "#run-status").splitlines()
        assert lines[0].startswith("resolution 'abc': expected WIDTHxHEIGHT") and "frames 120: must be 8k+1" in lines[1]


async def test_the_plan_tab_refuses_frames_beyond_the_bound():
    """80000001 frames planned 2.8 PB: refused, with the range and the fix."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await set_run(pilot, frames="80000001")
        assert "frames 80000001: must be 8k+1 from 1 to 1025" in text(app, "#run-status")
        assert "use at most 1025" in text(app, "#run-status") and app.run_shapes.frames == 121


async def test_a_cpu_tune_of_ltx2s_shapes_is_refused_at_once_with_the_reason():
    called = []
    cpu = dataclasses.replace(preset("cpu"), source="live")
    app = make_app(cpu, tuner=lambda *a: called.append(a))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        await wait_for(pilot, lambda: "Not tuned" in text(app, "#tune-status"))
        status = text(app, "#tune-status")
        assert "no CUDA device here" in status and "768x512x121" in status and "Plan tab's run (w) at 224x224" in status
        assert "--resolution" not in status  # the app's words, not the command line's
        assert called == [] and app._tune_cancel is None


async def test_a_refused_tune_leaves_the_tables_earlier_rows():
    """A user trial: u refused on a CPU (at 768x512x121) emptied the table of the 224x224x9 tune
    shown before it, for good."""
    from textual.widgets import DataTable

    from backends.machine.tuned import Candidate, Tuned
    from ltx_tui.widgets.tune_panel import TunePanel

    cpu = dataclasses.replace(preset("cpu"), source="live")
    app = make_app(cpu, tuner=lambda *a: None)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        rows = (Candidate("transformer.attention", "sdpa_math", "measured", ms=1220.0),
                Candidate("transformer.attention", "pytorch", "measured", ms=578.0))
        app.query_one(TunePanel).show(Tuned("fp", "224x224x9", rows))
        await pilot.press("u")
        await wait_for(pilot, lambda: "Not tuned" in text(app, "#tune-status"))
        assert app.query_one("#tune-panel DataTable", DataTable).row_count == 2


async def test_the_tune_and_smoke_tabs_show_the_highlighted_rows_whole_reason():
    """A user trial at 80x24: the reason / message column was cut at both edges when scrolled to, with
    no other place to read it."""
    from textual.widgets import DataTable

    from backends.machine.tuned import Candidate, Tuned
    from backends.smoke import CheckResult, CheckSpec
    from ltx_tui.widgets.smoke_panel import SmokePanel
    from ltx_tui.widgets.tune_panel import TunePanel

    long = "stopped after 38.6 s: over 5x the 7.72 s that measuring triton took (its first call compiles)"
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        rows = (Candidate("diffvae.na_backend", "triton", "measured", ms=320.0),
                Candidate("diffvae.na_backend", "natten:flex-fna", "skipped", reason=long))
        app.query_one(TunePanel).show(Tuned("fp", "224x224x9", rows))
        table = app.query_one("#tune-table", DataTable)
        table.focus()
        await pilot.press("down")
        await pilot.pause()
        assert text(app, "#tune-detail") == f"diffvae.na_backend = natten:flex-fna: skipped: {long}"
        await pilot.press("t")
        smoke = app.query_one(SmokePanel)
        smoke.start([CheckSpec("na3d triton", "na3d", "cpu", {})])
        smoke.result(0, CheckResult("na3d triton", "error", 1.0, None, long))
        await pilot.pause()
        assert text(app, "#smoke-detail") == f"na3d triton: error: {long}"
        smoke.preparing("planning")  # a new run: no detail of a row that is gone (a review found it kept)
        app.query_one(TunePanel).start("224x224x9")
        await pilot.pause()
        assert not app.query_one("#smoke-detail").display and not app.query_one("#tune-detail").display


async def test_a_wide_tune_table_cuts_its_reasons_to_the_width_instead_of_scrolling():
    """A user trial at 200 columns: the reason column was as wide as the longest reason, so the table
    scrolled sideways there too; it now takes what the other columns leave (the detail line has it whole),
    and gets it back when the terminal widens."""
    from textual.widgets import DataTable

    from backends.machine.tuned import Candidate, Tuned
    from ltx_tui.widgets.tune_panel import REASON_CELLS, TunePanel

    long = "not in the default set: on the H200 it decoded slower than chunked_compile at 1.7x its decode memory " * 3
    rows = (Candidate("diffvae.mode", "chunked_eager", "measured", ms=1190.0, max_error=1e-3),
            Candidate("diffvae.mode", "combined_compile", "skipped", reason=long),
            Candidate("transformer.attention", "sdpa_cudnn", "measured", ms=3.2, max_error=2e-3),
            Candidate("diffvae.na_backend", "natten:blackwell-fna", "skipped", reason=long),  # the widest of each
            Candidate("transformer.quantization", "fp8-scaled-mm", "measured", ms=12430.0, max_error=2e-2,
                      warmup_s=12.5, warmup_cached_s=3.25))
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        app.query_one(TunePanel).show(Tuned("fp", "224x224x9", rows))
        await pilot.pause()
        table = app.query_one("#tune-table", DataTable)
        assert table.max_scroll_x == 0 and table.virtual_size.width <= table.size.width
        assert REASON_CELLS < table.columns["reason"].width < len(long)
        cell = table.get_row("diffvae.mode=combined_compile")[-1]
        assert str(cell).endswith("…") and len(str(cell)) == table.columns["reason"].width  # said where it is cut
        table.focus()
        await pilot.press("down")
        await pilot.pause()
        assert text(app, "#tune-detail").endswith(long) and table.cursor_row == 1
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert table.columns["reason"].width == REASON_CELLS and table.cursor_row == 1  # scrolls to it, kept on its row
        await pilot.resize_terminal(220, 50)
        await pilot.pause()
        await pilot.pause()
        assert table.max_scroll_x == 0 and table.columns["reason"].width > REASON_CELLS


async def test_a_tune_under_a_preset_says_it_probes_this_machine_at_once_and_probes_it_once():
    """The options validated for preset h200, on a CPU box: u says at once that it probes this
    machine (the tune times it, not the preset); the CPU's refusal follows the probe; a second u
    and a smoke run reuse that probe."""
    gate, probed, called = threading.Event(), [], []

    def prober():
        gate.wait(10)
        probed.append(1)
        return dataclasses.replace(preset("cpu"), source="live")

    app = make_app("h200", prober=prober, tuner=lambda *a: called.append(a),
                   smoke_runner=lambda specs, cancel, on_start, on_result: [])
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        await pilot.pause()
        status = text(app, "#tune-status")
        assert "probing this machine" in status and "validated for preset h200" in status  # before the probe answers
        gate.set()
        await wait_for(pilot, lambda: "Not tuned" in text(app, "#tune-status"))
        assert "no CUDA device here" in text(app, "#tune-status") and app._tune_cancel is None
        await pilot.press("u")
        await wait_for(pilot, lambda: app._tune_cancel is None)
        assert "probing" not in text(app, "#tune-status") and "Not tuned" in text(app, "#tune-status")
        await pilot.press("s")
        await pilot.pause()
        assert "probing" not in text(app, "#smoke-status")
        await wait_for(pilot, lambda: app._smoke_cancel is None)
        assert probed == [1] and called == []


async def test_smoke_says_what_it_does_at_once_while_the_machine_is_probed():
    gate = threading.Event()

    def prober():
        gate.wait(10)
        return dataclasses.replace(preset("h100"), source="live")

    app = make_app(prober=prober, smoke_runner=lambda specs, cancel, on_start, on_result: [])
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        assert "probing this machine" in text(app, "#smoke-status")  # before the probe answers
        gate.set()
        await wait_for(pilot, lambda: app._smoke_cancel is None)
        assert "probing" not in text(app, "#smoke-status")


async def test_a_profile_that_could_not_be_loaded_is_said_so_in_the_header(tmp_path):
    """A user trial: the header named the broken file as if it were being edited, while the banner
    said the default profile was."""
    path = tmp_path / "broken.toml"
    path.write_text("[transformer]\nquantisation = 1\n")
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.sub_title.endswith(f"{path} (not loaded)")  # the banner says the default profile is edited


async def test_a_profile_that_does_not_exist_yet_is_said_to_be_new(tmp_path):
    path = tmp_path / "new.toml"
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert app.sub_title.endswith(f"{path} (new file)")
        said = [n.message for n in app._notifications]
        assert any("does not exist yet" in m and "export (e) creates it" in m for m in said)
        assert not app.problems  # not an error: nothing in the banner


async def test_a_dangling_link_as_the_profile_names_the_file_the_export_creates(tmp_path):
    """It said "(new file)" of the link, and the export then created the link's target silently."""
    link = tmp_path / "p.toml"
    link.symlink_to(tmp_path / "target.toml")
    app = make_app(profile_path=str(link))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert app.sub_title.endswith(f"{link} (new file: the link's target {tmp_path / 'target.toml'})")
        said = [n.message for n in app._notifications]
        assert any(f"a symbolic link to {tmp_path / 'target.toml'}, which does not exist yet" in m
                   and "export (e) creates the target" in m for m in said), said


async def test_at_120_columns_the_side_column_leaves_the_tabs_80():
    app = LtxTuiApp(None, preset("h100"), nvml_module=FakeNvml([fake_gpu(0)]), env={}, poll_interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.query_one("#side").size.width <= 40
        assert app.query_one("#tabs").size.width >= 80


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_w_opens_the_run_inputs_and_escape_leaves_them():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        field = await open_run(pilot)
        field.clear()
        await pilot.press(*"1024x576", "escape")  # leaving the field applies a valid run
        await pilot.pause()
        assert app.run_shapes.label == "1024x576x121" and app.focused is app.query_one("#resolution-table")
        await pilot.press("q")  # the app's keys again
        await pilot.pause()
    assert not app.is_running


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
async def test_escape_from_a_refused_run_puts_the_run_in_use_back_in_its_fields():
    """Escape from an emptied width field left it empty, 'resolution '': expected WIDTHxHEIGHT' on
    screen, and the field still refused when the Plan tab was shown again."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        field = await open_run(pilot)
        field.clear()
        await pilot.pause()
        assert "expected WIDTHxHEIGHT" in str(app.query_one("#run-status", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert field.value == "768x512" and app.run_shapes.label == "768x512x121"
        assert "expected" not in str(app.query_one("#run-status", Static).render())
        assert app.focused is app.query_one("#resolution-table")
        field = await open_run(pilot)
        field.clear()
        await pilot.press(*"1024x576", "enter")  # a valid run is applied as before
        await pilot.pause()
        assert app.run_shapes.label == "1024x576x121"


async def test_the_apps_plan_checks_the_token_cap_at_its_run():
    """The app decides the run-dependent rules (the sequence-parallel token cap) at its run shape, as
    --check does with --resolution/--frames (it said "not checked: no run given")."""
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.rules import Status
    from test_app import make_app

    app = make_app("h200x4")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        app.set_option("transformer.quantization", "fp8-cast")
        app.set_option("parallel.gpus", 4)
        assert app.decisions["parallel.gpus"].status is Status.OK
        app.run_shapes = RunShapes(2048, 1152, 121)
        app._resolve()
        d = app.decisions["parallel.gpus"]
        assert d.status is Status.ERROR and "32768" in d.message


async def test_keys_that_arrive_together_are_applied_in_order():
    """A terminal or an SSH link can deliver several keys at once. Textual's Input ran bound keys
    (backspace, delete, home) after later typed characters: in tmux "224x22" + backspace + "9" stayed
    "224x22" (Textualize/textual#6605). Every text field of the app takes them in order."""
    from textual import events

    from ltx_tui.widgets.ordered_input import OrderedInput

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        field = await open_run(pilot)
        assert isinstance(field, OrderedInput)
        field.value, field.cursor_position = "224x22", 6
        for key, character in (("backspace", "\x7f"), ("9", "9"), ("backspace", "\x7f"), ("6", "6"),
                               ("home", None), ("delete", None), ("3", "3")):
            app.post_message(events.Key(key, character))  # all queued before any is handled
        await pilot.pause()
        assert field.value == "324x26"


async def test_keys_after_a_tab_that_arrive_with_it_go_to_the_next_field():
    """"224x224", tab, ctrl+a, ctrl+k, "9", enter in one go: the keys after the tab had gone to the
    resolution field (the tab moved the focus only once it bubbled up to the screen)."""
    from textual import events

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        field, frames = await open_run(pilot), app.query_one("#run-frames", Input)
        field.value, field.cursor_position = "", 0
        keys = [(c, c) for c in "224x224"] + [("tab", "\t"), ("ctrl+a", "\x01"), ("ctrl+k", "\x0b"), ("9", "9"),
                                               ("enter", "\r")]
        for key, character in keys:
            app.post_message(events.Key(key, character))  # all queued before any is handled
        await pilot.pause()
        await pilot.pause()
        assert (field.value, frames.value) == ("224x224", "9")
        assert app.run_shapes.label == "224x224x9"


async def test_keys_after_an_escape_that_arrive_with_it_leave_the_field():
    """escape (the Plan form's binding: back to the table), then "o" in one go: the o had been typed
    into the resolution, not taken as the Options tab's key."""
    from textual import events

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        field = await open_run(pilot)
        before = field.value
        for key, character in (("escape", "\x1b"), ("o", "o")):
            app.post_message(events.Key(key, character))
        await pilot.pause()
        await pilot.pause()
        assert field.value == before and app.query_one("TabbedContent").active == "options"


def test_every_text_field_of_the_app_takes_keys_in_order():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "ltx_tui"
    plain = [f"{p.name}:{n}" for p in root.rglob("*.py") for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"(?<!Ordered)Input\(", line) and "class OrderedInput" not in line]
    assert plain == []


async def test_auto_follows_the_tune_at_the_plan_tabs_run_and_says_when_there_is_none():
    """A tune of a tiny run drove `auto` for the real one with nothing shown: the Tune tab now takes the
    tune at the Plan tab's run where one is cached, and says when it shows another shape's."""
    from backends.machine.tuned import Candidate, Tuned, store_tuned

    cap = dataclasses.replace(preset("h200"), source="live")
    na = "diffvae.na_backend"

    def tune(shapes, fast, slow, written):
        return dataclasses.replace(Tuned(cap.fingerprint(), shapes, (Candidate(na, fast, "measured", 1.0, 1e-3),
                                                                      Candidate(na, slow, "measured", 5.0, 1e-3))),
                                   written=written)
    store_tuned(cap, tune("768x512x121", "eager_sdpa", "triton", "2026-11-30T10:00:00+00:00"))
    store_tuned(cap, tune("1536x1024x121", "triton", "eager_sdpa", "2026-11-30T09:00:00+00:00"))
    app = make_app(None, prober=lambda: cap)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.tuned is not None and app.decisions)
        assert app.tuned.shapes == "768x512x121" and app.decisions[na].effective == "eager_sdpa"
        await set_run(pilot, resolution="1536x1024")
        await wait_for(pilot, lambda: app.tuned.shapes == "1536x1024x121")
        assert app.decisions[na].effective == "triton" and "not this run's" not in text(app, "#tune-status")
        await set_run(pilot, resolution="1024x1024")
        await wait_for(pilot, lambda: "not this run's 1024x1024x121" in text(app, "#tune-status"))
        assert "measured at 768x512x121" in text(app, "#tune-status")  # the latest, said to be another shape's


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
async def test_enter_applies_the_run_and_gives_the_keys_back():
    """After enter the field kept the focus: `n` then typed into it ("768x512n"), not the Tune tab."""
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await set_run(pilot, resolution="1024x512")  # applied with enter
        assert app.run_shapes.label == "1024x512x121" and not isinstance(app.focused, Input)
        await pilot.press("n")
        await pilot.pause()
        assert app.query_one("TabbedContent").active == "tune"
        await set_run(pilot, frames="120")  # refused: the field keeps the focus to fix it
        assert app.focused is app.query_one("#run-frames", Input)


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
async def test_the_plan_table_keeps_an_effective_value_too_long_for_its_line(tmp_path):
    """`combined_compile → combined_compile` is wider than the option column: the row of two lines cut
    the effective value off, at 80 and at 200 columns. Now it gets a line of its own."""
    from textual.widgets import DataTable

    path = tmp_path / "long.toml"
    path.write_text('[diffvae]\nmode = "combined_compile"\n[compile]\nenabled = true\nmode = "max-autotune-no-cudagraphs"\n')
    for size in ((80, 24), (200, 50)):
        app = make_app(profile_path=str(path))
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await pilot.press("r")
            await pilot.pause()
            table = app.query_one("#resolution-table", DataTable)
            for option, value in (("diffvae.mode", "combined_compile"), ("compile.mode", "max-autotune-no-cudagraphs")):
                cell = str(table.get_row(option)[1])
                assert cell.splitlines()[-1].strip() == value and table.rows[option].height == 3
            short = str(table.get_row("transformer.quantization")[1])
            assert len(short.splitlines()) == 2 and table.rows["transformer.quantization"].height == 2


def test_the_plan_says_cannot_run_and_unused_not_a_dash():
    """The Plan tab showed "1 → -" for an option in error (parallel.gpus on a CPU) and "-: unused: ..."
    in its detail; the Options tab and --explain say cannot run / unused."""
    from backends.config.plan import resolve
    from backends.config.options import Profile
    from ltx_tui.widgets.resolution import detail_text

    plan = resolve(Profile(), preset("cpu"))
    gpus, slots = plan["parallel.gpus"], plan["offload.gpu_slots"]
    assert gpus.effective_text == "cannot run" and slots.effective_text == "unused"
    detail = detail_text(slots).plain
    assert "2 → unused (ok)" in detail and "-:" not in detail


async def test_a_why_longer_than_its_rows_ends_in_an_ellipsis():
    """A trial at 80x24: a reason over its row's two lines was cut mid-word with nothing to say so."""
    from rich.cells import cell_len
    from textual.widgets import DataTable

    app = make_app("cpu")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        table = app.query_one("#resolution-table", DataTable)
        width = table.columns["why"].width
        cut = []
        for key, row in table.rows.items():
            lines = str(table.get_row(key)[2]).splitlines()
            assert len(lines) <= row.height and all(cell_len(line) <= width for line in lines)
            if lines[-1].endswith("…"):
                cut.append(key.value)
        assert "diffvae.mode" in cut  # its reason, for one, is longer than two lines of 20-odd cells
        table.move_cursor(row=table.get_row_index("diffvae.mode"))
        await pilot.pause()
        whole = " ".join(str(app.query_one("#detail").render()).split())  # the line under the table has it whole
        assert "decode; --tune measures it on a CUDA GPU, not on the CPU): chunked decode, eager" in whole
