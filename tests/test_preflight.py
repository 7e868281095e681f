"""The multi-GPU preflight through `ltx-tui --check --json` on the multi-GPU presets: a good profile
passes, and each thing LTX-2 v1.2.0's sequence parallelism cannot run (or would run otherwise than
asked) is named by its rule before any weights load."""

import dataclasses
import json

import pytest

from backends.machine.capability import PeerAccess
from backends.machine.presets import MULTI_GPU_BOXES, preset
from ltx_tui.cli import main

GOOD = '[transformer]\nquantization = "fp8-cast"\n'  # what LTX-2's *_mgpu modules build


def check(capsys, tmp_path, *argv, profile=GOOD):
    path = tmp_path / "p.toml"
    path.write_text(profile)
    code = main(["--check", "--json", "--profile", str(path), *argv])
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == code
    return code, doc, {d["option"]: d for d in doc["decisions"]}


def cap_file(tmp_path, cap):
    path = tmp_path / "cap.json"
    path.write_text(json.dumps({"capability": cap.to_dict()}))
    return str(path)


@pytest.mark.parametrize("cap, gpus", [("h200x2", 2), ("h200x4", 4), ("h100x8", 8), ("h100x8", 2)])
def test_good_profile_passes(capsys, tmp_path, cap, gpus):
    code, doc, d = check(capsys, tmp_path, "--capability", cap, "--gpus", str(gpus),
                         "--resolution", "768x512", "--frames", "121")
    assert code == 0, [(x["option"], x["message"]) for x in doc["decisions"] if x["status"] != "ok"]
    g = d["parallel.gpus"]
    assert (g["status"], g["effective"]) == ("ok", gpus)
    assert {"parallel.heads", "parallel.max-peers", "parallel.all2all", "parallel.all2all-arch",
            "parallel.peer-access", "parallel.nccl", "parallel.sp-tokens"} <= set(g["rules"])
    assert "6144 video tokens at 768x512x121 within the SP token cap (32768)" in g["chain"][0]["reason"]
    assert d["transformer.quantization"]["effective"] == "fp8-cast"
    assert doc["memory"]["world_size"] == gpus and doc["memory"]["fits"] is True
    assert doc["capability"]["peer_access"]["matrix"][0][1] is True


def test_without_a_run_the_token_cap_is_not_checked(capsys, tmp_path):
    code, doc, d = check(capsys, tmp_path, "--capability", "h200x2", "--gpus", "2")
    assert code == 0 and doc["memory"] is None
    assert "SP token cap (32768 video tokens) not checked: no run given" in d["parallel.gpus"]["chain"][0]["reason"]


def errors(d):
    return {o: x for o, x in d.items() if x["status"] == "error"}


@pytest.mark.parametrize("cap, gpus, rules, words", [
    ("h100x8", 16, ["parallel.gpu-count", "parallel.max-peers"],
     ["parallel.gpus = 16 but 8 CUDA GPU(s) are visible", "multi-node is not supported",
      "all2all connects at most 8 GPUs"]),
    ("h100x16", 16, ["parallel.max-peers"], ["parallel.gpus = 16 is more; allowed: 1, 2, 4, 8"]),
    ("h100x8", 6, ["parallel.heads"], ["32 attention heads", "6 GPUs do not divide them"]),
    ("h200x2", 4, ["parallel.gpu-count"], ["parallel.gpus = 4 but 2 CUDA GPU(s) are visible",
                                            "controller binds 127.0.0.1", "multi-node is not supported"]),
])
def test_world_size_failures(capsys, tmp_path, cap, gpus, rules, words):
    code, _, d = check(capsys, tmp_path, "--capability", cap, "--gpus", str(gpus))
    assert code == 1 and list(errors(d)) == ["parallel.gpus"]
    g = d["parallel.gpus"]
    assert g["rules"] == rules and all(w in g["message"] for w in words), g["message"]
    assert "parallel.gpus" in g["remedy"]


def with_ltx_kernels(cap, **details):
    lk = cap.packages["ltx_kernels"]
    return dataclasses.replace(cap, packages={**cap.packages, "ltx_kernels": dataclasses.replace(
        lk, details={**lk.details, **details})})


def test_no_all2all(capsys, tmp_path):
    cap = with_ltx_kernels(preset("h200x4"), all2all=False, all2all_archs=None,
                           all2all_note="ltx-kernels' all2all extension (all2all_cpp) is not installed")
    code, _, d = check(capsys, tmp_path, "--capability", cap_file(tmp_path, cap), "--gpus", "4")
    g = d["parallel.gpus"]
    assert code == 1 and g["rules"] == ["parallel.all2all"]
    assert "needs ltx-kernels' all2all: ltx-kernels' all2all extension (all2all_cpp) is not installed" in g["message"]


def test_all2all_built_for_another_gpu(capsys, tmp_path):
    cap = with_ltx_kernels(preset("b200x2"), all2all_archs=["sm_90"], all2all_path="/x/all2all_cpp.so")
    code, _, d = check(capsys, tmp_path, "--capability", cap_file(tmp_path, cap), "--gpus", "2")
    g = d["parallel.gpus"]
    assert code == 1 and g["rules"] == ["parallel.all2all-arch"]
    assert "(/x/all2all_cpp.so) holds GPU code for sm_90 only: nothing that runs on NVIDIA B200 (SM 10.0)" in g["message"]


def test_all2all_of_unknown_architecture_is_a_warning_never_ok(capsys, tmp_path):
    cap = with_ltx_kernels(preset("h200x2"), all2all_archs=None, all2all_note="no CUDA fat binary in it (x.so)")
    code, _, d = check(capsys, tmp_path, "--capability", cap_file(tmp_path, cap), "--gpus", "2")
    g = d["parallel.gpus"]
    assert code == 0 and g["status"] == "warning" and g["rules"] == ["parallel.all2all-unverified"]
    assert "not verified that it runs on SM 9.0" in g["message"] and "no CUDA fat binary" in g["message"]
    assert main(["--check", "--strict", "--capability", cap_file(tmp_path, cap), "--gpus", "2",
                 "--profile", str(tmp_path / "p.toml")]) == 1
    capsys.readouterr()


def test_no_peer_access(capsys, tmp_path):
    cap = preset("h200x2")
    cap = dataclasses.replace(cap, peer_access=PeerAccess(((True, False), (False, True)),
                                                          "torch.cuda.can_device_access_peer", None))
    code, _, d = check(capsys, tmp_path, "--capability", cap_file(tmp_path, cap), "--gpus", "2")
    g = d["parallel.gpus"]
    assert code == 1 and g["rules"] == ["parallel.peer-access"]
    assert "GPU pair(s) 0-1 have no peer access (torch.cuda.can_device_access_peer)" in g["message"]
    assert "CUDA IPC" in g["message"] and "nvidia-smi topo -p2p" in g["remedy"]


def test_peer_access_unknown_is_a_warning(capsys, tmp_path):
    """A capability that cannot say (an older file, a preset of PCIe boards): not verified, never ok."""
    data = {"capability": preset("h200x2").to_dict()}
    del data["capability"]["peer_access"]  # written before ltx-tui probed peer access
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    code, _, d = check(capsys, tmp_path, "--capability", str(path), "--gpus", "2")
    g = d["parallel.gpus"]
    assert code == 0 and g["status"] == "warning" and g["rules"] == ["parallel.peer-access-unverified"]
    assert "peer access of GPU pair(s) 0-1 is not known (not in this capability file" in g["message"]
    code, _, d = check(capsys, tmp_path, "--capability", "l40sx2", "--gpus", "2")
    assert "parallel.peer-access-unverified" in d["parallel.gpus"]["rules"]  # and no ltx-kernels: an error


def test_tokens_over_the_cap(capsys, tmp_path):
    code, doc, d = check(capsys, tmp_path, "--capability", "h200x4", "--gpus", "4",
                         "--resolution", "2048x1152", "--frames", "121")
    g = d["parallel.gpus"]
    assert code == 1 and g["rules"] == ["parallel.sp-tokens"]
    assert "the run (2048x1152x121) gives sequence parallelism 36864 video tokens" in g["message"]
    assert "over its cap of 32768 (sp_max_tokens" in g["message"] and "not a command-line flag" in g["remedy"]
    assert doc["memory"]["world_size"] == 4


@pytest.mark.parametrize("profile, option, words", [
    ("", "transformer.quantization", "transformer.quantization = none would silently run fp8-cast"),
    ('[transformer]\nquantization = "fp8-scaled-mm"\n', "transformer.quantization",
     "transformer.quantization = fp8-scaled-mm would silently run fp8-cast"),
    (GOOD + '[offload]\nmode = "cpu"\n', "offload.mode", "offload.mode = cpu would silently stream nothing"),
])
def test_flags_the_multi_gpu_command_lines_drop_are_errors(capsys, tmp_path, profile, option, words):
    code, _, d = check(capsys, tmp_path, "--capability", "h100x8", "--gpus", "8", profile=profile)
    assert code == 1 and list(errors(d)) == [option]
    x = d[option]
    assert x["rules"] == ["parallel.ignores-quant-offload"] and words in x["message"]
    assert "LTX-2's multi-GPU command lines (*_mgpu) drop" in x["message"] and "parallel.gpus = 1" in x["remedy"]
    assert d["parallel.gpus"]["status"] == "ok"


def test_compile_under_sp_is_a_warning(capsys, tmp_path):
    code, _, d = check(capsys, tmp_path, "--capability", "h200x2", "--gpus", "2",
                       profile=GOOD + "[compile]\nenabled = true\n")
    c = d["compile.enabled"]
    assert code == 0 and (c["status"], c["rules"]) == ("warning", ["parallel.compile-barrier"])
    assert "10 s timeout" in c["message"] and "All2All.set_timeout_seconds" in c["message"]
    assert "`ltx-tui run` raises the barrier timeout in every rank before the first step" in c["message"]


def test_gpus_flag_usage(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["--gpus", "2"])
    assert e.value.code == 2 and "--gpus goes with --check" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--check", "--gpus", "0"])
    assert e.value.code == 2
    capsys.readouterr()
    path = tmp_path / "p.toml"
    path.write_text("[parallel]\ngpus = 2\ndevices = [0, 1]\n")
    assert main(["--check", "--capability", "h100x8", "--profile", str(path), "--gpus", "4"]) == 2
    assert "--gpus 4: parallel.devices: lists 2 device(s) but parallel.gpus = 4" in capsys.readouterr().err
    assert main(["--check", "--capability", "h100x8", "--gpus", "65"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["--explain", "parallel.gpus", "--capability", "h100x8", "--gpus", "16"]) == 1  # the option cannot run: --check's exit 1
    assert "profile:  16 -> cannot run (error)" in capsys.readouterr().out


def test_the_multi_gpu_presets_are_listed_and_valid(capsys):
    assert main(["--list-capabilities"]) == 0
    out = capsys.readouterr().out
    assert all(box in out for box in MULTI_GPU_BOXES)
    for box in MULTI_GPU_BOXES:
        cap = preset(box)
        n = len(cap.gpus)
        assert n in (2, 4, 8) and cap.peer_access.matrix == tuple((True,) * n for _ in range(n))
        lk = cap.package("ltx_kernels").details
        sm = "".join(map(str, cap.gpus[0].compute_capability))
        assert lk["all2all"] is True and lk["all2all_archs"] == [f"sm_{sm}"]
