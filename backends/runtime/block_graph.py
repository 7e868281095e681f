"""`compile.capture`: LTX-2's whole transformer block loop as one CUDA graph per call signature.

A compiled DiT forward at a few thousand tokens is bound by the host: Python and ~120 kernel
launches a block (bench/RESULTS.md, "bench/ltx2_dit.py ... fp8 attention": 260 ms of issue time
against 238 ms of GPU work at 6144 tokens). Inductor's own CUDA graphs (compile.mode
reduce-overhead) make one graph a block, and pay the graph trees' bookkeeping and input copies
48 times a forward. `LoopGraphs` takes over `LTXModel._process_transformer_blocks(video, audio,
perturbations)` instead, the loop over the blocks (LTX-2 v1.2.0, ltx_core/model/transformer/model.py):
the patchify, RoPE tables and output projection around it stay eager, and the blocks inside stay
compiled without CUDA graphs of their own.

A call's signature is every tensor's shape, stride, dtype and device in the two `TransformerArgs`
(dataclasses; tensors and tuples of tensors), every other field's value, the perturbation masks'
shape, and what the blocks specialise on in them (LTX-2's `block_input_processor.graph_signature`:
which attention branches run; without it, the masks' host values). The first call of a signature
copies its tensors into new static buffers and runs the loop on them as it is (compiling and
autotuning there, outside any capture): its result is the caller's, so a signature met once costs
only the copy of its inputs, held until `release`. The second captures the loop on those same
buffers (the tensors the blocks were compiled for) and replays it; later calls copy their tensors
in and replay. So capturing costs one host pass over the blocks (recording, with the GPU idle:
about one forward's issue time) per signature, not extra forwards. A replay's `TransformerArgs`
live in the graph's memory until the next replay: LTX-2's forward reads them straight into its
output projection. The graphs of one model share one memory pool (calls never overlap), held
until `release_loop_graphs(model)`: LTX-2's `dispose` keeps the module (its registry holds the
shell), so whoever disposes the DiT releases them first (`ltx-tui run` does).
Capture and replay run on the call's device. A loop the graph cannot capture (a host sync inside
it) runs eagerly from then on, `reason` says why; a call that cannot be keyed (perturbation masks
without their host copy) runs eagerly on its own.
"""

from __future__ import annotations

import dataclasses
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable

import torch

LOOP = "_process_transformer_blocks"
SIGNATURES_KEPT = 64  # distinct perturbation mask contents remembered (a run meets a few: CFG, STG)


def loop_owner(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module whose block loop `LoopGraphs` can take: LTX-2's `LTXModel` (the model itself,
    or inside a wrapper such as its `X0Model`); None for models without one."""
    for module in model.modules():
        if callable(getattr(module, LOOP, None)) and hasattr(module, "block_input_processor"):
            return module
    return None


def _tensor_key(t: torch.Tensor) -> tuple:
    return ("tensor", tuple(t.shape), t.stride(), t.dtype, str(t.device))


def _field_key(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        return _tensor_key(value)
    if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(_tensor_key(v) for v in value)
    if isinstance(value, (tuple, list, dict)):  # a tensor inside would be keyed by its identity
        raise TypeError(f"a {type(value).__name__} field that is not a tuple of tensors cannot be keyed")
    hash(value)  # a value the graph bakes in must be comparable; TypeError otherwise
    return ("value", value)


def args_key(args: Any) -> Hashable:
    """The signature of one `TransformerArgs` (or None)."""
    if args is None:
        return None
    return tuple((f.name, _field_key(getattr(args, f.name))) for f in dataclasses.fields(args))


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(v.clone() for v in value)
    return value


def static_args(args: Any) -> Any:
    """Buffers for the graph to read: `args` with each tensor copied."""
    if args is None:
        return None
    return dataclasses.replace(args, **{f.name: _clone(getattr(args, f.name)) for f in dataclasses.fields(args)})


def copy_args(dst: Any, src: Any) -> None:
    """Copy `src`'s tensors into `dst`'s static buffers (same signature)."""
    if dst is None:
        return
    for f in dataclasses.fields(dst):
        d, s = getattr(dst, f.name), getattr(src, f.name)
        if isinstance(d, torch.Tensor):
            d.copy_(s)
        elif isinstance(d, tuple):
            for di, si in zip(d, s):
                if isinstance(di, torch.Tensor):
                    di.copy_(si)


@dataclass
class _Graph:
    """A signature's static buffers and, from its second call, its graph."""

    video: Any
    audio: Any
    perturbations: Any  # over `masks`, the perturbation masks the graph reads
    masks: torch.Tensor
    graph: torch.cuda.CUDAGraph | None = None
    out: tuple[Any, Any] | None = None


class LoopGraphs:
    """Stands in for `owner._process_transformer_blocks`: captures it per signature, replays. One
    caller at a time (the static buffers are shared), as LTX-2 calls its DiT."""

    def __init__(self, owner: torch.nn.Module, loop: Callable) -> None:
        self.owner = owner
        self.loop = loop
        self.graphs: dict[Hashable, _Graph] = {}
        self.pool = None
        self.replays = 0
        self.reason: str | None = None  # why the loop runs eagerly from now on (None: it is captured)
        self._signatures: dict[Hashable, Hashable] = {}
        self.prepares: list = []  # the `prepare_graph.PrepareGraphs` before the loop

    def key(self, video: Any, audio: Any, perturbations: Any) -> Hashable:
        masks, host = perturbations.block_masks, perturbations.block_masks_cpu
        if host is None:
            raise ValueError("the perturbation masks have no host copy, which says which branches each block runs")
        return args_key(video), args_key(audio), _tensor_key(masks), self._which(host, perturbations)

    def _which(self, host: torch.Tensor, perturbations: Any) -> Hashable:
        """What the blocks specialise on in the masks' host values: LTX-2's `graph_signature`, worked
        out once per processor and mask contents. It asks each block's guards of the host masks, ~290
        small tensor ops at 48 blocks: 4.6 ms of host time a forward on the H200's host, with the GPU
        idle before the replay (bench/RESULTS.md, tenth round)."""
        processor = self.owner.block_input_processor
        values = tuple(host.flatten().tolist())
        memo = (id(processor), type(processor), tuple(host.shape), values)
        which = self._signatures.get(memo)
        if which is None:
            signature = getattr(processor, "graph_signature", None)
            which = signature(perturbations) if signature else values
            if len(self._signatures) >= SIGNATURES_KEPT:
                self._signatures.clear()
            self._signatures[memo] = which
        return which

    def __call__(self, video: Any, audio: Any, perturbations: Any):
        x = (video or audio).x
        if self.reason is not None or x.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return self.loop(video, audio, perturbations)
        try:
            key = self.key(video, audio, perturbations)
        except (TypeError, ValueError):  # eager for this call only: the next may carry what a key needs
            return self.loop(video, audio, perturbations)
        with torch.cuda.device(x.device):
            g = self.graphs.get(key)
            if g is None:  # first call: static buffers, and the loop run on them as it is
                g = self._buffers(video, audio, perturbations)
                out = self.loop(g.video, g.audio, g.perturbations)
                self.graphs[key] = g  # only a run that went through warmed the loop up for a capture
                return out
            copy_args(g.video, video)
            copy_args(g.audio, audio)
            g.masks.copy_(perturbations.block_masks)
            if g.graph is None and not self._capture(g):
                return self.loop(video, audio, perturbations)
            g.graph.replay()
        self.replays += 1
        return g.out

    def release(self) -> None:
        """Free the graphs, their static buffers and their pool (the prepare graphs' too); a later call
        captures again."""
        self.graphs.clear()
        self.pool = None
        for prepare in self.prepares:
            prepare.release()

    @staticmethod
    def _buffers(video: Any, audio: Any, perturbations: Any) -> _Graph:
        masks = perturbations.block_masks.clone()
        host = perturbations.block_masks_cpu.clone()  # read again at the capture, a call later
        return _Graph(static_args(video), static_args(audio), type(perturbations).from_masks(masks, host), masks)

    def _capture(self, g: _Graph) -> bool:
        """Capture `g`'s graph on its buffers (on the current device, the call's). False when the loop
        cannot be captured: then it runs eagerly from now on, and `reason` says why."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph, out, failure = capture(lambda: self.loop(g.video, g.audio, g.perturbations), self.pool)
        if failure is not None:
            self.reason = f"capture failed: {failure}"
            self.graphs.clear()
            self.pool = None
            warnings.warn(f"compile.capture: the transformer block loop runs without a CUDA graph: {self.reason}",
                          stacklevel=3)
            return False
        g.graph, g.out = graph, out
        return True


def capture(run: Callable[[], Any], pool) -> tuple[torch.cuda.CUDAGraph | None, Any, str | None]:
    """`run()` captured into a new graph on `pool`, on the current device: (graph, its output, None),
    or (None, None, why) when a graph cannot hold it (a host sync inside)."""
    caller = torch.cuda.current_stream()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = run()
    except RuntimeError as e:
        cause = e.__context__ or e
        where = traceback.extract_tb(cause.__traceback__)[-1:] if cause.__traceback__ else []
        at = "".join(f" (at {Path(f.filename).name}:{f.lineno}, {f.line})" for f in where)
        return None, None, " ".join(f"{type(cause).__name__}: {str(cause)[:200]}{at}".split())[:400]
    finally:  # a capture that failed ends without giving the caller's stream back
        torch.cuda.set_stream(caller)
    return graph, out, None


def capture_loop(model: torch.nn.Module) -> LoopGraphs | None:
    """Install `LoopGraphs` on the block loop of `model`'s LTXModel, and `prepare_graph.PrepareGraphs`
    on its two `prepare` calls before the loop (held in `prepares`, released with the loop's graphs);
    None when it has no loop."""
    from backends.runtime.prepare_graph import capture_prepare

    owner = loop_owner(model)
    if owner is None:
        return None
    graphs = LoopGraphs(owner, getattr(owner, LOOP))
    setattr(owner, LOOP, graphs)
    graphs.prepares = capture_prepare(owner)
    return graphs


def release_loop_graphs(model: torch.nn.Module) -> bool:
    """Release the `LoopGraphs` on `model`'s LTXModel, if any (True: there were)."""
    owner = loop_owner(model)
    graphs = getattr(owner, LOOP, None) if owner is not None else None
    if not isinstance(graphs, LoopGraphs):
        return False
    graphs.release()
    return True
