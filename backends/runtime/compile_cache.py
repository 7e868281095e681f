"""torch.compile's caches in ltx-tui's cache directory, so a later process compiles from them.

Inductor (its FX-graph and autotuning caches, `TORCHINDUCTOR_CACHE_DIR`) and Triton (compiled
kernels, `TRITON_CACHE_DIR`) default to per-user temporary directories that a reboot or a fresh
container loses, and then every process pays the whole compile again (12-20 s for a first
chunked_compile decode on the H200). `use_compile_caches()` points both into
`<user cache>/ltx-tui/compile/<key>/` before anything compiles, keyed, like the tune cache, by
what decides the compiled code (torch, triton and Python versions; the caches key each entry by
graph, device and compiler themselves). A directory already set in the environment is kept.
`merge_compile_caches()` copies what a process compiled into a directory of its own into them
(the tune compiles its first candidate process into an empty one, to time a cold compile).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import MutableMapping

ENV = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
KEY_DISTS = ("torch", "triton")


def cache_key() -> str:
    """'torch-2.11.0-triton-3.6.0-py3.12-<hash>': the versions that decide what compiles."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in KEY_DISTS:
        try:
            parts.append(f"{dist}-{version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist}-none")
    text = "-".join(parts) + f"-py{sys.version_info[0]}.{sys.version_info[1]}"
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in text)[:120] + "-" + \
        hashlib.sha256(text.encode()).hexdigest()[:8]


def compile_cache_root() -> Path:
    import platformdirs

    return platformdirs.user_cache_path("ltx-tui") / "compile" / cache_key()


def _inductors_default() -> str | None:
    """The directory Inductor writes into TORCHINDUCTOR_CACHE_DIR itself when it finds none (its
    first look, which some imports make: LTX-2's decoder module does), None before Inductor loads."""
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    return None if utils is None else utils.default_cache_dir()


def use_compile_caches(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Point Inductor's and Triton's caches into ltx-tui's cache directory where the environment
    does not already name one (Inductor's own default, written there by Inductor when an import
    looked first, counts as none); returns the directories in use. Harmless to call again."""
    environ = os.environ if environ is None else environ
    root = None
    for var, sub in ENV.items():
        if not environ.get(var) or (var == "TORCHINDUCTOR_CACHE_DIR" and environ[var] == _inductors_default()):
            root = root or compile_cache_root()
            environ[var] = str(root / sub)
    return {var: environ[var] for var in ENV}


# Functions Dynamo writes into graphs that AOTAutograd's cache does not know, and so bypasses, though
# the graph holds all they depend on: `sdpa_kernel` (ltx-tui's forced SDPA backend) becomes calls of
# these two, the backends' names as constants. Without the mark every compiled DiT block is traced
# by AOTAutograd again in every process.
CACHEABLE = ("torch.nn.attention._backend_from_string", "torch.nn.attention._sdpa_kernel")


def mark_cacheable() -> None:
    """Let AOTAutograd's cache keep graphs that call CACHEABLE (keyed by torch's version; the mark
    is part of Inductor's configuration, so of its cache keys: every ltx-tui process sets it alike).
    Harmless to call again."""
    import torch
    import torch._inductor.config as inductor_config

    marked = dict(inductor_config.unsafe_marked_cacheable_functions)
    if any(marked.get(name) != torch.__version__ for name in CACHEABLE):
        inductor_config.unsafe_marked_cacheable_functions = {**marked, **dict.fromkeys(CACHEABLE, torch.__version__)}


def merge_compile_caches(src: Path, environ: MutableMapping[str, str] | None = None) -> int:
    """Copy the Inductor and Triton caches under `src` (`src/inductor`, `src/triton`, as a process
    with TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR there wrote them) into the caches this process's
    environment names, else ltx-tui's (`environ` is not changed); a file already there is kept.
    Each file lands whole (a temporary name, then a rename). Returns the files copied."""
    dirs = use_compile_caches(dict(os.environ if environ is None else environ))
    copied = 0
    for var, sub in ENV.items():
        root, into = src / sub, Path(dirs[var])
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            target = into / path.relative_to(root)
            if path.is_dir() or path.is_symlink() or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.{os.getpid()}.part")
            if path.name.startswith("__grp__") and path.suffix == ".json":
                # Triton's group files name their members by absolute path: point them at the copies
                partial.write_text(path.read_text().replace(str(root), str(into)))
            else:
                shutil.copyfile(path, partial)
            os.replace(partial, target)
            copied += 1
    return copied
