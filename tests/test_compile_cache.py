"""torch.compile's caches go to ltx-tui's cache directory, keyed by the versions that decide the
compiled code, unless the environment already names them."""

import pytest

from backends.runtime.compile_cache import ENV, cache_key, use_compile_caches


def test_caches_go_under_ltx_tuis_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = {}
    used = use_compile_caches(env)
    root = tmp_path / "ltx-tui" / "compile" / cache_key()
    assert used == env == {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"), "TRITON_CACHE_DIR": str(root / "triton")}
    assert cache_key().startswith("torch-") and "triton-" in cache_key()
    assert use_compile_caches(env) == used  # again: unchanged


def test_a_directory_the_user_set_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = {"TRITON_CACHE_DIR": "/mine/triton"}
    used = use_compile_caches(env)
    assert used["TRITON_CACHE_DIR"] == "/mine/triton" and str(tmp_path) in used["TORCHINDUCTOR_CACHE_DIR"]
    assert set(used) == set(ENV)


def test_inductors_own_default_written_by_an_import_is_replaced(tmp_path, monkeypatch):
    """Importing LTX-2's decoder module makes Inductor look up its cache directory, and Inductor then
    writes its temporary default into the environment: on the H200 every process after that compiled
    into /tmp/torchinductor_<user>, and none found what the last one had compiled."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache_dir()  # what such an import does
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    used = use_compile_caches()
    assert used["TORCHINDUCTOR_CACHE_DIR"] == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert used["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path)) and cache_dir().startswith(str(tmp_path))


def test_apply_env_sets_them_before_anything_compiles(tmp_path, monkeypatch):
    from backends.config.options import Profile
    from backends.runtime.apply import apply_env

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = {}
    apply_env(Profile().replace(**{"memory.expandable_segments": False}), env)
    assert set(env) == set(ENV) and all(str(tmp_path) in v for v in env.values())


def test_what_a_process_compiled_elsewhere_is_merged_in_keeping_what_is_there(tmp_path):
    from backends.runtime.compile_cache import merge_compile_caches

    src = tmp_path / "cold"
    (src / "inductor" / "fx" / "ab").mkdir(parents=True)
    (src / "inductor" / "fx" / "ab" / "graph").write_text("new graph")
    (src / "inductor" / "kept").write_text("new")
    (src / "triton" / "k1").mkdir(parents=True)
    (src / "triton" / "k1" / "kernel.cubin").write_text("cubin")
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind"), "TRITON_CACHE_DIR": str(tmp_path / "tri")}
    (tmp_path / "ind").mkdir()
    (tmp_path / "ind" / "kept").write_text("old")
    assert merge_compile_caches(src, env) == 2
    assert (tmp_path / "ind" / "fx" / "ab" / "graph").read_text() == "new graph"
    assert (tmp_path / "ind" / "kept").read_text() == "old"  # an entry already there is not replaced
    assert (tmp_path / "tri" / "k1" / "kernel.cubin").read_text() == "cubin"
    assert not list(tmp_path.rglob("*.part"))
    assert merge_compile_caches(tmp_path / "nothing", env) == 0


def test_merged_triton_groups_find_their_kernels_after_the_source_is_gone(tmp_path, monkeypatch):
    """Triton's group files list their members by absolute path: merged, they must name the copies
    (the tune's cold directory is deleted after the merge; a group pointing there recompiles all)."""
    import shutil

    from triton.runtime.cache import FileCacheManager

    from backends.runtime.compile_cache import merge_compile_caches

    cold, warm = tmp_path / "cold", tmp_path / "warm"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cold / "triton"))
    cache = FileCacheManager("k" * 32)
    member = cache.put(b"cubin", "kernel.cubin", binary=True)
    cache.put_group("kernel.json", {"kernel.cubin": member})
    env = {"TORCHINDUCTOR_CACHE_DIR": str(warm / "inductor"), "TRITON_CACHE_DIR": str(warm / "triton")}
    assert merge_compile_caches(cold, env) == 2
    shutil.rmtree(cold)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(warm / "triton"))
    group = FileCacheManager("k" * 32).get_group("kernel.json")
    assert group is not None and open(group["kernel.cubin"], "rb").read() == b"cubin"


def test_a_forced_sdpa_backend_leaves_the_graph_cacheable_by_aotautograd(monkeypatch):
    """Dynamo writes `sdpa_kernel` (ltx-tui's forced SDPA backends) as calls AOTAutograd's cache
    bypasses unless marked: on the H200 every compiled DiT block was then traced again in every
    process ("Bypassing autograd cache due to: Unsupported call_function target _backend_from_string")."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache, check_cacheable
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from backends.runtime.compile_cache import mark_cacheable

    monkeypatch.setattr(inductor_config, "unsafe_marked_cacheable_functions", {})
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=capture, fullgraph=True)
    def attend(q):
        with sdpa_kernel([SDPBackend.MATH]):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    attend(torch.randn(1, 2, 8, 16))
    with pytest.raises(BypassAOTAutogradCache, match="_backend_from_string"):
        check_cacheable(graphs[0])
    mark_cacheable()
    mark_cacheable()
    assert inductor_config.unsafe_marked_cacheable_functions == {
        "torch.nn.attention._backend_from_string": torch.__version__, "torch.nn.attention._sdpa_kernel": torch.__version__}
    check_cacheable(graphs[0])  # no bypass
