"""The Runs tab (the ledger of `ltx-tui run`) and the run line of the export dialog."""

import dataclasses
import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static, TextArea

from backends.machine import runs
from backends.machine.runs import ModelRecord, RunRecord, StageRecord
from ltx_tui.screens.export import ExportScreen
from ltx_tui.widgets.runs_panel import RunsPanel
from test_app import make_app, wait_for

OLDER = RunRecord(
    id="20261130-221503-1a2b", started="2026-11-30T22:15:03+00:00", module="ltx_pipelines.distilled",
    status="ok", exit=0, wall_s=61.4, ltx_argv=("--prompt", "a cat", "--height", "512"),
    device={"name": "NVIDIA H200"}, shape={"width": 768, "height": 512, "frames": 121},
    profile={"path": "h200.toml"},
    models=(ModelRecord("LTXModel", "denoising 1", 12.5, 1.25, True),
            ModelRecord("GemmaTextEncoder", "text encoding", 6.2, 0.0, False)),
    stages=(StageRecord("text encoding", "text_encoder", 7.1, peak_allocated_gib=24.6),
            StageRecord("denoising 1", "denoise", 20.0, peak_allocated_gib=40.0, predicted_gib=42.0,
                        step_seconds=(2.5,) * 8, forwards=8, predicted_stage="DiT denoising"),
            StageRecord("video decode", "video_decode", 6.0, peak_allocated_gib=30.0, predicted_gib=24.0)))
NEWER = RunRecord(
    id="20261201-090000-beef", started="2026-12-01T09:00:00+00:00", module="[red]x[/]", status="failed",
    exit=1, wall_s=3.0, error="RuntimeError: CUDA out of memory [b]boom[/b]",
    stages=(StageRecord("text encoding", "text_encoder", 2.0, peak_allocated_gib=24.0),))


def ledger(path: Path, *records: RunRecord, extra: str = "") -> Path:
    for r in records:
        runs.append(r, path)
    if extra:
        with open(path, "a") as f:
            f.write(extra)
    return path


async def open_runs(pilot):
    """Press l and wait until the worker's snapshot is on screen."""
    panel = pilot.app.query_one(RunsPanel)
    await pilot.press("l")
    await wait_for(pilot, lambda: panel.ledger is not None or panel.problem is not None)
    await pilot.pause()
    return panel


def rows(table: DataTable) -> list[dict[str, str]]:
    keys = [c.value for c in table.columns]
    return [dict(zip(keys, map(str, table.get_row_at(i)))) for i in range(table.row_count)]


def cut(table: DataTable) -> list[str]:
    """Columns narrower than their widest cell (the table measures cells when it is idle)."""
    return [c.value for i, c in enumerate(table.columns)
            if any(len(str(table.get_row_at(r)[i])) > table.ordered_columns[i].get_render_width(table) - 2
                   for r in range(table.row_count))]


def status(app) -> str:
    return str(app.query_one("#runs-status", Static).render())


async def test_runs_newest_first_and_the_stages_of_the_selected_one(tmp_path):
    app = make_app(ledger=ledger(tmp_path / "runs.jsonl", OLDER, NEWER))
    async with app.run_test(size=(80, 24)) as pilot:
        panel = await open_runs(pilot)
        assert app.query_one("TabbedContent").active == "runs"
        table = app.query_one("#runs-table", DataTable)
        assert app.focused is table
        listed = rows(table)
        assert [r["id"] for r in listed] == [NEWER.id, OLDER.id]
        assert listed[1] == {"id": OLDER.id, "module": "distilled", "status": "ok", "stage s": "33.10",
                             "GiB": "40.0", "exit": "0"}
        assert "2 run(s)" in status(app) and "skipped" not in status(app)
        stages_table = app.query_one("#stages-table", DataTable)
        assert stages_table.row_count == 1 and cut(stages_table) == [] and cut(table) == []
        await pilot.press("down")  # the cursor selects: the older run's stages below
        await pilot.pause()
        stages = {r["stage"]: r for r in rows(stages_table)}
        assert list(stages) == ["text encoding", "denoising 1", "video decode"]
        assert cut(stages_table) == [] and cut(app.query_one("#models-table", DataTable)) == []
        denoise = stages["denoising 1"]
        assert (denoise["s"], denoise["steps"], denoise["peak GiB"], denoise["plan"], denoise["err"]) == \
            ("20.00", "8×2.50", "40.0", "42.0", "+5.0%")
        assert denoise["time"] == "█" * 10  # the slowest stage: a full bar
        assert stages["video decode"]["err"] == "-20.0%"
        assert stages["text encoding"]["plan"] == stages["text encoding"]["err"] == ""  # no prediction
        models = rows(app.query_one("#models-table", DataTable))
        assert [(m["model"], m["load s"], m["apply s"], m["applied"]) for m in models] == \
            [("LTXModel", "12.50", "1.25", "yes"), ("GemmaTextEncoder", "6.20", "0.00", "no")]
        assert "768x512x121" in str(app.query_one("#run-summary", Static).render())
        assert panel.selected() == OLDER
        await pilot.press("enter")  # into the details
        await pilot.pause()
        assert app.focused is app.query_one("#runs-detail")


async def test_ledger_text_is_shown_literally(tmp_path):
    app = make_app(ledger=ledger(tmp_path / "runs.jsonl", NEWER))
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert rows(app.query_one("#runs-table", DataTable))[0]["module"] == "[red]x[/]"
        summary = str(app.query_one("#run-summary", Static).render())
        assert "[red]x[/]" in summary and "[b]boom[/b]" in summary
        screen = app.export_screenshot()
        assert "[red]x[/]" in screen and "[b]boom[/b]" in screen  # on screen as typed, not as markup


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_skipped_lines_are_counted_and_R_reloads(tmp_path):
    path = ledger(tmp_path / "runs.jsonl", OLDER, extra="{not json\n")
    app = make_app(ledger=path)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert "1 run(s)" in status(app) and "1 skipped" in status(app)
        runs.append(NEWER, path)
        await pilot.press("R")
        table = app.query_one("#runs-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 2)
        assert [r["id"] for r in rows(table)] == [NEWER.id, OLDER.id]
        await pilot.press("o", "R")  # from another tab: R opens the Runs tab
        await pilot.pause()
        assert app.query_one("TabbedContent").active == "runs"


async def test_missing_or_empty_ledger_shows_the_hint(tmp_path):
    app = make_app(ledger=tmp_path / "runs.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert "no runs yet: `ltx-tui run --profile P.toml -- ltx_pipelines.distilled ...` records one" \
            in status(app)
        assert app.query_one("#runs-table", DataTable).row_count == 0
        assert not app.query_one("#runs-detail").display
        await pilot.press("down", "up", "enter")  # an empty table: nothing to select, nothing breaks
        await pilot.pause()
        assert app.is_running


async def test_a_ledger_in_a_missing_folder_says_so_and_a_fresh_default_one_does_not(tmp_path, monkeypatch):
    """A --ledger path in a folder that does not exist said "no runs yet" as an empty ledger does;
    the default ledger's folder is made by the first run, so its absence is not news."""
    app = make_app(ledger=tmp_path / "none" / "runs.jsonl")
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert "does not exist either (check the path" in status(app)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "fresh"))
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert status(app).startswith("no runs yet:")


async def test_unreadable_ledger_says_why(tmp_path):
    app = make_app(ledger=tmp_path)  # a directory
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert f"cannot read the run ledger {tmp_path}: is a directory" in status(app)
        await pilot.press("R", "down", "enter")
        await pilot.pause()
        assert app.is_running


async def test_a_hand_edited_record_of_wrong_types_is_skipped_and_counted(tmp_path):
    bad = dataclasses.replace(OLDER, id="20261202-000000-0bad").to_dict()
    bad["stages"][1]["seconds"] = "fast"
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(bad) + "\n" + json.dumps(NEWER.to_dict()) + "\n")
    app = make_app(ledger=path)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        assert [r["id"] for r in rows(app.query_one("#runs-table", DataTable))] == [NEWER.id]
        assert "1 skipped" in status(app)


async def test_runs_table_fits_80_columns_and_shows_the_start_when_wide(tmp_path):
    app = make_app(ledger=ledger(tmp_path / "runs.jsonl", OLDER, NEWER))
    async with app.run_test(size=(80, 24)) as pilot:
        await open_runs(pilot)
        table = app.query_one("#runs-table", DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing cut
        assert "started" not in [c.value for c in table.columns]
        await pilot.resize_terminal(160, 48)
        await wait_for(pilot, lambda: "started" in [c.value for c in table.columns])
        assert rows(table)[1]["started"] == "2026-11-30 22:15"
        assert table.cursor_row == 0


async def test_export_shows_the_run_line(tmp_path):
    app = make_app()
    path = tmp_path / "p [x].toml"
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen)
        line = app.screen.query_one("#run-command", TextArea)
        assert line.text.startswith("ltx-tui run --profile ltx-profile.toml -- ltx_pipelines.distilled")
        assert not line.soft_wrap and line.read_only
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert line.text.startswith(f"ltx-tui run --profile '{path}' -- ")
        copied = []
        app.copy_to_clipboard = copied.append
        await pilot.press("ctrl+r", "ctrl+y")
        await pilot.pause()
        assert copied == [line.text, app.screen.query_one("#ltx-args", TextArea).text]


def test_snapshot_runs_80x24(snap_compare, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the status line shows the ledger path: the same in every checkout
    app = make_app(ledger=ledger(Path("runs.jsonl"), OLDER, NEWER, extra="{not json\n"))

    async def run_before(pilot):  # no key presses: outside run_test each one costs seconds
        await pilot.pause()
        pilot.app.action_tab("runs")
        await wait_for(pilot, lambda: pilot.app.query_one(RunsPanel).ledger is not None)
        pilot.app.query_one("#runs-table", DataTable).move_cursor(row=1)
        await pilot.pause()
        assert pilot.app.query_one("TabbedContent").active == "runs"

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


HOSTILE = dataclasses.replace(
    NEWER, module="ltx_pipelines.\x1b[32mGREEN", ltx_argv=("--prompt", "a cat \x1b[31mEVIL"),
    device={"name": "H200\x1b[2J"}, profile={"path": "p\x1b]0;title\x07.toml"},
    error="RuntimeError: \x1b[1mbold\nsecond line",
    stages=(StageRecord("denoising\x1b[5m 1", "denoise", 2.0),))


async def test_control_characters_of_the_ledger_never_reach_the_terminal(tmp_path):
    """A hand-edited record with escape sequences in its texts: the tab shows them escaped (before,
    the raw ESC coloured the module and moved the table's border)."""
    app = make_app(ledger=ledger(tmp_path / "run\x1b[7ms.jsonl", HOSTILE))
    async with app.run_test(size=(100, 30)) as pilot:
        panel = await open_runs(pilot)
        texts = [str(app.query_one(f"#{name}", Static).render()) for name in ("runs-status", "run-summary", "run-argv")]
        cells = [c for t in ("#runs-table", "#stages-table") for r in rows(app.query_one(t, DataTable)) for c in r.values()]
        assert not any("\x1b" in t or "\x07" in t for t in texts + cells)
        assert rows(app.query_one("#runs-table", DataTable))[0]["module"] == "\\x1b[32mGREEN"
        assert "\\x1b[31mEVIL" in texts[2] and "H200\\x1b[2J" in texts[1] and "\\x1b]0;title\\x07" in texts[1]
        assert "\\x1b[1mbold\nsecond line" in texts[1]  # the error keeps its line break
        assert "run\\x1b[7ms.jsonl" in texts[0]
        assert panel.shown[0].stages[0].name == "denoising\\x1b[5m 1"
