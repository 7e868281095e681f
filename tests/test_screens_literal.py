"""Issue 19, item 2: every dialog shows paths, values and messages literally: text like `[/]`,
`[h100]` or `[red]` is never markup (a MarkupError crashed the app, `[h100]` vanished), and
control characters are shown escaped. Each screen of ltx_tui/screens is checked on screen."""

import html
import re
from pathlib import Path

import pytest
from textual.widgets import Input, TextArea

from backends.config.options import OPTIONS_BY_KEY
from backends.config.rules import Status
from ltx_tui.screens.confirm import ConfirmScreen
from ltx_tui.screens.edit import ChoiceScreen, ValueScreen
from ltx_tui.screens.export import ExportScreen
from ltx_tui.screens.help import HelpScreen
from test_app import edit, make_app

SIZE = (200, 50)  # wide enough that no tested line wraps


def on_screen(app) -> str:
    """The terminal's text, row by row, as the app drew it."""
    rows: dict[float, list[str]] = {}
    for y, body in re.findall(r'<text[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', app.export_screenshot(), re.S):
        rows.setdefault(float(y), []).append(html.unescape(re.sub("<[^>]+>", "", body)))
    return "\n".join("".join(parts) for _, parts in sorted(rows.items())).replace("\xa0", " ")


async def test_confirm_shows_the_question_and_answers_literally():
    app = make_app()
    answers = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(ConfirmScreen("/tmp/x[/]y [h100].toml exists. Overwrite it?", "[b]Over[/]write", "Keep [red]"),
                        answers.append)
        await pilot.pause()
        text = on_screen(app)
        assert "/tmp/x[/]y [h100].toml exists. Overwrite it?" in text
        assert "[b]Over[/]write (y)" in text and "Keep [red] (n)" in text
        await pilot.press("y")
        await pilot.pause()
        assert answers == [True] and app.is_running


async def export_to(pilot, path):
    """e, the path typed into the export dialog, enter."""
    await pilot.press("e")
    await pilot.pause()
    pilot.app.screen.query_one("#path", Input).value = str(path)
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes
async def test_export_over_an_existing_bracketed_path_asks_literally_and_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative path: the question fits on one line of the dialog
    path = Path("x[") / "]y [h100].toml"  # the path holds "[/]" and "[h100]"
    path.parent.mkdir()
    path.write_text("keep")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await export_to(pilot, path)
        assert isinstance(app.screen, ConfirmScreen)
        assert f"{path} exists. Overwrite it?" in on_screen(app)
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen) and "schema_version" in path.read_text()
        assert f"wrote {path}; ctrl+r and ctrl+y copy the lines below" in on_screen(app)


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_export_shows_control_characters_escaped_and_the_run_line_in_one_piece(tmp_path):
    path = tmp_path / "a\nb\x1b[2J.toml"
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await export_to(pilot, path)
        assert path.exists()
        shown = str(path).replace("\n", "\\n").replace("\x1b", "\\x1b")
        assert f"wrote {shown};" in on_screen(app)
        run_line = app.screen.query_one("#run-command", TextArea).text
        assert "\n" not in run_line and "\x1b" not in run_line and f"--profile $'{shown}'" in run_line
        assert "\x1b" not in app.screen.query_one("#ltx-args", TextArea).text


async def test_the_chooser_shows_reasons_literally():
    app = make_app()
    spec = OPTIONS_BY_KEY["transformer.sparse_attention"]
    marks = {"sla": (Status.ERROR, "needs [red]turbo[/] from /opt/x[/]y (package reason from a capability file)")}
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(ChoiceScreen(spec, "none", marks))
        await pilot.pause()
        assert "needs [red]turbo[/] from /opt/x[/]y" in on_screen(app)


async def test_the_value_editor_shows_typed_text_literally():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await edit(pilot, "parallel.gpus")
        assert isinstance(app.screen, ValueScreen)
        app.screen.query_one("#value", Input).value = "[red]x[/]"
        await pilot.press("enter")
        await pilot.pause()
        assert "parallel.gpus: '[red]x[/]' is not an integer" in on_screen(app)  # the dialog wraps the rest


async def test_help_shows_keys_and_actions_literally():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(HelpScreen([("[b]k[/]", "quit [red]now[/] at /tmp/x[/]y")]))
        await pilot.pause()
        text = on_screen(app)
        assert "[b]k[/]" in text and "quit [red]now[/] at /tmp/x[/]y" in text


@pytest.mark.slow  # ~3 s on 2 cores: the quick suite stays under 4 minutes
async def test_export_over_a_profile_that_could_not_be_loaded_says_its_settings_go(tmp_path, monkeypatch):
    """A user trial: `--profile "uk [red]x.toml"` (an unknown key) edits the default profile, and the
    export asked only "exists. Overwrite it?" before replacing the user's file with the defaults."""
    monkeypatch.chdir(tmp_path)
    path = Path("uk [red]x.toml")
    path.write_text('[transformer]\nquantisation = "fp8-cast"\n')
    app = make_app(profile_path=str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await export_to(pilot, path)
        assert isinstance(app.screen, ConfirmScreen)
        assert f"{path} could not be loaded, so its settings are not the ones" in on_screen(app)  # the line wraps
        await pilot.press("n")
        await pilot.pause()
        assert "quantisation" in path.read_text()
        await export_to(pilot, tmp_path / "other.toml")  # another file: the plain write
        assert "wrote" in on_screen(app) and (tmp_path / "other.toml").exists()
