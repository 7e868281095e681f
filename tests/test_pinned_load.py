"""`backends.launch.pinned_load`: the state dict LTX-2's own SafetensorsStateDictLoader makes, read
through small buffers (tensors split over reads, reads shared by tensors), with LTX-2's SDOps."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from backends.launch import pinned_load

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


@pytest.fixture
def shards(tmp_path):
    g = torch.Generator().manual_seed(0)
    first = {
        "model.diffusion_model.a.weight": torch.randn(7, 9, generator=g).to(torch.bfloat16),
        "model.diffusion_model.a.bias": torch.randn(7, generator=g),
        "model.diffusion_model.scalar": torch.tensor(3.5, dtype=torch.float16),
        "model.diffusion_model.empty": torch.zeros(0, 4),
        "model.diffusion_model.mask": torch.rand(5, generator=g) > 0.5,
        "model.diffusion_model.fp8": torch.randn(4, 4, generator=g).to(torch.float8_e4m3fn),
        "vae.other": torch.arange(11, dtype=torch.int64),
    }
    second = {"model.diffusion_model.big": torch.randn(300, generator=g)}  # 1200 bytes: many reads
    paths = [str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")]
    save_file(first, paths[0], metadata={"config": "{}"})
    save_file(second, paths[1])
    return paths


def bytes_of(t):
    return t.reshape(-1).view(torch.uint8)


def ltx2_sd_ops():
    from ltx_core.loader.sd_ops import SDOps

    def to_float(key, value):  # a value transform, as LTX-2's quantization ops are
        from ltx_core.loader.sd_ops import KeyValueOperationResult

        return [KeyValueOperationResult(key, value.float())]

    return (SDOps("test").with_matching(prefix="model.diffusion_model.")
            .with_replacement("model.diffusion_model.", "")
            .with_kv_operation(to_float, key_suffix=".weight"))


@pytest.mark.parametrize("chunk, slots", [(64, 2), (1 << 20, 4), (16, 3)])
@pytest.mark.parametrize("with_ops", [False, True])
def test_the_state_dict_is_ltx2s(shards, monkeypatch, chunk, slots, with_ops):
    from ltx_core.loader.primitives import StateDict
    from ltx_core.loader.sft_loader import SafetensorsStateDictLoader

    monkeypatch.setattr(pinned_load, "CHUNK", chunk)
    monkeypatch.setattr(pinned_load, "SLOTS", slots)
    ops = ltx2_sd_ops() if with_ops else None
    want = SafetensorsStateDictLoader().load(shards, ops, torch.device("cpu"))
    got = pinned_load.load(shards, ops, torch.device("cpu"), StateDict)
    assert isinstance(got, StateDict)
    assert list(got.sd) == list(want.sd)  # in LTX-2's order too (safetensors writes the bytes by dtype)
    for key, value in want.sd.items():
        assert got.sd[key].dtype == value.dtype and got.sd[key].shape == value.shape, key
        assert torch.equal(bytes_of(got.sd[key]), bytes_of(value)), key
    assert (got.size, got.dtype, got.device) == (want.size, want.dtype, want.device)
    if with_ops:
        assert got.sd["a.weight"].dtype == torch.float32 and "vae.other" not in got.sd


def test_a_dtype_it_does_not_know_is_refused_by_name(tmp_path):
    path = tmp_path / "odd.safetensors"
    header = b'{"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0")
    with pytest.raises(pinned_load.Unreadable, match="tensor w has dtype 'F4'"):
        pinned_load.read_header(str(path))
    path.write_bytes((5).to_bytes(8, "little") + b"{nope")
    with pytest.raises(pinned_load.Unreadable, match="header does not parse"):
        pinned_load.read_header(str(path))
    path.write_bytes((2).to_bytes(8, "little") + b"[]")
    with pytest.raises(pinned_load.Unreadable, match="not a JSON object"):
        pinned_load.read_header(str(path))


@pytest.mark.parametrize("shape, offsets, data", [
    ([4], [0, 8], 16),   # 4 float32 are 16 bytes, not 8: LTX-2's loader raises, nothing is read
    ([2], [0, 8], 4),    # past the end of the file
    ([2], [8, 0], 16),   # backwards
    ("2", [0, 8], 8),    # not a list of sizes
])
def test_a_header_whose_offsets_do_not_hold_its_tensor_is_refused(tmp_path, shape, offsets, data):
    import json

    path = tmp_path / "bad.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": offsets}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(data))
    with pytest.raises(pinned_load.Unreadable, match="tensor w"):
        pinned_load.read_header(str(path))


def test_ltx_tui_runs_read_cuda_loads_through_it_and_the_rest_through_ltx2s(monkeypatch):
    from backends.launch.hooks import _wrap_load

    calls = []
    monkeypatch.setattr(pinned_load, "load", lambda paths, ops, device, kind: calls.append(("pinned", paths, device)) or
                        "pinned")
    load = _wrap_load(lambda self, path, ops, device=None: calls.append(("own", path, device)) or "own")
    assert load(None, "a.safetensors", None, torch.device("cuda", 0)) == "pinned"
    assert load(None, ["a", "b"], None, "cuda") == "pinned"
    assert load(None, "a.safetensors", None, torch.device("cpu")) == "own"
    assert load(None, "a.safetensors", None) == "own"

    def unreadable(*args):
        raise pinned_load.Unreadable("a.safetensors: tensor w has dtype 'F4'")
    monkeypatch.setattr(pinned_load, "load", unreadable)
    assert load(None, "a.safetensors", None, "cuda") == "own"
    assert [c[0] for c in calls] == ["pinned", "pinned", "own", "own", "own"]
    assert calls[0][1:] == (["a.safetensors"], torch.device("cuda", 0)) and calls[1][1] == ["a", "b"]
