"""compile.capture before the block loop: LTX-2's two `prepare` calls, one CUDA graph per call signature.

LTXModel.forward turns each modality into its `TransformerArgs` before the block loop
(`video_args_preprocessor.prepare(video, audio)`, `audio_args_preprocessor.prepare(audio, video)`:
patchify, the timestep MLPs, the caption projection, the RoPE tables; LTX-2 v1.2.0,
ltx_core/model/transformer/transformer_args.py): ~170 small kernels issued from Python, which a
captured block loop waits on at every forward (bench/RESULTS.md, tenth round). `PrepareGraphs`
stands in for one preprocessor's `prepare`, keyed like the loop (`block_graph.args_key` of both
modalities): a signature's first call runs as it is; its second copies the modalities' tensors
into static buffers and captures `prepare` on them; later calls copy their tensors in and replay.
The `TransformerArgs` returned live in the graph's memory until its next replay: LTX-2 reads them
within the same forward (the loop graphs copy them into their own buffers).

LTX-2 copies its cached host frequency grid (`generate_freq_grid_pytorch` / `_np`, lru-cached CPU
tensors) to the device at every call, a blocking copy that a capture refuses. While `PrepareGraphs`
runs `prepare` (its first call and the capture, not a replay), those two names in LTX-2's
`transformer_args` module give the same grid already on the call's device (one copy per grid and
device, kept with the graphs, which read it at each replay), so LTX-2's copy has nothing to do;
they are LTX-2's own again when the call returns. A signature the
graph cannot hold (a host sync: the boolean indexing of a self-attention mask, `Modality.attention_mask`)
runs eagerly from then on, and `failed` says why.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

import torch

from backends.runtime.block_graph import args_key, capture, copy_args, static_args

GRIDS = ("generate_freq_grid_pytorch", "generate_freq_grid_np")


@dataclass
class _Graph:
    """A signature's static modalities, its graph and its output (in the graph's memory)."""

    modality: Any
    cross: Any
    graph: torch.cuda.CUDAGraph | None = None
    out: Any = None


class PrepareGraphs:
    """Stands in for a preprocessor's `prepare(modality, cross_modality)`: captures it per signature,
    replays. One caller at a time, as LTX-2's forward calls it."""

    def __init__(self, prepare: Callable) -> None:
        self.prepare = prepare
        self.graphs: dict[Hashable, _Graph | None] = {}  # None: a signature met once
        self.failed: dict[Hashable, str] = {}  # a signature that runs eagerly, and why
        self.grids: dict[tuple, torch.Tensor] = {}  # (grid function, its arguments, device) -> the grid there
        self.pool = None
        self.replays = 0

    def __call__(self, modality: Any, cross_modality: Any = None):
        x = modality.latent
        if x.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return self.prepare(modality, cross_modality)
        try:
            key = args_key(modality), args_key(cross_modality)
        except TypeError:  # a field that cannot be keyed: eager for this call
            return self.prepare(modality, cross_modality)
        if key in self.failed:
            return self.prepare(modality, cross_modality)
        with torch.cuda.device(x.device):
            if key not in self.graphs:  # first call: as it is (the grids on the device for the capture to come)
                self.graphs[key] = None
                with self._device_grids(x.device):
                    return self.prepare(modality, cross_modality)
            g = self.graphs[key]
            if g is None:  # second call: static buffers holding its tensors, the capture on them
                g = _Graph(static_args(modality), static_args(cross_modality))
                if not self._capture(key, g):
                    return self.prepare(modality, cross_modality)
                self.graphs[key] = g
            else:
                copy_args(g.modality, modality)
                copy_args(g.cross, cross_modality)
            g.graph.replay()
        self.replays += 1
        return g.out

    def release(self) -> None:
        """Free the graphs, their buffers, pool and grids; a later call captures again."""
        self.graphs.clear()
        self.grids.clear()
        self.pool = None

    @contextlib.contextmanager
    def _device_grids(self, device: torch.device) -> Iterator[None]:
        """LTX-2's frequency-grid functions, as `transformer_args` calls them, giving the grid on `device`."""
        from ltx_core.model.transformer import transformer_args

        originals = {name: getattr(transformer_args, name) for name in GRIDS if hasattr(transformer_args, name)}

        def on_device(name: str, grid: Callable) -> Callable:
            def device_grid(*args):
                key = (name, *args, device)
                t = self.grids.get(key)
                if t is None:
                    t = self.grids[key] = grid(*args).to(device)
                return t
            return device_grid

        for name, grid in originals.items():
            setattr(transformer_args, name, on_device(name, grid))
        try:
            yield
        finally:
            for name, grid in originals.items():
                setattr(transformer_args, name, grid)

    def _capture(self, key: Hashable, g: _Graph) -> bool:
        """Capture `g`'s graph on its buffers. False when `prepare` cannot be captured: that signature
        then runs eagerly, and `failed` says why."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with self._device_grids(g.modality.latent.device):
            graph, out, failure = capture(lambda: self.prepare(g.modality, g.cross), self.pool)
        if failure is not None:
            self.failed[key] = f"capture failed: {failure}"
            del self.graphs[key]
            self.pool = None  # a capture that failed may leave its pool recording
            warnings.warn(f"compile.capture: LTX-2's prepare runs without a CUDA graph for this input: {failure}",
                          stacklevel=4)
            return False
        g.graph, g.out = graph, out
        return True


def capture_prepare(owner: torch.nn.Module) -> list[PrepareGraphs]:
    """Install `PrepareGraphs` on the `prepare` of each of LTXModel `owner`'s preprocessors."""
    installed = []
    for name in ("video_args_preprocessor", "audio_args_preprocessor"):
        pre = getattr(owner, name, None)
        if pre is None or isinstance(getattr(pre, "prepare", None), PrepareGraphs):
            continue
        graphs = PrepareGraphs(pre.prepare)
        pre.prepare = graphs
        installed.append(graphs)
    return installed
