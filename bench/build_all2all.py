"""Build ltx-kernels' all2all, the CUDA extension LTX-2's multi-GPU modules need, without its setup.py.

    python bench/build_all2all.py [--src .ltx2/ltx-kernels-v1.2.0] [--build-dir .ltx2/all2all-build] [--verbose]

LTX-2 v1.2.0's sequence parallelism imports `from ltx_kernels import All2All` (ltx-core's
multigpu/transformer/attention.py, when its AttentionManager is made), and ltx-kernels'
`ltx_kernels/all_to_all.py` imports the compiled extension as the top-level module `all2all_cpp`.
ltx-kernels' setup.py builds every extension it has and fetches CUTLASS from the network (the GPU
machine has none), so this builds the one extension alone, with `torch.utils.cpp_extension.load`,
from the three sources and two include folders setup.py gives it and setup.py's compiler flags.
The result is `all2all_cpp.so` in the build folder. The script prints the PYTHONPATH that makes
both imports work (ltx-kernels' `src/` folder and the build folder): set it for `ltx-tui run`, so
that the ranks LTX-2 spawns, which get the launching process's `sys.path`, import them too.
A second run with unchanged sources only loads the built module (ninja sees nothing to do).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = ROOT / ".ltx2" / "ltx-kernels-v1.2.0"
DEFAULT_BUILD = ROOT / ".ltx2" / "all2all-build"
SOURCES = ("csrc/all2all/all2all.cpp", "csrc/all2all/cuda/all2all_heads.cu", "csrc/all2all/cuda/allgather.cu")
INCLUDES = ("csrc/all2all", "csrc/include")
# ltx-kernels v1.2.0's setup.py compiles all2all_cpp's C++ with these and its CUDA with -O3
CXX_FLAGS = ("-O3", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-Wno-attributes")
CUDA_FLAGS = ("-O3",)
NAME = "all2all_cpp"  # the module name ltx_kernels/all_to_all.py imports


def _pip_cuda_includes() -> list[str]:
    """Header folders of pip-installed NVIDIA packages (setup.py adds them too), when there are any."""
    try:
        import nvidia
    except ImportError:
        return []
    return [str(p / "include") for root in nvidia.__path__ for p in Path(root).iterdir() if (p / "include").is_dir()]


def pythonpath(src: Path = DEFAULT_SRC, build_dir: Path = DEFAULT_BUILD) -> list[str]:
    """The sys.path entries for `import ltx_kernels` and `import all2all_cpp`."""
    return [str(Path(src).resolve() / "src"), str(Path(build_dir).resolve())]


def built(build_dir: Path = DEFAULT_BUILD) -> bool:
    return any(Path(build_dir).glob(f"{NAME}*.so"))


def build(src: Path = DEFAULT_SRC, build_dir: Path = DEFAULT_BUILD, *, verbose: bool = False):
    """Compile (or load, when up to date) the extension into `build_dir`; the loaded module, also
    registered as `all2all_cpp` in this process."""
    from torch.utils.cpp_extension import load

    src, build_dir = Path(src).resolve(), Path(build_dir).resolve()
    missing = [p for p in SOURCES + INCLUDES if not (src / p).exists()]
    if missing:
        raise SystemExit(f"bench/build_all2all.py: {src} is not an ltx-kernels v1.2.0 source folder "
                         f"(missing {', '.join(missing)}); copy it there (e.g. from ../shared/third_party)")
    build_dir.mkdir(parents=True, exist_ok=True)
    module = load(name=NAME, sources=[str(src / p) for p in SOURCES],
                  extra_include_paths=[str(src / p) for p in INCLUDES] + _pip_cuda_includes(),
                  extra_cflags=list(CXX_FLAGS), extra_cuda_cflags=list(CUDA_FLAGS), build_directory=str(build_dir),
                  verbose=verbose, is_python_module=True)
    sys.modules.setdefault(NAME, module)
    return module


def check(src: Path = DEFAULT_SRC, build_dir: Path = DEFAULT_BUILD) -> str:
    """Import LTX-2's way (`from ltx_kernels import All2All`) with the printed PYTHONPATH."""
    sys.path[:0] = [p for p in pythonpath(src, build_dir) if p not in sys.path]
    from ltx_kernels import All2All

    return f"{All2All.__module__}.All2All over {sys.modules[NAME].__file__}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, default=DEFAULT_SRC, help="an ltx-kernels v1.2.0 source folder")
    p.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD)
    p.add_argument("--verbose", action="store_true", help="show the compiler's command lines")
    args = p.parse_args()
    import torch

    if torch.version.cuda is None:
        raise SystemExit("bench/build_all2all.py: this torch has no CUDA; build on the GPU machine")
    t = time.perf_counter()
    module = build(args.src, args.build_dir, verbose=args.verbose)
    print(f"built {NAME} in {time.perf_counter() - t:.1f} s: {module.__file__}", flush=True)
    print(f"import: {check(args.src, args.build_dir)}")
    print(f"PYTHONPATH={os.pathsep.join(pythonpath(args.src, args.build_dir))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
