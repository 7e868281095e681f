"""Issue 19, item 3: every integer option has a documented range, checked at load and in the
value editor; huge numbers and deeply nested files are usage errors (exit 2), never a crash,
a 39 s / 12 GB expansion or an OverflowError."""

import json

import pytest
from textual.widgets import Input, Static

from backends.config import profile as prof
from backends.config.options import OPTIONS, OPTIONS_BY_KEY, Kind
from backends.machine.capability import CapabilityError
from backends.machine.presets import build_preset, load_capability
from ltx_tui.cli import main
from ltx_tui.screens.edit import ValueScreen, parse_value
from test_app import edit, make_app

HUGE = 123456789012345678901234567  # 27 digits
INTS = [o for o in OPTIONS if o.kind is Kind.INT]
RANGES = {"parallel.gpus": (1, 64), "offload.gpu_slots": (1, 64), "offload.prefetch": (0, 64),
          "memory.max_batch_size": (1, 64)}


def test_every_integer_option_documents_its_range():
    assert {o.key: (o.minimum, o.maximum) for o in INTS} == RANGES
    for o in INTS:
        assert f"{o.minimum:g} to {o.maximum:g}" in o.help and o.allowed().endswith(f"<= {o.maximum:g}")
    assert "from 0 to 63" in OPTIONS_BY_KEY["parallel.devices"].allowed()


@pytest.mark.parametrize("key", [o.key for o in INTS])
@pytest.mark.parametrize("value", ["above", HUGE])
def test_a_value_above_the_range_is_a_profile_error(tmp_path, key, value):
    section, name = key.split(".")
    value = RANGES[key][1] + 1 if value == "above" else value
    path = tmp_path / "p.toml"
    path.write_text(f"[{section}]\n{name} = {value}\n")
    with pytest.raises(prof.ProfileError) as e:
        prof.read(path)
    assert str(e.value) == (f"{path}:2: {key}: {value} is out of range; expected an integer >= {RANGES[key][0]} "
                            f"and <= {RANGES[key][1]}")


def test_huge_gpu_counts_exit_2_at_once(capsys, tmp_path):
    path = tmp_path / "p.toml"
    for value in (HUGE, 100000000):  # OverflowError / 39 s and 12 GB (parallel.devices expanded) before
        path.write_text(f"[parallel]\ngpus = {value}\n")
        assert main(["--check", "--profile", str(path), "--capability", "h100"]) == 2
        assert f"parallel.gpus: {value} is out of range; expected an integer >= 1 and <= 64" in capsys.readouterr().err
    path.write_text("[parallel]\ngpus = 2\ndevices = [0, 100000000]\n")
    with pytest.raises(prof.ProfileError, match=r"parallel.devices: CUDA ordinal 100000000 is out of range; "
                                                r"expected .*from 0 to 63"):
        prof.read(path)


def test_the_value_editor_refuses_out_of_range_and_unconvertible_numbers():
    gpus = OPTIONS_BY_KEY["parallel.gpus"]
    for text in (str(HUGE), "65"):
        with pytest.raises(ValueError, match="out of range; expected an integer >= 1 and <= 64"):
            parse_value(gpus, text)
    with pytest.raises(ValueError, match="out of range"):
        parse_value(OPTIONS_BY_KEY["parallel.devices"], f"0, {HUGE}")
    too_long = "9" * 5000  # more digits than int() converts: a short message, not the 5000 digits
    with pytest.raises(ValueError) as e:
        parse_value(gpus, too_long)
    assert len(str(e.value)) < 120 and "is not an integer >= 1 and <= 64" in str(e.value)
    with pytest.raises(ValueError, match=r"^parallel.gpus: 'x' is not"):  # named, as an out-of-range value is
        parse_value(gpus, "x")


def test_the_value_editor_takes_one_device_list_and_names_a_float_that_reads_as_zero():
    """A trial: `[[0]]`, `[[0]`, `[0]]` were applied as [0], and 1e-400 was refused as "0.0 is out of range"."""
    devices = OPTIONS_BY_KEY["parallel.devices"]
    assert parse_value(devices, "[0, 1]") == parse_value(devices, "0,1") == (0, 1)
    assert parse_value(devices, "[]") is None
    for text in ("[[0]]", "[[0]", "[0]]", "[[[1]]]", "0]", "[1"):
        with pytest.raises(ValueError, match=r"parallel.devices: .* is not a list of distinct CUDA ordinals"):
            parse_value(devices, text)
    topk = OPTIONS_BY_KEY["transformer.sla_topk"]
    with pytest.raises(ValueError, match=r"sla_topk: '1e-400' is too small for a float: it reads as 0.0"):
        parse_value(topk, "1e-400")
    with pytest.raises(ValueError, match=r"sla_topk: 0.0 is out of range"):
        parse_value(topk, "0.0")


async def test_typing_a_huge_value_in_the_app_is_an_editor_error():
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await edit(pilot, "parallel.gpus")
        assert isinstance(app.screen, ValueScreen)
        app.screen.query_one("#value", Input).value = str(HUGE)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ValueScreen) and app.is_running
        assert "out of range" in str(app.screen.query_one("#value-error", Static).render())
        assert app.profile.parallel.gpus == 1


async def test_a_huge_value_in_the_profile_shows_the_banner(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(f"[parallel]\ngpus = {HUGE}\n")
    app = make_app(profile_path=str(path))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert app.is_running and "out of range" in str(app.query_one("#banner", Static).render())


@pytest.mark.parametrize("depth", [100, 100000])  # under the recursion limit, and far over it
def test_a_deeply_nested_profile_is_malformed(capsys, tmp_path, depth):
    path = tmp_path / "deep.toml"
    path.write_text("[parallel]\ndevices = " + "[" * depth + "]" * depth + "\n")
    assert main(["--check", "--profile", str(path), "--capability", "h100"]) == 2
    assert "arrays or tables nested more than 16 levels deep; not a profile" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["top", "details"])
def test_a_deeply_nested_capability_file_is_malformed(capsys, tmp_path, where):
    path = tmp_path / "cap.json"
    if where == "top":
        path.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}")  # json's own recursion
    else:
        cap = build_preset("h100", 1).to_dict()
        inner = value = {}
        for _ in range(900):  # parsed fine, but asdict() would recurse past the limit later
            inner["a"] = inner = {}
        cap["packages"]["natten"]["details"] = value
        path.write_text(json.dumps(cap))
    with pytest.raises(CapabilityError, match="nested more than 32 levels deep; not a capability file"):
        load_capability(str(path))
    assert main(["--check", "--json", "--capability", str(path)]) == 2


def test_a_huge_number_in_a_capability_file_is_a_usage_error(capsys, tmp_path):
    cap = build_preset("h100", 1).to_dict()
    cap["gpus"][0]["memory_total"] = 10**400  # overflowed a float in the memory bars before
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(cap))
    assert main(["--check", "--capability", str(path)]) == 2
    assert "$.gpus[0].memory_total: expected an integer below 2**63" in capsys.readouterr().err
