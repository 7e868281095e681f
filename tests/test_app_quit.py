"""Quitting the app: q, ctrl+c, the palette's Quit and a SIGTERM cancel a running tune first (its
workers' process groups are killed, so nothing runs on after the app), and every way to quit asks
first when the profile has unsaved changes."""

import dataclasses
import os
import signal
import sys
import time

import pytest

from backends.machine.presets import preset
from backends.machine.tuned import load_tuned
from backends.tune import run as runmod
from groups import SLEEPER, alive, groups, wait_gone
from ltx_tui.screens.confirm import ConfirmScreen
from test_app import choose, make_app, wait_for


@pytest.fixture
def sleeping_workers(tmp_path, monkeypatch):
    """The tune's workers are SLEEPER (a hung kernel with a forked child); their groups' file."""
    path = tmp_path / "groups"
    monkeypatch.setenv("GROUPS", str(path))
    monkeypatch.setattr(runmod, "worker_argv", lambda: [sys.executable, "-c", SLEEPER])
    yield path
    for pgid in groups(path):  # a failed test leaves nothing running either
        if alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def live_h100():
    return dataclasses.replace(preset("h100"), source="live")


async def test_quitting_during_a_tune_kills_its_workers(sleeping_workers):
    app = make_app(live_h100())  # the real tuner (`ltx-tui --tune`'s), its workers replaced
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("u")
        await wait_for(pilot, lambda: len(groups(sleeping_workers)) >= 2)  # measuring, the next one started
        pgids = groups(sleeping_workers)
        await pilot.press("q")  # a tune is going: asked first (before, q quit and stopped it at once)
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.is_running
        question = str(app.screen.query_one(".question").render())
        assert "A tune is running" in question and "Stop it and quit?" in question
        await pilot.press("n")  # Stay: the tune goes on
        await pilot.pause()
        assert app.is_running and app._tune_cancel is not None and not app._tune_cancel.is_set()
        assert all(alive(g) for g in pgids[-1:])
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("q")  # the same key again quits
        await pilot.pause()
    assert not app.is_running
    assert wait_gone(pgids) == []
    for _ in range(100):  # the tune's thread ends with what it had: the killed worker is "cancelled"
        cached = load_tuned(live_h100(), "768x512x121")
        if cached is not None:
            break
        time.sleep(0.05)
    assert not [c for c in cached.candidates if c.status == "failed"]
    assert {c.reason for c in cached.candidates if c.option == "diffvae.na_backend"} >= {"cancelled"}


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_ctrl_c_and_the_palettes_quit_ask_when_there_are_unsaved_changes():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await choose(pilot, "offload.mode", "cpu")
        quit_command = next(c for c in app.get_system_commands(app.screen) if c.title == "Quit")
        app.call_later(quit_command.callback)  # what the command palette does with it
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press("ctrl+c")  # the same key again at the question quits
        await pilot.pause()
        assert app.return_code == 0  # exit() was called (leaving run_test's block would stop any app)


async def test_ctrl_c_quits_and_help_says_so():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        keys = {app.get_key_display(b): b.description for b in app.BINDINGS}
        assert keys["^c"].startswith("Quit")
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running


async def test_a_signal_quits_at_once_and_kills_the_workers(sleeping_workers):
    signum = signal.SIGTERM  # SIGHUP and SIGINT take the same way, without the goodbye line for SIGHUP
    hit = []

    def noted(*_):  # without the app's handler the signal is noted here, not fatal to the test run
        hit.append(signum)

    before = signal.signal(signum, noted)
    try:
        app = make_app(live_h100(), handle_signals=True)
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.pause()
            await choose(pilot, "offload.mode", "cpu")  # unsaved changes: a signal does not ask
            await pilot.press("u")
            await wait_for(pilot, lambda: len(groups(sleeping_workers)) >= 2)
            pgids = groups(sleeping_workers)
            os.kill(os.getpid(), signum)
            await wait_for(pilot, lambda: not app.is_running)
        assert app.return_code == 128 + signum and not hit
        assert wait_gone(pgids) == []
        assert signal.getsignal(signum) is noted  # the handler from before the app is back
    finally:
        signal.signal(signum, before)


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_the_same_key_again_at_the_quit_question_quits(key):
    """The question says "the same key again quits": with the dialog's button focused too (a user
    found q and ctrl+c swallowed by the dialog, only ctrl+q quit)."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # the first option's next value: unsaved changes
        await pilot.pause()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.dirty
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.is_running
        await pilot.press(key)
        await pilot.pause()
        assert app.return_code == 0  # exit() was called (leaving run_test's block would stop any app)


async def test_a_change_set_back_leaves_nothing_unsaved():
    """Changing an option and setting it back kept the '*' and the quit question."""
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        was = str(app.profile.get("offload.mode"))
        await choose(pilot, "offload.mode", "cpu")
        assert app.dirty and app.sub_title.endswith(" *")
        await choose(pilot, "offload.mode", was)
        assert not app.dirty and not app.sub_title.endswith(" *")
        await pilot.press("q")  # nothing to lose: no question
        await pilot.pause()
        assert app.return_code == 0


async def test_a_long_profile_path_keeps_its_name_and_the_unsaved_mark_in_the_header(tmp_path):
    """At 80 columns the header cut a long path's end, and the '*' with it; now the path loses its
    middle and the rest fits, and a wider terminal shows it whole again."""
    from rich.cells import cell_len
    from textual.widgets._header import HeaderTitle

    folder = tmp_path / ("a folder with a long [bold] name" * 2)
    folder.mkdir()
    path = folder / "profile.toml"
    path.write_text("")
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await choose(pilot, "offload.mode", "cpu")
        await pilot.pause()
        title = app.screen.query_one(HeaderTitle)
        shown = str(title.render())
        assert cell_len(shown) <= title.size.width and shown.endswith("profile.toml *") and "…" in shown
        assert app.sub_title.endswith(f"{path} *")  # the whole path is still the app's subtitle
        await pilot.resize_terminal(240, 30)
        await pilot.pause()
        await pilot.pause()
        assert str(title.render()).endswith(f"{path} *")


def test_a_wide_character_path_is_cut_to_the_header_cells_not_its_characters():
    """middle_cut counted characters: a path of CJK names (two cells each) came out twice the width
    it was given, and the header cut its end (the file name and the unsaved mark) again."""
    from rich.cells import cell_len

    from ltx_tui.app import middle_cut

    path = "/データ" * 20 + "/プロファイル.toml *"
    for width in (9, 30, 31, 80):
        shown = middle_cut(path, width)
        assert cell_len(shown) <= width and "…" in shown and shown.endswith(" *")
    assert middle_cut(path, 30).endswith("ファイル.toml *")
    assert middle_cut("/short/profile.toml", 30) == "/short/profile.toml"
    # a header too narrow for even 9 cells of a short name: "s.toml" came out as "s.t….toml", longer
    assert middle_cut("s.toml", 2) == "s.toml" and middle_cut("profile.toml", 4) == "pro….toml"


async def test_the_quit_question_follows_a_smoke_run_that_ends_while_it_is_shown():
    """It kept saying "A smoke run is going" after the run had finished: now it says what is left
    (nothing: the run finished, quit?), and a question about unsaved changes stays one."""
    import threading

    from textual.widgets import Label

    release = threading.Event()

    def runner(specs, cancel, on_start, on_result):
        release.wait(10)
        return []

    app = make_app(smoke_runner=runner, smoke_capability=preset("h100"))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await wait_for(pilot, lambda: app._smoke_cancel is not None)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = lambda: str(app.screen.query_one(".question", Label).render())
        assert "smoke run is going" in question()
        release.set()
        await wait_for(pilot, lambda: "smoke run is going" not in question())
        assert question().startswith("The smoke run has ended. Quit?")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None)
