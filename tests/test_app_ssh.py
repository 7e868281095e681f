"""The app over SSH (issue 18, item 7): what the options are validated for, the options' columns at
every width, the command palette, the processes on each GPU."""

import re
import threading
from dataclasses import replace

import pytest

from textual.widgets import Static

from backends.config.options import OPTIONS, CompileEnabled
from backends.machine.presets import preset
from fakes import FakeNvml, NVMLError_LibraryNotFound, NVMLError_NoPermission, fake_gpu
from ltx_tui.app import LtxTuiApp
from ltx_tui.screens.edit import ValueScreen
from ltx_tui.screens.explain import ExplainScreen
from ltx_tui.widgets.options_list import OptionsList
from test_app import entry, make_app, row_lines, wait_for
from test_profile import BROKEN


async def test_option_columns_stay_apart_at_120_columns():
    app = make_app("h200", profile_path=str(BROKEN.parent / "good" / "every_key.toml"))
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        firsts = {spec.key: row_lines(app, spec.key)[0] for spec in OPTIONS}
        arrows = {key: line.index("→") for key, line in firsts.items() if "→" in line}
        assert len(arrows) == len(OPTIONS) and len(set(arrows.values())) == 1, firsts  # one column of arrows
        status = {key: max(line.rfind(s) for s in ("ok", "warning", "fallback", "error")) for key, line in firsts.items()}
        assert len(set(status.values())) == 1, firsts  # one status column
        for key, line in firsts.items():
            assert line[status[key] - 2:status[key]] == "  ", line  # never 'tritonok'
        lines = row_lines(app, "compile.mode")
        start, arrow = lines[0].index("max-"), arrows["compile.mode"]
        folded = [line[start:arrow].strip() for line in lines[:2]]  # the value's column
        assert "".join(folded) == "max-autotune-no-cudagraphs" and folded[0].endswith("-"), lines


async def palette(pilot, query, typed=False):
    """Open the command palette, enter `query` (typed key by key, or pasted: one search) and wait
    for its first hit."""
    from textual.command import CommandInput, CommandList, CommandPalette

    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
    if typed:
        await pilot.press(*query)
    else:
        pilot.app.screen.query_one(CommandInput).value = query
    hits = pilot.app.screen.query_one(CommandList)
    await wait_for(pilot, lambda: hits.option_count and str(hits.get_option_at_index(0).prompt).startswith(query))
    return [str(hits.get_option_at_index(i).prompt).split("\n")[0] for i in range(hits.option_count)]


async def run_command(pilot, query, reached):
    """Run the palette's first hit for `query` and wait until `reached()` holds."""
    await palette(pilot, query)
    await pilot.press("enter")
    await wait_for(pilot, reached)


@pytest.mark.slow  # 5 s; CI runs it
async def test_palette_sets_an_option_and_the_validation_follows():
    app = make_app("h100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert "compile.mode" in entry(app, "compile.mode") and "→ unused" in entry(app, "compile.mode")
        hits = await palette(pilot, "set compile.enabled = true", typed=True)
        assert hits[0] == "set compile.enabled = true"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.profile.compile.enabled is CompileEnabled.TRUE)
        assert app.dirty and "*" in app.sub_title
        assert re.search(r"compile\.enabled +true +→ true +ok", entry(app, "compile.enabled"))
        assert re.search(r"→ default +ok", entry(app, "compile.mode"))  # no longer unused
        assert next(d for d in app.decisions if d.option == "compile.mode").effective == "default"


async def test_palette_shows_a_bracketed_reason_literally():
    """A reason from an import error or a capability file reaches the palette's help: `[/opt/...` made
    Textual's markup raise (the app ended) and `[B]` vanished, though escaped with textual's escape."""
    from backends.machine.capability import Package

    cap = preset("h100")
    packages = dict(cap.packages)
    packages["flash_attn_3"] = Package("flash_attn_3", "flash_attn_interface", False,
                                       reason="import failed (see [/opt/fa3/log) [B]")
    app = make_app(replace(cap, packages=packages))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await palette(pilot, "set transformer.attention = flash_attention_3")
        from textual.command import CommandList

        hit = app.screen.query_one(CommandList).get_option_at_index(0)
        assert "import failed (see [/opt/fa3/log) [B]" in str(hit.prompt)


async def test_palette_explains_an_option_literally():
    from backends.config.plan import explain, resolve

    app = make_app("h100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await run_command(pilot, "explain diffvae.mode", lambda: isinstance(app.screen, ExplainScreen))
        shown = str(app.screen.query_one("#explanation", Static).content)
        assert shown == explain("diffvae.mode", resolve(app.profile, app.capability)).rstrip("\n")
        assert "diffvae.blackwell-dsl" in shown and "--diffvae-optimization MODE" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ExplainScreen)


async def test_the_explain_dialogs_title_is_whole_at_80_columns():
    """A newcomer trial: 'explain transformer.sla_topk (↑ ↓ pgup pgdn scroll; escape, enter or q clo' at 80x24."""
    app = make_app("h100")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await run_command(pilot, "explain transformer.quantization_scope", lambda: isinstance(app.screen, ExplainScreen))
        await pilot.pause()
        from rich.cells import cell_len
        from textual.widgets import Label

        title = app.screen.query_one("#explain-title", Label)
        lines = str(title.content).split("\n")
        assert "explain transformer.quantization_scope" in lines[0] and "q closes" in lines[-1]
        assert all(cell_len(line) <= title.content_region.width for line in lines), (lines, title.content_region)


@pytest.mark.slow  # ~4 s on 2 cores: the quick suite stays under 4 minutes
async def test_palette_opens_the_editor_of_a_number_and_switches_tabs():
    app = make_app("h100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await run_command(pilot, "set offload.gpu_slots", lambda: isinstance(app.screen, ValueScreen))
        assert app.screen.spec.key == "offload.gpu_slots"
        await pilot.press("escape")
        await pilot.pause()
        await run_command(pilot, "switch tab: Plan", lambda: app.query_one("TabbedContent").active == "resolution")


async def test_palette_offers_every_value_of_every_option():
    from textual.command import CommandPalette

    from ltx_tui.screens.palette import LtxCommands
    from ltx_tui.widgets.options_list import choice_values

    app = make_app("a100")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        provider = LtxCommands(app.screen)
        await provider.startup()
        names = [name for name, _, _ in provider.commands]
        for spec in OPTIONS:
            assert f"explain {spec.key}" in names
            values = choice_values(spec) if spec.choices or spec.kind.value == "bool" else ["…"]
            assert all(f"set {spec.key} = {v}" in names for v in values)
        assert {"smoke", "tune", "export", "switch tab: GPU/Backends"} <= set(names)
        fp8 = next(help for name, _, help in provider.commands if name == "set transformer.quantization = fp8-scaled-mm")
        assert fp8.startswith("✗ error") and "8.9" in fp8  # what the value would do here
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press("down")  # nothing typed: the actions and tabs are listed
        hits = app.screen.query_one("CommandList")
        await wait_for(pilot, lambda: hits.option_count >= 9)
        shown = [str(hits.get_option_at_index(i).prompt).split("\n")[0] for i in range(hits.option_count)]
        assert {"smoke", "tune", "export", "switch tab: Options"} <= set(shown)


# --- what the options are validated for --------------------------------------------------------------

def header_text(app) -> str:
    from textual.widgets._header import HeaderTitle

    title = app.query_one(HeaderTitle)
    shown = f"{app.title} — {app.sub_title}"
    assert len(shown) <= title.size.width, shown  # nothing cut at this width
    return shown


async def test_a_preset_is_named_on_the_first_screen_at_80x24():
    app = make_app("h200", nvml_module=FakeNvml(init_error=NVMLError_LibraryNotFound("no lib")))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "No GPU" in str(app.query_one("#tab-gpu .gpu-notice", Static).render()))
        assert header_text(app) == "preset h200 — all options run as asked — default profile"
        title = app.query_one(OptionsList).border_title
        assert title == "Options for preset h200: NVIDIA H200 (SM 9.0, 141 GiB) — not this machine"
        target = str(app.query_one("#tab-gpu .gpu-target", Static).render())
        assert target == "Validating for preset h200: NVIDIA H200 (SM 9.0, 141 GiB) — not this machine"
        notice = str(app.query_one("#tab-gpu .gpu-notice", Static).render())
        assert notice == "No GPU on this machine: NVML library not found (no NVIDIA driver installed)"


async def test_live_without_a_gpu_says_so_and_what_else_to_validate_for():
    live_cpu = replace(preset("cpu"), source="live", torch=replace(preset("cpu").torch, cuda_reason="torch is a CPU build"))
    app = LtxTuiApp(None, None, nvml_module=FakeNvml(init_error=NVMLError_LibraryNotFound("no lib")), env={},
                    poll_interval=3600, prober=lambda: live_cpu)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.capability is not None)
        await pilot.pause()
        assert header_text(app).startswith("no GPU here — ")
        assert app.query_one(OptionsList).border_title == "Options for this machine: no GPU, CPU only (torch is a CPU build)"
        target = str(app.query_one("#tab-gpu .gpu-target", Static).render())
        assert target.startswith("Validating for this machine: no GPU, CPU only (torch is a CPU build)\nOptions that need CUDA")
        assert "--capability ID (a preset: a100, h100, h200" in target and "ltx-tui --check --json" in target


async def test_live_gpus_are_named_while_probing_and_after():
    gate = threading.Event()

    def prober():
        gate.wait(10)
        return replace(preset("h200x2"), source="live")

    app = LtxTuiApp(None, None, nvml_module=FakeNvml([fake_gpu(0), fake_gpu(1)]), env={}, poll_interval=3600,
                    prober=prober)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.title == "H200 ×2 here")  # from NVML, before the probe ends
        assert app.query_one(OptionsList).border_title == "Options for this machine (probing torch and CUDA…)"
        gate.set()
        await wait_for(pilot, lambda: app.capability is not None)
        await pilot.pause()
        assert app.title == "H200 ×2 here"
        assert app.query_one(OptionsList).border_title == "Options for this machine: 2× NVIDIA H200 (SM 9.0, 141 GiB each)"
        assert str(app.query_one("#tab-gpu .gpu-notice", Static).render()) == "driver 580.159.04  CUDA 13.0"


def test_targets_in_words():
    from ltx_tui.widgets.target import target_text, target_title

    cap = preset("h100x8")
    assert target_title(cap) == "preset h100x8"
    assert target_text(cap) == "preset h100x8: 8× NVIDIA H100 80GB HBM3 (SM 9.0, 80 GiB each) — not this machine"
    from_file = replace(preset("l40s"), source="file:/tmp/[red]caps/l40s.json")
    assert target_title(from_file) == "file l40s.json"
    assert target_text(from_file).startswith("capability file /tmp/[red]caps/l40s.json: NVIDIA L40S (SM 8.9, 48 GiB)")
    no_torch_cuda = replace(preset("h200"), source="live", torch=replace(preset("h200").torch, cuda_available=False,
                                                                        cuda_reason="a CPU-only torch wheel"))
    assert target_text(no_torch_cuda).endswith(", but torch cannot use them (a CPU-only torch wheel)")


# --- the processes on each GPU -------------------------------------------------------------------------

GIB = 2**30


def fake_proc(tmp_path, pid, cmdline: bytes, comm="python"):
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
    (tmp_path / str(pid) / "comm").write_text(comm + "\n")


def test_processes_are_merged_named_and_sorted(tmp_path):
    from backends.machine.nvml import GpuProcess, read_processes

    fake_proc(tmp_path, 10, b"python\0-m\0ltx_pipelines.distilled\0")
    fake_proc(tmp_path, 11, b"", comm="kworker")
    fake_proc(tmp_path, 12, b"Xorg\0")
    nvml = FakeNvml([fake_gpu(0, procs=[(11, None), (10, 40 * GIB), (12, GIB)], gprocs=[(12, 2 * GIB)])])
    procs, error = read_processes(nvml, 0, tmp_path)
    assert error is None
    assert procs == (GpuProcess(10, "python -m ltx_pipelines.distilled", 40 * GIB, "C"),
                     GpuProcess(12, "Xorg", 2 * GIB, "C+G"), GpuProcess(11, "[kworker]", None, "C"))
    gone, _ = read_processes(FakeNvml([fake_gpu(0, procs=[(99, GIB)])]), 0, tmp_path)
    assert gone[0].name.startswith("? (not in this /proc")


def test_process_lists_nvml_refuses_say_why(tmp_path):
    from backends.machine.nvml import read_processes

    both = FakeNvml([fake_gpu(0)], unsupported={"procs", "gprocs"})
    assert read_processes(both, 0, tmp_path) == (None, "not supported by this GPU")
    denied = FakeNvml([fake_gpu(0, procs=NVMLError_NoPermission("x"), gprocs=NVMLError_NoPermission("x"))])
    assert read_processes(denied, 0, tmp_path) == (None, "no permission to query NVML")
    fake_proc(tmp_path, 7, b"python\0")
    half = FakeNvml([fake_gpu(0, procs=[(7, GIB)])], unsupported={"gprocs"})
    procs, error = read_processes(half, 0, tmp_path)
    assert [p.pid for p in procs] == [7] and error == "graphics processes: not supported by this GPU"


def test_process_names_are_untrusted_text(tmp_path):
    from backends.machine.nvml import process_name

    fake_proc(tmp_path, 5, b"[red]x[/]\x1b[2J\0--prompt\0a\nb\0")
    assert process_name(5, tmp_path) == "[red]x[/]\\x1b[2J --prompt a\\nb"


async def test_gpu_box_lists_processes_per_gpu_and_why_not(monkeypatch):
    from backends.machine import nvml as nvml_mod

    names = {4242: "[red]ltx[/] \\x1b[2J", 4243: "python train.py"}
    monkeypatch.setattr(nvml_mod, "process_name", lambda pid, proc: names[pid])
    fake = FakeNvml([fake_gpu(0, procs=[(4243, 3 * GIB), (4242, 40 * GIB)]), fake_gpu(1, procs=NVMLError_NoPermission("x"))],
                    unsupported={"gprocs"})
    app = make_app("h200", nvml_module=fake)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: len(app.query("#side .gpu-procs")) == 2
                       and "4242" in str(app.query("#side .gpu-procs").first().render()))
        first, second = (str(w.render()) for w in app.query("#side .gpu-procs"))
        lines = first.splitlines()
        assert lines[1].split() == ["4242", "C", "40.0", "GiB", "[red]ltx[/]", "\\x1b[2J"]  # most memory first, literal
        assert lines[2].split()[:4] == ["4243", "C", "3.0", "GiB"]
        assert lines[3] == "graphics processes: not supported by this GPU"
        assert second == "processes: compute: no permission to query NVML; graphics: not supported by this GPU"


def test_snapshot_120x40(snap_compare, monkeypatch):
    """The side column beside the options at 120 columns: values folded inside their columns."""
    monkeypatch.chdir(BROKEN.parent / "good")  # the title shows the path: keep it the same in every checkout
    nvml = FakeNvml([fake_gpu(0, procs=[(4242, 40 * GIB)]), fake_gpu(1, procs=NVMLError_NoPermission("x"))])
    monkeypatch.setattr("backends.machine.nvml.process_name", lambda pid, proc: "python -m ltx_pipelines.distilled")
    assert snap_compare(make_app("h200", profile_path="every_key.toml", nvml_module=nvml), terminal_size=(120, 40))


def test_explanation_lines_wrap_under_their_own_text():
    from rich.console import Console

    from ltx_tui.screens.explain import HangingLines

    text = ("transformer.attention: " + "dense attention " * 6 + "\n"
            "  values:   " + "a, b, c, " * 10 + "\n"
            "            fix: " + "set it [bold]so[/bold] " * 6 + "\n"
            "    rule.id   fires  " + "why " * 20)
    console = Console(width=60, record=True, color_system=None)
    console.print(HangingLines(text))
    shown = console.export_text()
    lines = shown.splitlines()
    assert str(HangingLines(text)) == text
    assert "[bold]so[/bold]" in shown  # literal, never markup
    for prefix, hang in (("transformer.attention: ", 23), ("  values:   ", 12), ("            fix: ", 17),
                         ("    rule.id", 6)):
        i = next(n for n, line in enumerate(lines) if line.startswith(prefix))
        assert lines[i + 1].startswith(" " * hang) and lines[i + 1][hang] != " ", lines
    assert all(len(line) <= 60 for line in lines), lines


async def test_a_palette_set_says_what_it_resolved_to_and_highlights_the_option():
    """A trial: `set offload.mode = cpu` from the palette on a CPU gave no word; only the header's error
    count moved."""
    app = make_app("cpu")
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await run_command(pilot, "set offload.mode = cpu", lambda: str(app.profile.offload.mode) == "cpu")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any(m.startswith("offload.mode = cpu → cannot run (error): ") for m in said)
        options = app.query_one("#options-list")
        assert options.get_option_at_index(options.highlighted).id == "offload.mode"
