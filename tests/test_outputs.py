"""Issue 19, items 1 and 5: output files are written as the user means (devices and FIFOs written
through, a symlink's target, the mode kept, never the input profile, an existing file only with
--force), and text from paths or files reaches a shell script or the terminal harmlessly.

Devices are made in a temp dir (mknod), never taken from the real /dev: as root, a bug would
replace the real one.
"""

import json
import os
import socket
import stat
import subprocess
import sys
import threading

import pytest
from textual.widgets import Input, Static

from backends.machine.presets import build_preset
from ltx_tui.cli import main
from ltx_tui.screens.confirm import ConfirmScreen
from test_app import make_app

LTX = ["--check", "--capability", "h100", "--ltx-args"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def read_in_thread(path):
    """Start a reader of FIFO `path`; returns (thread, box) where box["data"] is what it read."""
    box = {}

    def reader():
        with open(path, "rb") as f:
            box["data"] = f.read()

    thread = threading.Thread(target=reader, daemon=True)  # daemon: a writer that never comes leaves it blocked
    thread.start()
    return thread, box


def device(tmp_path, name, minor):
    """A character device with the numbers of /dev/null (minor 3) or /dev/full (minor 7), in tmp_path."""
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod is not permitted here (needs CAP_MKNOD)")
    return path


# --- where the output goes --------------------------------------------------------------

def test_a_fifo_is_written_through(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, box = read_in_thread(fifo)
    code, out, err = run(capsys, *LTX, "--output", str(fifo))
    thread.join(5)
    assert code == 0 and out == "" and "wrote" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a regular file in its place
    assert b"python -m ltx_pipelines.distilled" in box["data"]


def test_a_character_device_is_written_through_never_replaced(capsys, tmp_path):
    null = device(tmp_path, "null", 3)
    code, _, err = run(capsys, *LTX, "--output", str(null))
    assert code == 0 and "wrote" in err
    assert stat.S_ISCHR(os.lstat(null).st_mode) and os.lstat(null).st_rdev == os.makedev(1, 3)
    full = device(tmp_path, "full", 7)  # every write fails with ENOSPC: said so, the device stays
    code, _, err = run(capsys, *LTX, "--output", str(full))
    assert code == 2 and f"{full}: cannot write (No space left on device)" in err
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_descriptor_path_prints_to_it(tmp_path):
    """/dev/stdout is a symlink to /proc/self/fd/1: a link to it in tmp_path stands for it."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    argv = [sys.executable, "-m", "ltx_tui.cli", *LTX, "--output", str(link)]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and "python -m ltx_pipelines.distilled" in piped.stdout
    redirected = tmp_path / "out.sh"  # stdout is a regular file: still printed, not "exists"
    with open(redirected, "w") as f:
        done = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 0 and "python -m ltx_pipelines.distilled" in redirected.read_text()
    assert link.is_symlink()


def test_an_existing_file_is_replaced_only_with_force(capsys, tmp_path):
    target = tmp_path / "run.sh"
    target.write_text("keep")
    code, _, err = run(capsys, *LTX, "--output", str(target))
    assert code == 2 and f"ltx-tui: output error: {target} exists; pass --force to replace it" in err
    assert target.read_text() == "keep"
    code, _, _ = run(capsys, *LTX, "--output", str(target), "--force")
    assert code == 0 and "python -m ltx_pipelines" in target.read_text()
    with pytest.raises(SystemExit):
        main([*LTX, "--force"])  # --force goes with --output


def test_a_symlinks_target_is_written_and_the_link_kept(capsys, tmp_path):
    target = tmp_path / "real.sh"
    target.write_text("old")
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    code, _, err = run(capsys, *LTX, "--output", str(link))
    assert code == 2 and "exists; pass --force" in err  # the target exists
    code, _, _ = run(capsys, *LTX, "--output", str(link), "--force")
    assert code == 0 and link.is_symlink() and os.readlink(link) == str(target)
    assert "python -m ltx_pipelines" in target.read_text()
    dangling = tmp_path / "dangling.sh"
    dangling.symlink_to(tmp_path / "new.sh")
    code, _, _ = run(capsys, *LTX, "--output", str(dangling))
    assert code == 0 and dangling.is_symlink() and "python -m" in (tmp_path / "new.sh").read_text()


def test_the_mode_is_kept_and_a_new_file_follows_the_umask(capsys, tmp_path):
    secret = tmp_path / "secret.sh"
    secret.write_text("old")
    secret.chmod(0o600)
    assert run(capsys, *LTX, "--output", str(secret), "--force")[0] == 0
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and "python -m" in secret.read_text()
    old = os.umask(0o027)
    try:
        assert run(capsys, *LTX, "--output", str(tmp_path / "new.sh"))[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.sh").stat().st_mode) == 0o640


def test_the_input_profile_is_never_the_output(capsys, tmp_path, monkeypatch):
    profile = tmp_path / "p.toml"
    profile.write_text('[offload]\nmode = "cpu"\n')
    hard = tmp_path / "hard.toml"
    os.link(profile, hard)
    soft = tmp_path / "soft.toml"
    soft.symlink_to(profile)
    tuned = []
    monkeypatch.setattr("ltx_tui.tune.run_tune", lambda **kw: tuned.append(kw) or 0)
    for out in (profile, hard, soft):
        for mode in (LTX, ["--tune"]):
            code, _, err = run(capsys, *mode, "--profile", str(profile), "--output", str(out), "--force")
            assert code == 2 and f"{out} is the input profile (--profile {profile})" in err, (mode, out)
    assert profile.read_text() == '[offload]\nmode = "cpu"\n' and not tuned


def test_tune_output_onto_an_existing_file_needs_force(capsys, tmp_path, monkeypatch):
    existing = tmp_path / "tuned.toml"
    existing.write_text("keep")
    tuned = []
    monkeypatch.setattr("ltx_tui.tune.run_tune", lambda **kw: tuned.append(kw) or 0)
    code, _, err = run(capsys, "--tune", "--output", str(existing))
    assert code == 2 and "exists; pass --force to replace it" in err and not tuned  # refused before any tuning
    assert run(capsys, "--tune", "--output", str(existing), "--force")[0] == 0 and tuned[0]["output"] == str(existing)


def test_a_directory_or_a_socket_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, *LTX, "--output", str(tmp_path), "--force")
    assert code == 2 and f"{tmp_path}: is a directory; give the path of a file in it" in err
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        code, _, err = run(capsys, *LTX, "--output", str(sock_path), "--force")
    assert code == 2 and "is a socket" in err and stat.S_ISSOCK(os.lstat(sock_path).st_mode)


def test_a_file_that_appears_meanwhile_is_not_replaced(tmp_path, monkeypatch):
    """Without overwrite the new file is linked into place: one created after the check stays."""
    from backends.machine.textfile import OutputExists, write_atomically

    path = tmp_path / "p.toml"
    real_open = os.open

    def racing_open(p, *a, **k):
        if str(p).startswith(str(tmp_path / ".p.toml.")):
            path.write_text("theirs")
        return real_open(p, *a, **k)

    monkeypatch.setattr(os, "open", racing_open)
    with pytest.raises(OutputExists):
        write_atomically(path, b"mine", overwrite=False)
    assert path.read_text() == "theirs" and [p.name for p in tmp_path.iterdir()] == ["p.toml"]


@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
async def test_export_writes_a_symlinks_target_keeps_the_mode_and_never_waits_on_a_fifo(tmp_path):
    target = tmp_path / "real.toml"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        app.screen.query_one("#path", Input).value = str(link)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)  # the app asks before replacing
        await pilot.press("y")
        await pilot.pause()
        assert link.is_symlink() and "schema_version" in target.read_text()
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
        await pilot.press("enter")  # a written profile's dialog is done: enter closes it
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(fifo)  # nobody reads it: said, not a frozen app
        await pilot.press("enter")
        await pilot.pause()
        assert "is a FIFO nobody reads" in str(app.screen.query_one("#export-error", Static).render())
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# --- text that reaches a shell or a terminal ----------------------------------------------

def test_a_newline_in_the_profile_path_cannot_inject_a_command(capsys, tmp_path):
    folder = tmp_path / "x\ntouch pwned\n"
    folder.mkdir()
    profile = folder / "p.toml"
    profile.write_text("")
    script = tmp_path / "out.sh"
    code, _, err = run(capsys, "--check", "--capability", "h100", "--profile", str(profile), "--ltx-args",
                       "--output", str(script))
    assert code == 0 and "\\ntouch pwned\\n" in err
    text = script.read_text()
    assert "touch pwned" in text and "\ntouch pwned" not in text  # escaped in its comment: one line
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\nexit 0\n")  # the script's `python -m ...` does nothing here
    (fake / "python").chmod(0o755)
    subprocess.run(["bash", str(script)], cwd=tmp_path, env={"PATH": f"{fake}:/usr/bin:/bin"}, check=True,
                   capture_output=True, timeout=30)
    assert not (tmp_path / "pwned").exists()


def test_the_run_line_quotes_control_characters():
    from backends.ltx_args import run_command

    path = "/tmp/a\nb'c\x1b.toml"
    line = run_command(path)
    assert line.count("\n") == 1 and "\x1b" not in line  # one line, nothing for the terminal to act on
    word = line.split(" --profile ")[1].split(" -- ")[0]
    assert word == "$'/tmp/a\\nb\\'c\\x1b.toml'"
    assert subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True,
                          check=True).stdout == path  # bash reads it back as the path


def test_escape_bytes_in_a_capability_file_never_reach_the_terminal(capsys, tmp_path):
    cap = build_preset("h100", 1).to_dict()
    cap["gpus"][0]["name"] = "H100\x1b[2J\x1b]0;owned\x07"
    cap["packages"]["natten"]["reason"] = "x\x1b[31mred"
    cap["surprise\x1b[2J"] = 1  # an unknown field: named in a warning
    path = tmp_path / "cap\x1b[1m.json"
    path.write_text(json.dumps(cap))
    code, out, err = run(capsys, "--check", "--capability", str(path))
    assert code == 0 and "\x1b" not in out + err
    assert "[0] H100\\x1b[2J\\x1b]0;owned\\x07" in out and "surprise\\x1b[2J" in out  # the warnings
    code, out, err = run(capsys, "--check", "--capability", str(path), "--ltx-args")
    assert "\x1b" not in out + err
    broken = tmp_path / "broken\x1b[2J.json"
    broken.write_text("{")
    code, _, err = run(capsys, "--check", "--capability", str(broken))
    assert code == 2 and "\x1b" not in err and "broken\\x1b[2J.json" in err


def test_nvml_names_are_made_printable():
    from backends.machine import nvml
    from fakes import FakeNvml, fake_gpu

    gpu = fake_gpu(0, name=b"NVIDIA\x1b[2J H100")
    session = nvml.NvmlSession(FakeNvml([gpu]))
    _, devices = session.read_all()
    assert devices[0]["name"] == "NVIDIA\\x1b[2J H100"


def test_a_message_of_several_lines_keeps_them_and_escapes_the_rest():
    from backends.machine.text import printable, printable_lines

    text = "a.toml:2: x\x1b[2J\na.toml:4: y\r\u202e"
    assert printable_lines(text) == "a.toml:2: x\\x1b[2J\na.toml:4: y\\r\\u202e"
    assert printable(text) == "a.toml:2: x\\x1b[2J\\na.toml:4: y\\r\\u202e"  # one line


def test_a_profile_path_with_a_line_break_stays_one_line_a_problem(capsys, tmp_path):
    """A profile's problems are a line each: a line break in its path is escaped, not a line."""
    path = tmp_path / "a\nb.toml"
    path.write_text('[transformer]\nattention = "x"\nquantization = "y"\n')
    code, _, err = run(capsys, "--check", "--profile", str(path), "--capability", "h200")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and all("a\\nb.toml:" in line for line in lines)
