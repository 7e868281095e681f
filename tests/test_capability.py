import json

import pytest

from backends.probe import capability as capmod
from backends.probe.capability import CapabilityError, cuda_order, probe
from backends.probe.presets import load_capability, preset
from backends.probe.presets import PRESETS
from fakes import FakeNvml, NVMLError_LibraryNotFound, fake_gpu


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


def test_probe_reads_every_gpu_field_from_nvml(monkeypatch):
    # torch here has no CUDA, so ordinals come from the NVML order.
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
    assert nvml.shutdown_calls == 1


def test_unsupported_fields_are_reported_not_raised():
    cap = probe(nvml_module=FakeNvml([fake_gpu(0)], unsupported={"power_mw", "temp"}), env={})
    g = cap.gpus[0]
    assert g.power_draw is None and g.temperature is None
    assert g.errors["power_draw"] == "not supported by this GPU"
    assert g.utilization == 0


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
    ('{"gpus": []}', "missing key"),
])
def test_bad_capability_files(tmp_path, content, match):
    path = tmp_path / "cap.json"
    path.write_text(content)
    with pytest.raises(CapabilityError, match=match):
        load_capability(str(path))


def test_missing_capability_file_and_directory(tmp_path):
    with pytest.raises(CapabilityError, match="not found"):
        load_capability(str(tmp_path / "nope.json"))
    with pytest.raises(CapabilityError, match="directory"):
        load_capability(str(tmp_path) + "/")


def test_fingerprint_ignores_live_readings():
    a = probe(nvml_module=FakeNvml([fake_gpu(0, util=1, temp=30)]), env={})
    b = probe(nvml_module=FakeNvml([fake_gpu(0, util=99, temp=80)]), env={})
    assert a.fingerprint() == b.fingerprint()
    c = probe(nvml_module=FakeNvml([fake_gpu(0, name="NVIDIA A100", cc=(8, 0))]), env={})
    assert c.fingerprint() != a.fingerprint()
