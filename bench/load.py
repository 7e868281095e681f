"""LTX-2's safetensors loader against `backends.launch.pinned_load`, a checkpoint onto the GPU.

For each of `--repeat` rounds, in one process: LTX-2 v1.2.0's `SafetensorsStateDictLoader.load`
(each tensor through `safetensors.safe_open(device=cuda)`), then `pinned_load.load` (chunks
through pinned buffers, reads in threads overlapping the copies), each timed to a device sync,
with GB/s of the file's tensor bytes, the two in turn first; the first round also checks that both
state dicts are equal bit for bit and in the same order (it holds both on the device: twice the
checkpoint). The file's pages are wherever the machine has them (a file just written is in the
page cache): compare the two rows of one round.

    LTX2_CORE_SRC=.../ltx-core/src python bench/load.py FILE.safetensors [--repeat 2]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if os.environ.get("LTX2_CORE_SRC"):
        sys.path.insert(0, os.environ["LTX2_CORE_SRC"])
    import torch
    from ltx_core.loader.primitives import StateDict
    from ltx_core.loader.sft_loader import SafetensorsStateDictLoader

    from backends.launch import pinned_load

    device = torch.device("cuda", torch.cuda.current_device())
    gb = sum(e.end - e.begin for e in pinned_load.read_header(args.file)) / 1e9
    loaders = {"LTX-2 SafetensorsStateDictLoader": lambda: SafetensorsStateDictLoader().load(args.file, None, device),
               "ltx-tui pinned_load": lambda: pinned_load.load([args.file], None, device, StateDict)}
    print(f"{args.file}: {gb:.2f} GB of tensors; {pinned_load.SLOTS} x {pinned_load.CHUNK >> 20} MiB pinned buffers")
    print(f"{'round':>5}  {'loader':<34} {'s':>7} {'GB/s':>6}")
    for r in range(args.repeat):
        results = {}
        order = list(loaders.items())[::-1 if r % 2 else 1]  # neither always reads the pages the other warmed
        for name, load in order:
            torch.cuda.synchronize()
            t = time.perf_counter()
            sd = load()
            torch.cuda.synchronize()
            s = time.perf_counter() - t
            print(f"{r + 1:>5}  {name:<34} {s:7.3f} {gb / s:6.2f}", flush=True)
            if r == 0:
                results[name] = sd
            del sd
            gc.collect()
        if results:
            a, b = results.values()
            same = list(a.sd) == list(b.sd) and all(
                a.sd[k].dtype == b.sd[k].dtype and a.sd[k].shape == b.sd[k].shape
                and torch.equal(a.sd[k].reshape(-1).view(torch.uint8), b.sd[k].reshape(-1).view(torch.uint8))
                for k in a.sd)
            print(f"       equal bit for bit: {same} ({len(a.sd)} tensors)")
            del results, a, b
            gc.collect()
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
