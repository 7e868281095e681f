"""What `ltx-tui run` needs of LTX-2 before it wraps anything: the right version and structure.

The launcher wraps functions of ltx-core and ltx-pipelines v1.2.0 (`WRAPPED`); another version, or
one of those functions with another signature, would make a wrapper call LTX-2 wrongly or miss a
model. `check()` imports both packages and returns the problems, each saying what differs; the
launcher then exits 2 before any weights load (`ltx-tui --check --ltx-args` still works: it only
writes LTX-2's own flags).

ltx-core and ltx-pipelines are found installed, else under `$LTX2_CORE_SRC` and
`$LTX2_PIPELINES_SRC` (the `src/` folders of v1.2.0 checkouts; PyPI does not ship 1.2.0).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import tomllib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from backends.runtime.ltx2 import ENV as CORE_ENV, import_from_src, import_ltx_core

SUPPORTED = "1.2.0"
PIPELINES_ENV = "LTX2_PIPELINES_SRC"
DISTS = {"ltx_core": "ltx-core", "ltx_pipelines": "ltx-pipelines"}

# (module, qualified name, parameter names) of every LTX-2 function the launcher wraps or calls.
WRAPPED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ltx_core.loader.single_gpu_model_builder", "SingleGPUModelBuilder.build", ("self", "device", "dtype", "kwargs")),
    ("ltx_core.loader.single_gpu_model_builder", "SingleGPUModelBuilder.with_registry", ("self", "registry")),
    ("ltx_core.loader.single_gpu_model_builder", "SingleGPUModelBuilder.with_module_ops", ("self", "module_ops")),
    ("ltx_core.block_streaming.builder", "StreamingModelBuilder.build",
     ("self", "device", "dtype", "cpu_slots_count", "gpu_slots_count", "_kwargs")),
    ("ltx_core.model.transformer.model", "LTXModel.forward", ("self", "video", "audio", "perturbations")),
    ("ltx_core.model.transformer.model", "X0Model.dispose", ("self",)),
    ("ltx_pipelines.utils.blocks", "PromptEncoder.__call__",
     ("self", "prompts", "enhance_first_prompt", "enhance_prompt_image", "enhance_prompt_seed", "enhance_static_cache")),
    ("ltx_pipelines.utils.blocks", "DiffusionStage.__call__",
     ("self", "denoiser", "sigmas", "noiser", "width", "height", "frames", "fps", "video", "audio", "stepper", "loop",
      "max_batch_size")),
    ("ltx_pipelines.utils.blocks", "ImageConditioner.__call__", ("self", "fn")),
    ("ltx_pipelines.utils.blocks", "VideoUpsampler.__call__", ("self", "latent")),
    ("ltx_pipelines.utils.blocks", "VideoDecoder.__call__", ("self", "latent", "tiling_config", "generator", "dtype")),
    ("ltx_pipelines.utils.blocks", "AudioDecoder.__call__", ("self", "latent")),
)

# What the multi-GPU launch (`backends.launch.mgpu`) wraps, subclasses or relies on, checked for the
# `*_mgpu` modules on top of `WRAPPED`: the controller whose runner class it replaces; the shipper
# and worker entry that carry that class to each rank by value and instantiate it there before
# NCCL starts; the runner classes it subclasses; the sequence-parallel builder whose builds it
# wraps (the all2all barrier timeout) and LTX-2's all2all attention wrappers (`original_attention`:
# where the plan's dense attention goes). `NAME.fset` is a property's setter.
MGPU_WRAPPED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ltx_pipelines.multigpu.controller", "MGPUController.__init__", ("self", "runner_cls", "num_gpus", "devices", "logs_specs")),
    ("ltx_pipelines.multigpu.fleet", "_RunnerShipper.__init__", ("self", "runner_cls")),
    ("ltx_pipelines.multigpu.fleet", "_worker_entrypoint", ("runner_cls", "setup_kwargs", "init_timeout", "channels", "device_ids")),
    ("ltx_pipelines.multigpu.runner", "MGPURunner.setup", ("self", "args", "kwargs")),
    ("ltx_pipelines.multigpu.runner", "MGPURunner.__call__", ("self", "args", "kwargs")),
    ("ltx_pipelines.distilled_mgpu", "DistilledRunner.setup",
     ("self", "model_paths", "prompt_enhancer_gemma_root", "spatial_upsampler_path", "vae_queue", "compilation_config",
      "sp_max_tokens", "quantization", "diffvae_optimization")),
    ("ltx_pipelines.distilled_mgpu", "DistilledRunner.__call__",
     ("self", "output_path", "prompt", "seed", "height", "width", "frame_rate", "num_frames", "images", "enhance_prompt",
      "enhance_static_cache", "hdr", "generated_keyframes")),
    ("ltx_pipelines.ti2vid_two_stages_mgpu", "TI2VidTwoStagesRunner.setup",
     ("self", "model_paths", "prompt_enhancer_gemma_root", "spatial_upsampler_path", "vae_queue", "distilled_lora_path",
      "compilation_config", "sp_max_tokens", "quantization", "diffvae_optimization")),
    ("ltx_pipelines.ti2vid_two_stages_mgpu", "TI2VidTwoStagesRunner.__call__",
     ("self", "output_path", "prompt", "negative_prompt", "seed", "height", "width", "frame_rate", "num_inference_steps",
      "video_guider_params", "audio_guider_params", "num_frames", "images", "enhance_prompt", "enhance_static_cache",
      "hdr", "generated_keyframes")),
    ("ltx_pipelines.ti2vid_two_stages_hq_mgpu", "TI2VidTwoStagesHQRunner.setup",
     ("self", "model_paths", "prompt_enhancer_gemma_root", "spatial_upsampler_path", "vae_queue", "distilled_lora_path",
      "distilled_lora_strength_stage_1", "distilled_lora_strength_stage_2", "compilation_config", "sp_max_tokens",
      "diffvae_optimization")),
    ("ltx_pipelines.ti2vid_two_stages_hq_mgpu", "TI2VidTwoStagesHQRunner.__call__",
     ("self", "output_path", "prompt", "negative_prompt", "seed", "height", "width", "frame_rate", "num_inference_steps",
      "video_guider_params", "audio_guider_params", "num_frames", "images", "enhance_prompt", "enhance_static_cache",
      "hdr", "generated_keyframes")),
    ("ltx_pipelines.multigpu.sp_builder", "SequenceParallelBuilder.build", ("self", "device", "dtype", "kwargs")),
    ("ltx_pipelines.multigpu.sp_builder", "SequenceParallelBuilder.all2all_timeout_seconds.fget", ("self",)),
    ("ltx_pipelines.multigpu.sp_builder", "SequenceParallelBuilder.all2all_timeout_seconds.fset", ("self", "seconds")),
    ("ltx_core.multigpu.transformer.attention", "All2AllAttention.__init__", ("self", "manager", "original_attention")),
    ("ltx_core.multigpu.transformer.attention", "MaskedAll2AllAttention.__init__",
     ("self", "manager", "original_attention")),
    ("ltx_core.multigpu.transformer.attention", "AudioAll2AllAttention.__init__",
     ("self", "manager", "original_attention")),
    ("ltx_core.multigpu.transformer.attention", "MaskedAudioAll2AllAttention.__init__",
     ("self", "manager", "original_attention")),
)


class GateError(Exception):
    """LTX-2 is missing, of another version, or changed where the launcher wraps it."""


@dataclass(frozen=True)
class Found:
    versions: dict[str, str | None]
    problems: tuple[str, ...]
    missing: tuple[str, ...] = ()  # modules LTX-2 imports that this Python does not have (torchaudio, ...)


def import_ltx_pipelines():
    """(ltx_pipelines, None) or (None, why not and how to get it)."""
    core, why = import_ltx_core()
    if core is None:
        return None, why
    return import_from_src("ltx_pipelines", PIPELINES_ENV, f"install ltx-pipelines v{SUPPORTED} or set {PIPELINES_ENV} "
                           f"to the src/ folder of an ltx-pipelines v{SUPPORTED} checkout")


def package_version(module) -> str | None:
    """The installed distribution's version, else the `version` of the pyproject.toml of the
    checkout the package was imported from; None when neither says."""
    dist = DISTS[module.__name__]
    try:
        return version(dist)
    except PackageNotFoundError:
        pass
    for parent in Path(module.__file__).resolve().parents[:3]:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file():
            try:
                project = tomllib.loads(pyproject.read_text()).get("project", {})
            except (OSError, tomllib.TOMLDecodeError):
                return None
            if project.get("name") == dist:
                return str(project.get("version"))
    return None


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _dependency(e: ImportError) -> str | None:
    """The top-level module LTX-2 imported and this Python lacks (not LTX-2's own), else None (a
    package that is there but lacks the submodule asked for is another version, not missing)."""
    name = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
    top = name.split(".")[0] if name else None
    if not top or top in DISTS:
        return None
    try:
        return top if importlib.util.find_spec(top) is None else None
    except (ImportError, ValueError):
        return None


def _signatures(wrapped) -> tuple[list[str], list[str]]:
    """(each wrapped function missing or whose parameters differ from v1.2.0's, the modules LTX-2
    imports that are not installed: its functions behind them are not looked at)."""
    problems, missing = [], []
    for module, qualname, params in wrapped:
        try:
            fn = _resolve(module, qualname)
            got = tuple(inspect.signature(fn).parameters)
        except (ImportError, AttributeError) as e:
            dependency = _dependency(e) if isinstance(e, ImportError) else None
            if dependency is not None:
                missing += [dependency] if dependency not in missing else []
            else:
                problems.append(f"{module}.{qualname} is missing ({type(e).__name__}: {e})")
            continue
        except (TypeError, ValueError) as e:
            problems.append(f"{module}.{qualname} has no readable signature ({e})")
            continue
        if got != params:
            problems.append(f"{module}.{qualname}({', '.join(got)}) differs from v{SUPPORTED}'s ({', '.join(params)})")
    return problems, missing


def signature_problems(wrapped=WRAPPED) -> list[str]:
    """Each wrapped function that is missing or whose parameters differ from v1.2.0's (a module
    LTX-2 imports that is not installed: one line for it)."""
    problems, missing = _signatures(wrapped)
    return [f"{m} is not installed (LTX-2 imports it)" for m in missing] + problems


def check(multi_gpu: bool = False) -> Found:
    """Import LTX-2 and compare it with what the launcher was written for (with `multi_gpu`, also
    what the multi-GPU launch relies on)."""
    pipelines, why = import_ltx_pipelines()
    if pipelines is None:
        return Found({}, (why,))
    import ltx_core

    versions = {DISTS[m.__name__]: package_version(m) for m in (ltx_core, pipelines)}
    problems = [f"{dist} {v or '(version unknown)'} is not v{SUPPORTED}" for dist, v in versions.items() if v != SUPPORTED]
    changed, missing = _signatures(WRAPPED + (MGPU_WRAPPED if multi_gpu else ()))
    return Found(versions, tuple(problems + changed), tuple(missing))


# modules whose pip distribution has the module's name (an import name is not a distribution's in
# general: PIL is Pillow's, cv2 opencv-python's)
PIP_NAMED = ("torchaudio",)


def _install_hint(modules: tuple[str, ...]) -> str:
    known = [m for m in modules if m in PIP_NAMED]
    rest = [m for m in modules if m not in PIP_NAMED]
    try:
        release = version("torch").split("+")[0]
        torch = (f"; torchaudio's build must match torch {release} (`pip install torchaudio=={release}`): where "
                 "none is published for it, install a torch that has one (torchaudio's versions follow torch's)"
                 if "torchaudio" in known else "")
    except PackageNotFoundError:
        torch = ""
    hints = [f"`pip install {' '.join(known)}` in this Python{torch}"] if known else []
    if rest:
        hints.append(f"install the package{'s' if len(rest) > 1 else ''} that provide{'' if len(rest) > 1 else 's'} "
                     f"{', '.join(rest)} in this Python")
    return "; ".join(hints)


def require(multi_gpu: bool = False) -> dict[str, str | None]:
    """The versions of ltx-core and ltx-pipelines; GateError with every problem otherwise (a
    dependency of LTX-2 that is not installed is said as that, not as another version)."""
    found = check(multi_gpu)
    problems = "\n".join(f"  {p}" for p in found.problems)
    if found.missing:
        names = ", ".join(found.missing)
        raise GateError(f"LTX-2's pipelines cannot be loaded here: they import {names}, which this Python does not "
                        f"have: {_install_hint(found.missing)}"
                        + (f"\nLTX-2 also differs from what `ltx-tui run` wraps:\n{problems}" if problems else ""))
    if not found.versions:  # not importable at all (a trial: "LTX-2 is not what ... wraps" read oddly)
        raise GateError(f"LTX-2 cannot be imported here: {found.problems[0]}; `ltx-tui run` needs ltx-core and "
                        f"ltx-pipelines v{SUPPORTED} (installed, or {CORE_ENV} and {PIPELINES_ENV} set to their src/ "
                        "folders)")
    if found.problems:
        raise GateError("LTX-2 is not what `ltx-tui run` wraps:\n" + problems
                        + f"\n`ltx-tui run` supports ltx-core and ltx-pipelines v{SUPPORTED} as released; "
                        "`ltx-tui --check --ltx-args --profile P.toml` still writes LTX-2's own command line for "
                        "the profile")
    return found.versions
