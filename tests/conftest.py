import importlib.util
import os
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

# Without CUDA, Triton kernels run in its CPU interpreter; the switch is read when kernels
# are defined, so it must be set before kernels.na3d_triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# torch.compile's caches: one directory for every test and run of the suite (the runtime would
# point them into each test's own cache directory and compile everything again).
COMPILE_CACHES = pathlib.Path(os.environ.get("LTX_TUI_TEST_COMPILE_CACHE", "/tmp/ltx-tui-test-compile-cache"))


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's tune cache (`auto` would follow its measurements) or
    run ledger; torch.compile's caches are the suite's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(COMPILE_CACHES / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(COMPILE_CACHES / "triton"))


@pytest.fixture(scope="module")
def ltx2_core():
    """LTX-2 v1.2.0's ltx_core package; skips with how to get it (LTX2_CORE_SRC) when missing."""
    from backends.runtime import ltx2

    module, why = ltx2.import_ltx_core()
    if module is None:
        pytest.skip(why)
    return module


@pytest.fixture(scope="module")
def ltx2_pipelines():
    """LTX-2 v1.2.0's ltx_pipelines package (with the torchaudio stand-in where torchaudio is missing);
    skips with how to get it (LTX2_PIPELINES_SRC) when missing."""
    from backends.launch import gate

    if importlib.util.find_spec("torchaudio") is None:
        sys.path.insert(0, str(pathlib.Path(__file__).parent / "stand_ins"))
    module, why = gate.import_ltx_pipelines()
    if module is None:
        pytest.skip(why)
    return module
