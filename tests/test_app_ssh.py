"""The app over SSH (issue 18, item 7): what the options are validated for, the options' columns at
every width, the command palette, the processes on each GPU."""

from fakes import FakeNvml, NVMLError_NoPermission, fake_gpu


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
