import dataclasses
import os
import json

import pytest

from backends.machine import capability as capmod
from backends.machine.capability import CapabilityError, cuda_order, probe
from backends.machine.presets import load_capability, preset
from backends.machine.presets import PRESETS
from fakes import FakeNvml, NVMLError_LibraryNotFound, fake_gpu


@pytest.fixture
def cpu_torch(monkeypatch):
    """torch as a machine without CUDA sees it (no CUDA devices), on any machine: with a fake NVML
    the GPUs are then NVML's, in CUDA ordinal order (with CUDA, torch's device list wins)."""
    real = capmod._probe_torch
    # NVML found no GPU: the CPU wheel's answer, or a CUDA build's without touching the driver
    monkeypatch.setattr(capmod, "_probe_torch", lambda nvml_gpu_count: real(0))


@pytest.mark.usefixtures("cpu_torch")
def test_probe_without_nvml_library_says_why():
    cap = probe(nvml_module=FakeNvml(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))
    assert cap.nvml.available is False
    assert "no NVIDIA driver" in cap.nvml.reason
    assert cap.gpus == ()
    assert cap.cuda is False
    json.dumps(cap.to_dict())  # serialisable


def test_probe_real_machine_never_raises():
    cap = probe()
    assert cap.torch.available
    assert cap.source == "live"
    assert set(cap.packages) == {n for n, _, _ in capmod.PACKAGE_MODULES}
    for p in cap.packages.values():
        assert p.available or p.reason


@pytest.mark.usefixtures("cpu_torch")
def test_probe_reads_every_gpu_field_from_nvml(monkeypatch):
    # torch has no CUDA devices (cpu_torch), so ordinals come from the NVML order.
    nvml = FakeNvml([fake_gpu(0), fake_gpu(1, util=55)])
    cap = probe(nvml_module=nvml, env={})
    assert cap.nvml.available and cap.nvml.driver_version == "580.159.04"
    assert cap.nvml.cuda_driver_version == "13.0"
    g = cap.gpus[1]
    assert (g.index, g.name, g.compute_capability) == (1, "NVIDIA H200", (9, 0))
    assert g.uuid == "GPU-0001aaaa-0000" and g.pci_bus_id == "00000000:19:00.0"
    assert g.memory_total == 143771 * 2**20 and g.memory_used == 2 * 2**30
    assert (g.utilization, g.temperature, g.sm_clock, g.mem_clock) == (55, 41, 1980, 3201)
    assert g.power_draw == pytest.approx(100.001) and g.power_limit == 700.0
    # every nvmlInit is shut down (two GPUs without CUDA: NVML is asked again for their peer access)
    assert nvml.shutdown_calls == nvml.init_calls == 2


@pytest.mark.usefixtures("cpu_torch")
def test_unsupported_fields_are_reported_not_raised():
    cap = probe(nvml_module=FakeNvml([fake_gpu(0)], unsupported={"power_mw", "temp"}), env={})
    g = cap.gpus[0]
    assert g.power_draw is None and g.temperature is None
    assert g.errors["power_draw"] == "not supported by this GPU"
    assert g.utilization == 0


def test_the_energy_counter_in_joules_or_none():
    from backends.machine.nvml import NvmlSession

    assert NvmlSession(FakeNvml([fake_gpu(0), fake_gpu(1)])).energy_j(1) == pytest.approx(5000.001)
    assert NvmlSession(FakeNvml([fake_gpu(0)], unsupported={"energy_mj"})).energy_j(0) is None
    assert NvmlSession(FakeNvml([fake_gpu(0)])).energy_j(3) is None  # no such device
    broken = NvmlSession(FakeNvml([], init_error=RuntimeError("no driver")))
    assert broken.energy_j(0) is None and "no driver" in broken.reason


def test_nvml_read_that_never_returns_neither_blocks_nor_overlaps():
    import threading
    import time

    from backends.machine.nvml import NvmlSession

    gate = threading.Event()
    nvml = FakeNvml([fake_gpu(0)], block=gate)
    session = NvmlSession(nvml)
    t0 = time.monotonic()
    info, devs = session.read_all(timeout=0.2)
    # the gate stays shut until gate.set() below: a read that waited for the driver would not return
    # at all (5 s leaves room for a loaded 2-core machine)
    assert time.monotonic() - t0 < 5.0 and not info["available"] and "did not answer within 0.2 s" in info["reason"]
    threads = threading.active_count()
    info, _ = session.read_all(timeout=0.2)
    assert "stuck in the driver" in info["reason"] and threading.active_count() == threads  # no second reader
    session.close()  # returns at once; no shutdown while a thread is inside NVML
    assert nvml.shutdown_calls == 0
    gate.set()
    deadline = time.monotonic() + 10  # the stuck thread returns at once; a loaded machine may take a while
    while session._stuck.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    info, devs = session.read_all(timeout=10.0)  # the stuck call came back: a fresh session reads again
    assert info["available"] and len(devs) == 1 and nvml.init_calls == 2 and nvml.shutdown_calls == 1


@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
def test_process_exits_promptly_while_an_nvml_read_hangs():
    import subprocess
    import sys
    import time

    code = ("import sys, threading; sys.path.insert(0, 'tests'); from fakes import FakeNvml, fake_gpu; "
            "from backends.machine.capability import probe; "
            "cap = probe(nvml_module=FakeNvml([fake_gpu(0)], block=threading.Event()), nvml_timeout=0.2); "
            "print(cap.nvml.reason)")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30 and out.returncode == 0 and "did not answer" in out.stdout


def test_hanging_nvml_times_out():
    cap = probe(nvml_module=FakeNvml([fake_gpu(0)], hang=2.0), nvml_timeout=0.2)
    assert not cap.nvml.available and "did not answer" in cap.nvml.reason


def _devs():
    # NVML index order is PCI order; device 2 is the newest architecture.
    return [dict(nvml_index=i, pci_bus_id=f"0000:{i:02x}", uuid=f"GPU-{i}abc", cc=cc)
            for i, cc in enumerate([(8, 0), (8, 0), (9, 0)])]


def test_cuda_order_pci_bus_id_and_visible_devices():
    ordered, how = cuda_order(_devs(), {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2,0"})
    assert [d["nvml_index"] for d in ordered] == [2, 0]
    assert "PCI" in how


def test_cuda_order_fastest_first_puts_newest_first():
    ordered, _ = cuda_order(_devs(), {})
    assert [d["nvml_index"] for d in ordered] == [2, 0, 1]


def test_cuda_visible_devices_by_uuid_and_stops_at_invalid():
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-1,7,0"}
    ordered, _ = cuda_order(_devs(), env)
    assert [d["nvml_index"] for d in ordered] == [1]


def test_cuda_visible_devices_empty_hides_all():
    assert cuda_order(_devs(), {"CUDA_VISIBLE_DEVICES": ""})[0] == []


@pytest.mark.usefixtures("cpu_torch")
def test_probe_respects_visible_devices():
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
    cap = probe(nvml_module=FakeNvml([fake_gpu(0), fake_gpu(1, name="NVIDIA A100", cc=(8, 0))]), env=env)
    assert [(g.index, g.name, g.nvml_index) for g in cap.gpus] == [(0, "NVIDIA A100", 1)]
    assert "CUDA_VISIBLE_DEVICES" in cap.nvml.ordinal_match


@pytest.mark.parametrize("pid", list(PRESETS))
def test_presets_state_gpu_and_packages(pid):
    cap = preset(pid)
    assert cap.source == f"preset:{pid}"
    assert cap.cuda == (pid != "cpu")
    assert cap.package("natten").available
    json.dumps(cap.to_dict())


def test_preset_with_gpu_count():
    assert len(preset("h100x8").gpus) == 8
    assert len(preset("rtx4090").gpus) == 1
    assert len(preset("rtx4090x2").gpus) == 2


def test_preset_natten_kernels_follow_the_gpu():
    from backends.config.rules import natten_kernels

    kernels = natten_kernels(preset("h100"))
    assert kernels["hopper-fna"].available and not kernels["blackwell-fna"].available
    kernels = natten_kernels(preset("b200"))
    assert kernels["blackwell-fna"].available and not kernels["hopper-fna"].available


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(CapabilityError, match="a100, h100"):
        preset("h300")


def test_capability_file_roundtrip(tmp_path):
    cap = preset("l40s")
    path = tmp_path / "cap.json"
    path.write_text(json.dumps({"capability": cap.to_dict(), "exit_code": 0}))
    loaded = load_capability(str(path))
    assert loaded.gpus == cap.gpus and loaded.packages == cap.packages
    assert loaded.fingerprint() == cap.fingerprint()
    assert loaded.source == f"file:{path}"


@pytest.mark.parametrize("content, match", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"gpus": []}', r"\$\.platform: missing"),
])
def test_bad_capability_files(tmp_path, content, match):
    path = tmp_path / "cap.json"
    path.write_text(content)
    with pytest.raises(CapabilityError, match=match):
        load_capability(str(path))


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["gpus"][0].update(memory_total="lots"), r"\$\.gpus\[0\]\.memory_total: expected an integer, found \"lots\""),
    (lambda d: d["packages"]["natten"].update(details=None), r"\$\.packages\.natten\.details: must not be null"),
    (lambda d: d["gpus"][0].update(compute_capability=[9]), r"compute_capability: expected \[major, minor\]"),
    (lambda d: d["torch"].update(cuda_available="yes"), r"\$\.torch\.cuda_available: expected true/false"),
    (lambda d: d.update(gpus=[d["gpus"][0]] * 65), "at most 64"),
    (lambda d: d["sdpa"].update(flash=1), r"\$\.sdpa\.flash: expected an object"),
])
def test_malformed_capability_fields_name_their_json_path(tmp_path, edit, match):
    data = preset("h100").to_dict()
    edit(data)
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CapabilityError, match=match):
        load_capability(str(path))


def test_capability_with_null_compute_capability_and_unknown_fields_loads(tmp_path):
    from backends.config.options import Profile
    from backends.config.plan import resolve

    data = preset("h100").to_dict()
    data["gpus"][0]["compute_capability"] = None
    data["gpus"][0]["hbm_bandwidth"] = "4.8 TB/s"  # a field from a newer ltx-tui
    data["future"] = {}
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(data))
    warnings = []
    cap = load_capability(str(path), warnings)
    assert cap.gpus[0].compute_capability is None
    assert any("$.gpus[0]: ignored unknown field(s) hbm_bandwidth" in w for w in warnings)
    assert any("future" in w for w in warnings)
    d = resolve(Profile().replace(**{"transformer.quantization": "fp8-scaled-mm"}), cap)["transformer.quantization"]
    assert d.status.value == "error" and "SM ?" in d.message  # an unknown SM decides nothing, never crashes


def test_preset_gpu_count_is_bounded():
    with pytest.raises(CapabilityError, match="at most 64"):
        preset("h100x100000000")
    assert len(preset("h100x64").gpus) == 64
    with pytest.raises(CapabilityError, match=r"'h100x0': 0 GPUs; xN takes 1 to 64") as e:
        preset("h100x0")  # said "unknown capability", as if h100 were not a preset
    assert "unknown" not in str(e.value)


@pytest.mark.parametrize("make, match", [
    (lambda p: os.mkfifo(p), "FIFO"),
    (lambda p: p.mkdir(), "directory"),
    (lambda p: p.write_bytes(b" " * (17 * 1024 * 1024)), "at most"),
])
def test_capability_files_must_be_small_regular_files(tmp_path, make, match):
    path = tmp_path / "cap.json"
    make(path)
    with pytest.raises(CapabilityError, match=match):
        load_capability(str(path))


def test_missing_capability_file_and_directory(tmp_path):
    with pytest.raises(CapabilityError, match="not found"):
        load_capability(str(tmp_path / "nope.json"))
    with pytest.raises(CapabilityError, match="directory"):
        load_capability(str(tmp_path) + "/")


@pytest.mark.usefixtures("cpu_torch")
def test_fingerprint_ignores_live_readings():
    a = probe(nvml_module=FakeNvml([fake_gpu(0, util=1, temp=30)]), env={})
    b = probe(nvml_module=FakeNvml([fake_gpu(0, util=99, temp=80)]), env={})
    assert a.fingerprint() == b.fingerprint()
    c = probe(nvml_module=FakeNvml([fake_gpu(0, name="NVIDIA A100", cc=(8, 0))]), env={})
    assert c.fingerprint() != a.fingerprint()


# --- multi-GPU facts: peer access, ltx-kernels' all2all -------------------------------------------

class P2PNvml(FakeNvml):
    """FakeNvml with NVML's P2P status: `blocked` holds the NVML index pairs without peer access."""

    NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE, NVML_P2P_STATUS_OK = 0, 1, 0

    def __init__(self, gpus, blocked=()):
        super().__init__(gpus)
        self.blocked = {frozenset(p) for p in blocked}

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        return 5 if frozenset((a, b)) in self.blocked else self.NVML_P2P_STATUS_OK


def test_peer_access_from_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: {i, j} != {0, 2})
    peer = capmod._probe_peer_access(3)
    assert peer.source == "torch.cuda.can_device_access_peer" and peer.reason is None
    assert peer.matrix == ((True, True, False), (True, True, True), (False, True, True))
    assert peer.between(0, 2) is False and peer.between(1, 1) is True and peer.between(0, 5) is None

    def boom(i, j):
        raise RuntimeError("CUDA driver error")
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", boom)
    failed = capmod._probe_peer_access(2)
    assert failed.matrix == () and "raised RuntimeError: CUDA driver error" in failed.reason


def test_peer_access_from_nvml_when_torch_cannot_say():
    peer = capmod.nvml_peer_access(P2PNvml([fake_gpu(0), fake_gpu(1), fake_gpu(2)], blocked=[(1, 2)]), [0, 2, 1])
    assert peer.source == "NVML nvmlDeviceGetP2PStatus (read and write)"
    assert peer.matrix == ((True, True, True), (True, True, False), (True, False, True))  # CUDA ordinal order
    no_p2p = capmod.nvml_peer_access(FakeNvml([fake_gpu(0), fake_gpu(1)]), [0, 1])
    assert no_p2p.matrix == () and "NVML P2P status" in no_p2p.reason


@pytest.mark.usefixtures("cpu_torch")
def test_probe_records_peer_access_without_cuda_from_nvml():
    cap = probe(nvml_module=P2PNvml([fake_gpu(0), fake_gpu(1)], blocked=[(0, 1)]), env={})
    assert not cap.cuda and cap.peer_access.matrix == ((True, False), (False, True))
    assert "NVML" in cap.peer_access.source
    one = probe(nvml_module=P2PNvml([fake_gpu(0)]), env={})
    assert one.peer_access.matrix == () and one.peer_access.reason  # one GPU without CUDA: nothing to say


def test_peer_access_round_trips_and_is_in_the_fingerprint(tmp_path):
    cap = preset("h200x4")
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(cap.to_dict()))
    loaded = load_capability(str(path))
    assert loaded.peer_access == cap.peer_access and loaded.fingerprint() == cap.fingerprint()
    blocked = dataclasses.replace(cap, peer_access=capmod.PeerAccess(
        tuple(tuple(i == j for j in range(4)) for i in range(4)), "test", None))
    assert blocked.fingerprint() != cap.fingerprint()
    one = preset("h200")  # a single GPU's fingerprint does not change with peer access
    assert dataclasses.replace(one, peer_access=capmod.PeerAccess()).fingerprint() == one.fingerprint()
    data = cap.to_dict()
    del data["peer_access"]
    path.write_text(json.dumps(data))
    old = load_capability(str(path))
    assert old.peer_access.matrix == () and "not in this capability file" in old.peer_access.reason


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(peer_access=[]), r"\$\.peer_access: expected an object"),
    (lambda d: d["peer_access"].update(matrix="all"), r"\$\.peer_access\.matrix: expected an array"),
    (lambda d: d["peer_access"].update(matrix=[[True, True]]), r"\$\.peer_access\.matrix: 1 rows for 2 GPU"),
    (lambda d: d["peer_access"]["matrix"][1].append(True), r"\$\.peer_access\.matrix\[1\]: expected an array of 2"),
    (lambda d: d["peer_access"]["matrix"][0].__setitem__(1, "yes"),
     r"\$\.peer_access\.matrix\[0\]\[1\]: expected true, false or null, found \"yes\""),
    (lambda d: d["peer_access"].update(source=3), r"\$\.peer_access\.source: expected a string or null"),
])
def test_malformed_peer_access_names_its_json_path(tmp_path, edit, match):
    data = json.loads(json.dumps(preset("h100x2").to_dict()))  # as a file holds it: arrays, not tuples
    edit(data)
    path = tmp_path / "cap.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CapabilityError, match=match):
        load_capability(str(path))


def fatbin(entries, junk=b"\x7fELF" + b"\0" * 60):
    """A shared library's bytes holding one CUDA fat binary container with `entries` ((kind, sm, payload)
    or (kind, sm, payload, flags)), their headers as an H200's torch 2.11 wrote them (0x11: plain
    code, 0x100011: architecture-specific, sm_90a)."""
    import struct

    body = b""
    for kind, sm, payload, *flags in entries:
        header = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(payload), 0, 0, 0, 8, sm, 0, 0,
                             flags[0] if flags else 0x11, 0, 0)
        body += header + payload
    return junk + struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body + b"\0" * 16


def test_cuda_binary_archs_reads_the_fat_binary_headers(tmp_path):
    so = tmp_path / "all2all_cpp.so"
    so.write_bytes(fatbin([(2, 90, b"\x01" * 100), (1, 90, b"// ptx" * 7, 0x8011), (2, 100, b"\x02" * 33, 0x1108011)]))
    archs, how = capmod.cuda_binary_archs(str(so))
    assert archs == ("compute_90", "sm_100a", "sm_90") and "read from the CUDA fat binaries" in how
    so.write_bytes(b"\x7fELF" + b"\0" * 100)
    assert capmod.cuda_binary_archs(str(so)) == (None, f"no CUDA fat binary in it ({so})")
    assert "cannot read" in capmod.cuda_binary_archs(str(tmp_path / "nope.so"))[1]


@pytest.mark.parametrize("archs, cc, runs", [
    (["sm_90"], (9, 0), True), (["sm_90"], (10, 0), False), (["sm_90", "compute_90"], (10, 0), True),
    (["sm_80"], (8, 6), True), (["sm_86"], (8, 0), False), (["compute_100"], (9, 0), False),
    (["sm_90a"], (9, 0), True), (["sm_100"], (10, 0), True), (["sm_120"], (10, 0), False),
    (["sm_100a"], (10, 3), False), (["sm_100"], (10, 3), True), (["compute_90a"], (10, 0), False),
    (["sm_100f"], (10, 3), True),
])
def test_arch_runs_on(archs, cc, runs):
    assert capmod.arch_runs_on(archs, cc) is runs


def test_probe_all2all_finds_the_extension_and_says_what_it_could_not_tell(tmp_path, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("all2all_cpp", "ltx_kernels", "ltx_kernels.all_to_all"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    missing = capmod.probe_all2all()
    assert missing["all2all"] is False and "all2all_cpp) is not installed" in missing["all2all_note"]
    (tmp_path / "all2all_cpp.py").write_text("class All2All: pass\n")
    (tmp_path / "ltx_kernels").mkdir()
    (tmp_path / "ltx_kernels" / "__init__.py").write_text("from ltx_kernels.all_to_all import All2All\n")
    (tmp_path / "ltx_kernels" / "all_to_all.py").write_text("from all2all_cpp import All2All\n")
    found = capmod.probe_all2all()
    assert found["all2all"] is True and found["all2all_path"].endswith("all2all_cpp.py")
    assert found["all2all_archs"] is None and "no CUDA fat binary in it" in found["all2all_note"]
    package = capmod.probe_package("ltx_kernels", "ltx_kernels", "ltx-kernels", cuda=True)
    assert package.available and package.details["all2all"] is True
    for name in ("all2all_cpp", "ltx_kernels", "ltx_kernels.all_to_all"):
        monkeypatch.delitem(sys.modules, name, raising=False)
