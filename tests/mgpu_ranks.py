"""Spawned 'ranks' for the multi-GPU launch tests (no NCCL, no GPU: this module's functions run in
`multiprocessing` spawn children, as LTX-2's fleet runs its workers; importable there because the
spawned process gets the test process's `sys.path`).

`inspect_shipped`: the child unpickles the runner class LTX-2's `_RunnerShipper` shipped (by value)
and instantiates it, as LTX-2's `_worker_entrypoint` does before NCCL, then reports what is
installed in the child and what is left after the session closes.

`run_rank`: the child runs one job of a runner shipped the same way; `CpuDistilledRunner` is a
stand-in for LTX-2's `DistilledRunner` that runs LTX-2's single-GPU `DistilledPipeline` (what
`DistilledRunner` wraps in sequence parallelism, Accelerate Gemma and the distributed decoder,
none of which can run without NCCL and CUDA).
"""

from __future__ import annotations

import os
import pickle
from typing import Any


def _wrapped(owner, name: str) -> bool:
    return hasattr(vars(owner).get(name), "__wrapped__")


def _state() -> dict[str, Any]:
    import importlib

    single = importlib.import_module("ltx_core.loader.single_gpu_model_builder").SingleGPUModelBuilder
    blocks = importlib.import_module("ltx_pipelines.utils.blocks")
    sp = importlib.import_module("ltx_pipelines.multigpu.sp_builder").SequenceParallelBuilder
    return {"single_build": _wrapped(single, "build"), "stage_call": _wrapped(blocks.DiffusionStage, "__call__"),
            "decoder_call": _wrapped(blocks.VideoDecoder, "__call__"), "sp_build": _wrapped(sp, "build")}


def inspect_shipped(payload: bytes, rank: int, out) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="1")
    try:
        import sys

        runner_cls = pickle.loads(payload)  # LTX-2's _RunnerShipper reduces to cloudpickle.loads
        before = _state()
        runner = runner_cls()  # what _worker_entrypoint does before init_process_group
        session = runner._ltx_tui_session
        installed = _state()
        report = {"name": runner_cls.__name__, "module": runner_cls.__module__,
                  "bases": [c.__name__ for c in runner_cls.__mro__[1:3]],
                  "base_module": runner_cls.__mro__[1].__module__,
                  "method_modules": [getattr(runner_cls, m).__module__ for m in ("__init__", "setup", "__call__")],
                  "spec_run": session.spec.run_id, "rank": session.rank,
                  "dit_steps": list(session.spec.prep.policy.dit_steps),
                  "before": before, "installed": installed, "main": getattr(sys.modules["__main__"], "__name__", None)}
        session.close()
        report["after"] = _state()
        out.put(report)
    except BaseException as e:  # the parent asserts on the report
        import traceback

        out.put({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def run_rank(payload: bytes, rank: int, world: int, setup: dict, job: dict, out) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    try:
        runner = pickle.loads(payload)()
        runner.setup(**setup)
        results = list(runner(**job))
        out.put({"rank": rank, "results": results})
    except BaseException as e:
        import traceback

        out.put({"rank": rank, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def _runner_base():
    from ltx_pipelines.multigpu.runner import MGPURunner

    return MGPURunner


def _inference(fn):
    import torch

    return torch.inference_mode()(fn)


class CpuDistilledRunner(_runner_base()):
    """LTX-2's `DistilledPipeline` as a runner (setup once, one job per call), on the CPU, under
    inference mode as LTX-2's runners are."""

    @_inference
    def setup(self, *, checkpoint: str, gemma_root: str, spatial_upsampler_path: str, decode_budget: int) -> None:
        import importlib

        from ltx_core.loader.registry import ModelRegistry
        from ltx_pipelines.distilled import DistilledPipeline
        from ltx_pipelines.utils.model_paths import ModelPaths

        helpers = importlib.import_module("ltx_pipelines.utils.helpers")
        original = helpers.tiling_config_for_vae

        def with_budget(*args, device=None, free_bytes=None, **kwargs):  # off CUDA LTX-2 budgets 0 bytes
            return original(*args, device=device, free_bytes=decode_budget if free_bytes is None else free_bytes,
                            **kwargs)
        helpers.tiling_config_for_vae = with_budget
        paths = ModelPaths.from_monolith(checkpoint, gemma_root=gemma_root)
        self._pipeline = DistilledPipeline(model_paths=paths, spatial_upsampler_path=spatial_upsampler_path, loras=[],
                                           registry=ModelRegistry())

    @_inference
    def __call__(self, *, output_path: str, prompt: str, height: int, width: int, num_frames: int):
        from ltx_core.model.video_vae import get_video_chunks_number
        from ltx_pipelines.utils.media_io import encode_video

        video, audio, frames, tiling = self._pipeline(prompt=prompt, seed=0, height=height, width=width,
                                                      num_frames=num_frames, frame_rate=24.0, images=[])
        encode_video(video=video, fps=24.0, audio=audio, output_path=output_path,
                     video_chunks_number=get_video_chunks_number(frames, tiling))
        yield output_path
