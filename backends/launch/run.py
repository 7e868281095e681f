"""`ltx-tui run`: one of LTX-2 v1.2.0's own pipeline modules, unmodified, with a profile applied.

`prepare()` does everything that needs no weights: reads the profile, judges the module's LTX-2
flags against it (`flags.policy`), checks LTX-2's version and the functions it wraps
(`gate.require`), sets the allocator environment before CUDA starts, probes this machine and
resolves the plan (with this machine's tune cache, as `--check` does). `launch()` then runs the
module in this process (`runpy`, as `python -m` would) with the builders and blocks wrapped
(`hooks`), and returns a `RunRecord` for the ledger: per stage seconds and peak GPU memory beside
the memory plan's prediction, per model load and apply seconds.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import runpy
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from backends.config.options import Profile, toml_value
from backends.config.plan import Plan
from backends.config.profile import MAX_BYTES, ProfileError, dumps, read
from backends.launch import flags as flagmod
from backends.launch import gate
from backends.machine.textfile import FileProblem, read_bounded
from backends.machine.runs import ModelRecord, RunRecord, StageRecord, new_id
from backends.version import TOOL_VERSION

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MGPU_SUFFIX = "_mgpu"
# stage kind -> (the memory plan's stage, the model it sizes)
PREDICTED = {"text_encoder": ("text encoder", "LTXGemmaTextEncoder"), "denoise": ("DiT denoising", "LTXModel"),
             "upsample": ("latent upsampler", "LatentUpsampler"), "video_decode": ("DiffVAE decode", "DiffusionVideoDecoder")}
SIZE_TOLERANCE = 0.05  # a model this far from the full size the memory plan counts gets no prediction
# Modules whose stages build the same DiT again (distilled: one DiffusionStage run twice, no stage-2
# LoRA): the launcher keeps it on the device between them. The other two-stage modules add the
# distilled LoRA to stage 2, so keeping stage 1's DiT would only hold its memory.
KEEP_DIT_MODULES = ("ltx_pipelines.distilled",)


class LaunchError(Exception):
    """The run cannot start; `code` is the exit code (2: usage, profile, flags, LTX-2 version)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Prepared:
    """What a run will do, decided before any weights load."""

    module: str
    module_args: tuple[str, ...]
    profile_path: str
    profile: Profile
    profile_sha256: str
    policy: flagmod.FlagPolicy
    plan: Plan
    versions: dict[str, str | None]
    shape: dict[str, int]
    env_warnings: tuple[str, ...] = ()
    as_built: bool = False  # LTX-2 as its own flags build it: measured, nothing applied

    def command(self) -> str:
        import shlex

        env = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True " \
            if self.plan["memory.expandable_segments"].effective else ""
        return env + shlex.join(["python", "-m", self.module, *self.policy.ltx_argv])


def _shape(args: tuple[str, ...]) -> dict[str, int]:
    """The run's width, height and frames as the module's arguments give them (what is absent is left out)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("--width", "--height", "--num-frames"):
        p.add_argument(name, type=str)
    ns, _ = p.parse_known_args(list(args))
    out = {}
    for key, value in (("width", ns.width), ("height", ns.height), ("frames", ns.num_frames)):
        if value is not None and value.isdigit():
            out[key] = int(value)
    return out


def _read_profile(path: str | None) -> tuple[Profile, str, str]:
    """(profile, label, sha256 of its file; of its TOML for the default profile)."""
    if path is None:
        return Profile(), "(default profile)", hashlib.sha256(dumps(Profile()).encode()).hexdigest()
    try:
        profile, _warnings = read(path)
        data = read_bounded(Path(path), MAX_BYTES)
    except ProfileError as e:
        raise LaunchError(str(e)) from None
    except FileProblem as e:
        raise LaunchError(f"{path}: {e}") from None
    return profile, str(path), hashlib.sha256(data).hexdigest()


def conflict_message(policy: flagmod.FlagPolicy, label: str) -> str:
    return "the profile is authoritative; these LTX-2 flags disagree with it:\n" + "\n".join(
        f"  {v.flag}: {v.detail} ({label}); drop the flag or change {v.option} in the profile"
        for v in policy.conflicts)


def prepare(profile_path: str | None, module: str, module_args: list[str] | tuple[str, ...], *,
            capability=None, as_built: bool = False, dry_run: bool = False) -> Prepared:
    """Everything before the weights; LaunchError (exit 2, or 1 for a plan that cannot run here).
    `as_built`: no profile; LTX-2 runs as its own flags say and is only measured (a baseline).
    `dry_run`: flags that disagree with the profile are left in the result (the dry run shows
    them) instead of raising, and the allocator environment is left as it is."""
    if as_built:
        return _prepare_as_built(profile_path, module, module_args, capability)
    _check_module(module)
    profile, label, digest = _read_profile(profile_path)
    if profile.parallel.gpus > 1:
        raise LaunchError(f"{label}: parallel.gpus = {profile.parallel.gpus}: `ltx-tui run` runs single-GPU "
                          "pipeline modules only for now; for LTX-2's multi-GPU modules use "
                          "`ltx-tui --check --ltx-args` and run them yourself")
    try:
        policy = flagmod.policy(module_args, profile)
    except flagmod.FlagConflict as e:
        raise LaunchError(f"{module}'s arguments: {e}") from None
    if policy.conflicts and not dry_run:
        raise LaunchError(conflict_message(policy, label))
    from backends.runtime.apply import apply_env

    env_warnings = () if dry_run else tuple(apply_env(profile))  # before anything starts CUDA (importing LTX-2 may)
    versions = _gate(module)
    plan = _plan(profile, capability)
    if plan.blocking:
        raise LaunchError(plan.refusal(), code=EXIT_FAILED)
    return Prepared(module, tuple(module_args), label, profile, digest, policy, plan, versions,
                    _shape(tuple(module_args)), env_warnings)


def _prepare_as_built(profile_path, module, module_args, capability) -> Prepared:
    import os

    if profile_path is not None:
        raise LaunchError("--as-built runs LTX-2 as its own flags say: it takes no --profile")
    _check_module(module)
    try:
        profile = flagmod.equivalent_profile(module_args, "expandable_segments:True" in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", ""))
    except flagmod.FlagConflict as e:
        raise LaunchError(str(e)) from None
    versions = _gate(module)
    policy = flagmod.FlagPolicy(tuple(module_args), dit_steps=(), decoder_steps=(),
                                notes=("as built: LTX-2's own flags act; ltx-tui only measures",))
    return Prepared(module, tuple(module_args), "(none: LTX-2 as built, its own flags)",
                    profile, hashlib.sha256(dumps(profile).encode()).hexdigest(), policy, _plan(profile, capability),
                    versions, _shape(tuple(module_args)), as_built=True)


def _check_module(module: str) -> None:
    if not module.startswith("ltx_pipelines.") or not all(p.isidentifier() for p in module.split(".")):
        raise LaunchError(f"{module!r}: not an LTX-2 pipeline module; expected ltx_pipelines.<module>, e.g. "
                          "ltx_pipelines.distilled (usage: ltx-tui run --profile P.toml -- ltx_pipelines.distilled ARGS)")
    if module.endswith(MGPU_SUFFIX):
        raise LaunchError(f"{module}: `ltx-tui run` runs single-GPU pipeline modules only for now; for LTX-2's "
                          "multi-GPU modules use `ltx-tui --check --ltx-args` and run them yourself")


def _gate(module: str) -> dict[str, str | None]:
    try:
        versions = gate.require()
    except gate.GateError as e:
        raise LaunchError(str(e)) from None
    if importlib.util.find_spec(module) is None:
        raise LaunchError(f"{module}: no such module in ltx-pipelines {versions.get('ltx-pipelines')}")
    return versions


def _plan(profile: Profile, capability) -> Plan:
    """The plan for the device LTX-2 will run on, `auto` following this machine's tune cache."""
    import torch

    from backends.config.plan import plan_here
    from backends.machine.capability import probe

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return plan_here(profile, capability or probe(), device)


def describe(prep: Prepared) -> str:
    """The dry run: the plan, the flags' verdicts, who does what, and the LTX-2 command."""
    lines = [f"ltx-tui run: {prep.module} with {prep.profile_path} (sha256 {prep.profile_sha256[:12]})",
             f"LTX-2: ltx-core {prep.versions.get('ltx-core')}, ltx-pipelines {prep.versions.get('ltx-pipelines')}",
             "", "plan (option = effective value, status):"]
    width = max(len(d.option) for d in prep.plan)
    lines += [f"  {d.option:<{width}} = {toml_value(d.effective) if d.effective is not None else '-':<20} {d.status}"
              for d in prep.plan]
    lines += ["", "LTX-2 flags on the command line:"]
    lines += [f"  {v.flag}: {v.verdict} ({v.detail})" + (": taken over" if v.verdict == "agrees" else
                                                           f": exit 2 (drop the flag or change {v.option})")
              for v in prep.policy.verdicts] or ["  none of --quantization, --compile, --offload, "
                                                  "--diffvae-optimization, --max-batch-size"]
    steps = {s.kind: s for s in prep.plan.steps}
    if prep.as_built:
        lines += ["", "ltx-tui applies nothing: LTX-2 builds every model as its own flags say (measured only)"]
    else:
        lines += ["", "ltx-tui applies to each LTXModel LTX-2 builds:"]
        lines += [f"  {steps[k].text}" for k in prep.policy.dit_steps if k in steps] or ["  nothing"]
        lines += ["ltx-tui applies to each DiffusionVideoDecoder LTX-2 builds (LTX-2's own layout op removed):"]
        lines += [f"  {steps[k].text}" for k in prep.policy.decoder_steps if k in steps] or ["  nothing"]
    if prep.policy.ltx2_does:
        lines += ["LTX-2 does, from the flags ltx-tui passes:"] + [f"  {t}" for t in prep.policy.ltx2_does]
    lines += [f"note: {n}" for n in prep.policy.notes] + [f"warning: {w}" for w in prep.env_warnings]
    lines += ["", "LTX-2 command (what runs, in this process):", f"  {prep.command()}"]
    return "\n".join(lines) + "\n"


def full_size_params() -> dict[str, int]:
    """Parameters of each model as the memory plan counts it (LTX-2 v1.2.0's full-size configs)."""
    from backends.config import ltx2_shapes as S
    from backends.config.memory import DIT_OUTSIDE_BLOCKS, VAE_PARAMS, block_params, gemma_params, upsampler_params

    return {"LTXModel": S.DIT_LAYERS * block_params()[0] + DIT_OUTSIDE_BLOCKS, "DiffusionVideoDecoder": VAE_PARAMS,
            "LatentUpsampler": upsampler_params(), "LTXGemmaTextEncoder": gemma_params()}


def _predictions(prep: Prepared, built: list) -> Callable[..., tuple[float | None, str | None]]:
    """The memory plan's peak for a stage, when the models the run built are the sizes it counts
    (plus the DiT's weights while the launcher keeps it on the device for a later stage)."""
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, Effective, dit_weight_bytes, plan_memory

    full = full_size_params()

    def predict(kind: str, stage_shape: dict[str, int], with_kept_dit: bool = False) -> tuple[float | None, str | None]:
        if kind not in PREDICTED:
            return None, None
        name, model = PREDICTED[kind]
        sizes = [b.params for b in built if b.model == model and b.params]
        off = [n for n in sizes if abs(n - full[model]) > SIZE_TOLERANCE * full[model]]
        if off:
            return None, (f"no prediction: {model} has {off[0]:,} parameters, the memory plan counts LTX-2's "
                          f"full size ({full[model]:,})")
        shape = dict(prep.shape, **stage_shape)
        if not {"width", "height", "frames"} <= shape.keys():
            return None, "no prediction: the run's width, height or frames are not on the command line"
        try:
            shapes = RunShapes(shape["width"], shape["height"], shape["frames"])
        except ValueError as e:
            return None, f"no prediction: {e}"
        stage = next(s for s in plan_memory(prep.plan, shapes, None).stages if s.stage == name)
        if with_kept_dit:
            return round((stage.peak_bytes + dit_weight_bytes(Effective.of(prep.plan))) / GIB, 3), f"{name} + the kept DiT's weights"
        return round(stage.peak_bytes / GIB, 3), name
    return predict


def _model_record(built) -> ModelRecord:
    return ModelRecord(built.model, built.stage, round(built.load_s, 4), round(built.apply_s, 4), built.applied,
                       built.changes, built.warnings, built.params, built.kept, built.compile)


def _stage_records(meter, predict) -> tuple[StageRecord, ...]:
    from backends.launch.meter import GIB

    out = []
    for s in meter.stages:
        predicted, against = predict(s.kind, s.shape, s.with_kept_dit)
        out.append(StageRecord(
            s.name, s.kind, round(s.seconds, 4), s.calls,
            None if s.peak_allocated is None else round(s.peak_allocated / GIB, 3),
            None if s.peak_reserved is None else round(s.peak_reserved / GIB, 3),
            tuple(s.step_seconds()), s.forwards, s.tokens, predicted, against, dict(s.shape), round(s.load_s, 4),
            round(s.apply_s, 4)))
    return tuple(out)


def _device_info(device) -> dict:
    import torch

    if device.type != "cuda":
        return {"type": device.type}
    props = torch.cuda.get_device_properties(device)
    return {"type": "cuda", "name": props.name, "total_gib": round(props.total_memory / 2**30, 2),
            "capability": f"{props.major}.{props.minor}"}


@dataclass
class Outcome:
    code: int
    record: RunRecord
    built: list = field(default_factory=list)
    log: str | None = None

    @property
    def ran(self) -> bool:
        """Whether anything ran (`--help`, or an argument error, builds no model and runs no stage)."""
        return bool(self.built or self.record.stages)


def launch(prep: Prepared, argv: list[str], *, on_built: Callable = lambda built: None,
           log_error: Callable[[], str] | None = None) -> Outcome:
    """Run the module with the plan applied; never raises for the module's own failure."""
    import torch

    from backends.launch.hooks import Hooks
    from backends.launch.meter import Meter

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    meter = Meter(device)
    hooks = Hooks(prep.plan, prep.policy.dit_steps, prep.policy.decoder_steps, meter, on_built,
                  take_over=not prep.as_built, keep_dit=prep.module in KEEP_DIT_MODULES)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    status, code, error, log = "ok", EXIT_OK, None, None
    saved_argv = sys.argv
    sys.argv = [prep.module, *prep.policy.ltx_argv]
    try:
        with hooks.installed():
            runpy.run_module(prep.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:  # the module's own exit (argparse errors exit 2)
        c = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if c != 0:
            status, code, error = "failed", c, f"{prep.module} exited with {e.code}"
    except KeyboardInterrupt:
        status, code, error = "interrupted", 130, "interrupted"
    except Exception as e:
        status, code, error = "failed", EXIT_FAILED, f"{type(e).__name__}: {e}"
        log = log_error() if log_error is not None else traceback.format_exc()
    finally:
        sys.argv = saved_argv
        for s in list(meter.active):
            meter.pause(s)
    dits = [b for b in hooks.built if b.model == "LTXModel"]
    if status == "ok" and not prep.as_built and (hooks.built or meter.stages) and not any(b.applied for b in dits):
        status, code = "not applied", EXIT_FAILED
        error = ("profile not applied: no LTXModel was built through LTX-2's builders"
                 if not dits else "profile not applied to any LTXModel")
    record = RunRecord(
        id=new_id(started), started=started.isoformat(timespec="seconds"), module=prep.module, status=status,
        exit=code, wall_s=round(time.perf_counter() - t0, 3), argv=tuple(argv), ltx_argv=prep.policy.ltx_argv,
        error=error, versions=dict(prep.versions, **{"ltx-tui": TOOL_VERSION, "torch": torch.__version__}),
        device=_device_info(device), shape=prep.shape,
        profile={"path": prep.profile_path, "sha256": prep.profile_sha256,
                 "values": {d.option: toml_value(d.requested) for d in prep.plan}},
        plan={"as_built": prep.as_built, "effective": {d.option: (toml_value(d.effective) if d.effective is not None else None) for d in prep.plan},
              "steps": [s.text for s in prep.plan.steps], "ltx2_does": list(prep.policy.ltx2_does)},
        models=tuple(_model_record(b) for b in hooks.built),
        stages=_stage_records(meter, _predictions(prep, hooks.built)))
    return Outcome(code, record, hooks.built, log)
