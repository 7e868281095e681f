"""`ltx-tui run`: one of LTX-2 v1.2.0's own pipeline modules, unmodified, with a profile applied.

`prepare()` does everything that needs no weights: reads the profile, judges the module's LTX-2
flags against it (`flags.policy`), checks LTX-2's version and the functions it wraps
(`gate.require`), sets the allocator environment before CUDA starts, probes this machine and
resolves the plan (with this machine's tune cache, as `--check` does, and `auto` of the options
whose first call compiles decided for one generation of the module's DiT forwards: `run_length`),
then judges the flags against what `auto` decided. `launch()` then runs the
module in this process (`runpy`, as `python -m` would) with the builders and blocks wrapped
(`hooks`), and returns a `RunRecord` for the ledger: per stage seconds and peak GPU memory beside
the memory plan's prediction, per model load and apply seconds.

LTX-2's multi-GPU modules (`flags.MGPU_MODULES`) run the same way in this process, which only
starts LTX-2's ranks: the plan goes to every rank LTX-2 spawns, and each rank appends its own
record (`backends.launch.mgpu`); `launch()` reads them back.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.util
import pkgutil
import runpy
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from backends.config.options import Profile, show_value, toml_value
from backends.config.rules import ALL2ALL_BARRIER_SECONDS, Status
from backends.config.plan import PIPELINE, Plan
from backends.config.run_length import DISTILLED_FORWARDS, PRIOR, UNIT, RunLength
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
    """The run cannot start; `code` is the exit code (2: usage, profile, flags, LTX-2 version; 1: the
    plan cannot run here); `profile_error` the ProfileError of a profile that cannot be read."""

    def __init__(self, message: str, code: int = EXIT_USAGE, profile_error: ProfileError | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.profile_error = profile_error


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
    world_size: int | None = None  # multi-GPU modules: the ranks LTX-2 will spawn (visible GPUs)
    notes: tuple[str, ...] = ()  # what the launcher set up for the run (printed before it starts)

    @property
    def multi_gpu(self) -> bool:
        return self.module in flagmod.MGPU_MODULES

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


# LTX-2's --num-inference-steps defaults (ltx_pipelines/utils/constants.py): 40 (LTX-2.0), 30 (LTX-2.3
# checkpoints); the HQ two-stage modules' LTX_2_3_HQ_PARAMS: 15. The fewer of a module's.
DEFAULT_STEPS, HQ_STEPS = 30, 15


def run_length(module: str, args: tuple[str, ...]) -> RunLength:
    """One generation (a process of `ltx-tui run` runs one) of `module`'s DiT forwards: the distilled
    schedule for the distilled modules; else its --num-inference-steps (LTX-2's default when not
    given), plus the 3 distilled stage-2 steps of the two-stage modules. A forward a step:
    guidance adds forwards, so the run makes at least this many."""
    name = module.rsplit(".", 1)[-1]
    if "distilled" in name:
        return RunLength(1, DISTILLED_FORWARDS, f"{name}: LTX-2's distilled schedule, 8 + 3 steps")
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--num-inference-steps", type=str)
    given = p.parse_known_args(list(args))[0].num_inference_steps
    steps = int(given) if given is not None and given.isdigit() else HQ_STEPS if "_hq" in name else DEFAULT_STEPS
    two = 3 if "two_stage" in name else 0
    said = f"--num-inference-steps {steps}" if given is not None and given.isdigit() else \
        f"{steps} steps, the fewer of LTX-2's defaults"
    return RunLength(1, steps + two, f"{name}: {said}" + (" + 3 stage-2 steps" if two else "")
                     + ", a forward each at least")


def _whole(label: str) -> str:
    """A profile file's absolute path (the ledger is read from anywhere); other labels as they are."""
    return str(Path(label).resolve()) if Path(label).is_file() else label


def _read_profile(path: str | None) -> tuple[Profile, str, str]:
    """(profile, label, sha256 of its file; of its TOML for the default profile)."""
    if path is None:
        return Profile(), "(default profile)", hashlib.sha256(dumps(Profile()).encode()).hexdigest()
    try:
        profile, _warnings = read(path)
        data = read_bounded(Path(path), MAX_BYTES)
    except ProfileError as e:
        raise LaunchError(str(e), profile_error=e) from None
    except FileProblem as e:
        raise LaunchError(f"{path}: {e}") from None
    return profile, str(path), hashlib.sha256(data).hexdigest()


def _left_to_auto(profile: Profile, option: str) -> bool:
    """Whether the flags judge `option` against what the plan decided: the profile left it to `auto`."""
    return option in UNIT and str(profile.get(option)) == "auto"


def conflict_message(policy: flagmod.FlagPolicy, label: str, profile: Profile | None = None, plan=None) -> str:
    """Each flag that disagrees with the profile `label` names, with the fix. Given the profile and its
    plan, a flag whose option the profile left to `auto` also says what the plan decided for it."""
    def where(option: str) -> str:
        if plan is None or profile is None or not _left_to_auto(profile, option):
            return label.strip("()")
        return f"{label.strip('()')}; auto decided by the plan: {option} = {show_value(plan[option].effective)}"
    return "the profile is authoritative; these LTX-2 flags disagree with it:\n" + "\n".join(
        f"  {v.flag}: {v.detail} ({where(v.option)}); drop the flag or change {v.option} in the profile"
        for v in policy.conflicts)


def _policy(module: str, module_args, profile, label: str, multi_gpu: bool):
    """LTX-2's flags judged against `profile`; a conflict becomes a LaunchError that says which."""
    try:
        return flagmod.policy(module_args, profile, multi_gpu=multi_gpu)
    except flagmod.ProfileConflict as e:
        raise LaunchError(f"{label}: what {module} would silently not do:\n{e}") from None
    except flagmod.FlagConflict as e:
        raise LaunchError(f"{module}'s arguments: {e}") from None


def prepare(profile_path: str | None, module: str, module_args: list[str] | tuple[str, ...], *,
            capability=None, as_built: bool = False, dry_run: bool = False) -> Prepared:
    """Everything before the weights; LaunchError (exit 2, or 1 for a plan that cannot run here).
    `as_built`: no profile; LTX-2 runs as its own flags say and is only measured (a baseline).
    `dry_run`: flags that disagree with the profile are left in the result (the dry run shows
    them) instead of raising, and the allocator environment is left as it is."""
    if as_built:
        return _prepare_as_built(profile_path, module, module_args, capability, dry_run)
    _check_module(module)
    multi_gpu = module in flagmod.MGPU_MODULES
    profile, label, digest = _read_profile(profile_path)
    n = profile.parallel.gpus
    if n > 1 and not multi_gpu:
        mgpu = f"{module}_mgpu" if f"{module}_mgpu" in flagmod.MGPU_MODULES else None
        raise LaunchError(f"{label}: parallel.gpus = {n} is sequence parallelism over {n} GPUs, which only LTX-2's "
                          f"multi-GPU modules run; {module} runs on one GPU: use "
                          + (mgpu or " or ".join(flagmod.MGPU_MODULES)) + ", or set parallel.gpus = 1")
    undecided = {k for k in UNIT if _left_to_auto(profile, k)}  # the plan decides them (below)
    policy = _policy(module, module_args, profile.replace(**{k: PRIOR[k] for k in undecided}), label, multi_gpu)
    known = dataclasses.replace(policy, verdicts=tuple(v for v in policy.verdicts if v.option not in undecided))
    if known.conflicts and not dry_run:
        raise LaunchError(conflict_message(known, label))
    from backends.runtime.apply import apply_env

    env_warnings = () if dry_run else tuple(apply_env(profile))  # before anything starts CUDA (importing LTX-2 may)
    notes = _select_devices(profile, dry_run) if multi_gpu else ()  # before CUDA too: the ranks inherit it
    versions = _gate(module)
    shape = _shape(tuple(module_args))
    plan = _plan(profile, capability, shape if multi_gpu else None, run_length(module, tuple(module_args)))
    if undecided:  # judged against what auto decided
        policy = _policy(module, module_args, plan.pinned(), label, multi_gpu)
        if policy.conflicts and not dry_run:
            raise LaunchError(conflict_message(policy, label, profile, plan))
    if plan.blocking:
        if dry_run and policy.conflicts:  # the run refuses the flags first (exit 2)
            raise LaunchError(conflict_message(policy, label, profile, plan))
        raise LaunchError(plan.refusal(), code=EXIT_FAILED)
    preflight = [d for d in plan if d.option.startswith("parallel.") and d.status is Status.ERROR]
    if multi_gpu and n > 1 and preflight:  # one rank: _check_world says whether a GPU is there
        raise LaunchError("the multi-GPU preflight refuses this run:\n" + "\n".join(
            f"  {d.option} = {toml_value(d.requested)}: {d.message} (fix: {d.remedy})" for d in preflight),
            code=EXIT_FAILED)
    prep = Prepared(module, tuple(module_args), label, profile, digest, policy, plan, versions,
                    shape, env_warnings, world_size=_visible_gpus() if multi_gpu else None, notes=notes)
    return _with_world(prep, dry_run)


def _visible_gpus() -> int:
    """The CUDA devices this process sees: LTX-2's MGPUController spawns one rank per each."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_world(module: str, label: str, gpus: int, world: int | None) -> None:
    if not world:
        raise LaunchError(f"{module}: no CUDA GPU is visible here; LTX-2's multi-GPU modules spawn one rank per "
                          "visible GPU (run it on the GPU machine)", code=EXIT_FAILED)
    if world != gpus:
        raise LaunchError(f"{label}: parallel.gpus = {gpus} but LTX-2's {module} would spawn {world} ranks (one per "
                          f"visible GPU); set parallel.gpus = {world}, or make {gpus} GPU(s) visible "
                          "(CUDA_VISIBLE_DEVICES, or parallel.devices in the profile)")


def world_refusal(prep: Prepared) -> LaunchError | None:
    """What the run of a prepared multi-GPU module is refused for by its ranks (the GPUs visible against
    `parallel.gpus`; as built, any number but one at least), which a dry run prints and exits with;
    None: nothing (or one GPU's module)."""
    if not prep.multi_gpu:
        return None
    gpus = (prep.world_size or 1) if prep.as_built else prep.profile.parallel.gpus
    try:
        _check_world(prep.module, "--as-built" if prep.as_built else prep.profile_path, gpus, prep.world_size)
    except LaunchError as e:
        return e
    return None


def _with_world(prep: Prepared, dry_run: bool) -> Prepared:
    """`prep`, unless its ranks refuse the run (`world_refusal`: raised, except for a dry run, which says it)."""
    refused = None if dry_run else world_refusal(prep)
    if refused:
        raise refused
    return prep


def _select_devices(profile: Profile, dry_run: bool) -> tuple[str, ...]:
    """`parallel.devices`: CUDA_VISIBLE_DEVICES for the run (ordinals as this process sees them, so
    within an existing CUDA_VISIBLE_DEVICES), set before CUDA starts; LTX-2's ranks inherit it."""
    import os

    devices = profile.parallel.devices
    if not devices:
        return ()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in visible.split(",") if x.strip()] if visible is not None else None
    if ids is not None and max(devices) >= len(ids):
        raise LaunchError(f"parallel.devices = {list(devices)} but CUDA_VISIBLE_DEVICES={visible} makes "
                          f"{len(ids)} visible; name ordinals 0..{len(ids) - 1}, or drop parallel.devices")
    chosen = ",".join(ids[d] if ids is not None else str(d) for d in devices)
    if not dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return (f"parallel.devices = {list(devices)}: CUDA_VISIBLE_DEVICES={chosen} for LTX-2's ranks",)


def _prepare_as_built(profile_path, module, module_args, capability, dry_run: bool = False) -> Prepared:
    import os

    if profile_path is not None:
        raise LaunchError("--as-built runs LTX-2 as its own flags say: it takes no --profile")
    _check_module(module)
    multi_gpu = module in flagmod.MGPU_MODULES
    world = versions = None
    if multi_gpu:
        versions = _gate(module)
        world = _visible_gpus()
    try:
        profile = flagmod.equivalent_profile(module_args, "expandable_segments:True" in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", ""), multi_gpu=multi_gpu, world_size=world or 1)
    except flagmod.FlagConflict as e:
        raise LaunchError(f"{module}'s arguments: {e}" if multi_gpu else str(e)) from None
    versions = versions or _gate(module)
    policy = flagmod.FlagPolicy(tuple(module_args), dit_steps=(), decoder_steps=(),
                                notes=("as built: LTX-2's own flags act; ltx-tui only measures",))
    return _with_world(Prepared(module, tuple(module_args), "(none: LTX-2 as built, its own flags)", profile,
                                hashlib.sha256(dumps(profile).encode()).hexdigest(), policy,
                                _plan(profile, capability), versions, _shape(tuple(module_args)), as_built=True,
                                world_size=world), dry_run)


def _check_module(module: str) -> None:
    if not module.startswith("ltx_pipelines.") or not all(p.isidentifier() for p in module.split(".")):
        raise LaunchError(f"{module!r}: not an LTX-2 pipeline module; expected ltx_pipelines.<module>, e.g. "
                          "ltx_pipelines.distilled (usage: ltx-tui run --profile P.toml -- ltx_pipelines.distilled ARGS)")
    if module.endswith(MGPU_SUFFIX) and module not in flagmod.MGPU_MODULES:
        raise LaunchError(f"{module}: not one of LTX-2 v1.2.0's multi-GPU modules that `ltx-tui run` runs "
                          f"({', '.join(flagmod.MGPU_MODULES)})")


def _runs_as_main(path: Path) -> bool:
    """Whether the module file at `path` does something run as a script (`if __name__ == "__main__":`)."""
    try:
        return b"__main__" in path.read_bytes()
    except OSError:
        return False


def _no_such_module(module: str) -> str | None:
    """Why `module` is not one of the importable ltx_pipelines' pipeline modules (None: it is, or
    ltx_pipelines itself does not import: the gate says why). A helper module (no `__main__` part:
    `iclora_utils`) is none: run, it would import and exit without a generation."""
    pipelines, _ = gate.import_ltx_pipelines()
    if pipelines is None:
        return None
    def listed() -> str:  # read only for a refusal: every run would otherwise read each module's file
        folder = Path(pipelines.__path__[0])
        mains = sorted(m.name for m in pkgutil.iter_modules(pipelines.__path__)
                       if not m.ispkg and not m.name.startswith("_") and _runs_as_main(folder / f"{m.name}.py"))
        return f"ltx-pipelines {gate.package_version(pipelines) or ''} ({folder}); its pipeline modules: {', '.join(mains)}"
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError as e:  # a parent package is missing, or what importing it imports
        if not e.name or not (module == e.name or module.startswith(e.name + ".")):
            return None  # another module (a dependency): the gate says which
        spec = None
    except Exception:  # importing a parent failed otherwise: the import of the module itself says why
        return None
    if spec is None:
        return f"{module}: no such module in {listed()}"
    if spec.origin and spec.origin.endswith(".py") and not _runs_as_main(Path(spec.origin)):
        return f"{module}: a helper module, not a pipeline (run, it has nothing to do) in {listed()}"
    return None


def _gate(module: str) -> dict[str, str | None]:
    why = _no_such_module(module)
    if why is not None:
        raise LaunchError(why)
    try:
        return gate.require(multi_gpu=module in flagmod.MGPU_MODULES)
    except gate.GateError as e:
        raise LaunchError(str(e)) from None


def _plan(profile: Profile, capability, run_shape: dict[str, int] | None = None,
          length: RunLength | None = None) -> Plan:
    """The plan for the device LTX-2 will run on, `auto` following this machine's tune cache; for
    a multi-GPU module (`run_shape` given) the whole machine's, its preflight (world size, all2all,
    peer access, the token cap of the run's shape) decided as `--check` decides it. The GPUs are
    those `parallel.devices` left visible (CUDA_VISIBLE_DEVICES is set by then), numbered from 0."""
    import torch

    from backends.config.ltx2_shapes import RunShapes
    from backends.config.plan import plan_here
    from backends.machine.capability import probe

    cap = capability or probe()
    if run_shape is None:  # no CUDA: the machine's own reason, not a model's placement (none is built yet)
        return plan_here(profile, cap, torch.device("cuda") if torch.cuda.is_available() else None, length)
    visible = profile.replace(**{"parallel.devices": None}) if profile.parallel.devices else profile
    try:
        run = RunShapes(run_shape["width"], run_shape["height"], run_shape["frames"], bounded=False)
    except (KeyError, ValueError):
        run = None  # the token cap is then "not checked" in the plan
    return plan_here(visible, cap, length=length, run=run)


def describe(prep: Prepared) -> str:
    """The dry run: the plan, the flags' verdicts, who does what, and the LTX-2 command."""
    lines = [f"ltx-tui run: {prep.module} with {prep.profile_path} (sha256 {prep.profile_sha256[:12]})",
             f"LTX-2: ltx-core {prep.versions.get('ltx-core')}, ltx-pipelines {prep.versions.get('ltx-pipelines')}",
             "", "plan (option = effective value, status):"]
    width = max(len(d.option) for d in prep.plan)
    for d in prep.plan:
        shown = toml_value(d.effective) if d.effective is not None else d.effective_text
        lines.append(f"  {d.option:<{width}} = {shown:<20} {d.status}")
        if d.status is not Status.OK and d.message:
            lines.append(f"  {'':<{width}}   {d.message}" + (f" (fix: {d.remedy})" if d.remedy else ""))
    for option in prep.plan.not_refused:  # a trial: the plan said "error", the dry run exited 0
        lines.append(f"  not refused: {option} is not ltx-tui's to judge ({PIPELINE[option]}); the run goes on, on the "
                     "device LTX-2 picks (the CPU without CUDA)")
    lines += ["", "LTX-2 flags on the command line:"]
    lines += [f"  {v.flag}: {v.verdict} ({_detail(prep, v)})" + (": taken over" if v.verdict == "agrees" else
                                                           f": exit 2 (drop the flag or change {v.option})")
              for v in prep.policy.verdicts] or (["  neither --compile nor --diffvae-optimization"] if prep.multi_gpu
                                                 else ["  none of --quantization, --compile, --offload, "
                                                       "--diffvae-optimization, --max-batch-size"])
    steps = {s.kind: s for s in prep.plan.steps}
    where = " in every rank" if prep.multi_gpu else ""
    if prep.multi_gpu:
        lines += ["", f"LTX-2's MGPUController spawns one rank per visible GPU ({_world_text(prep)}); each rank "
                  "gets the plan through a subclass of the module's runner class that LTX-2 ships to it, and "
                  "appends its own record to the ledger"]
    if prep.as_built:
        lines += ["", "ltx-tui applies nothing: LTX-2 builds every model as its own flags say (measured only)"]
    else:
        lines += ["", f"ltx-tui applies to each LTXModel LTX-2 builds{where}:"]
        lines += [f"  {steps[k].text}" for k in prep.policy.dit_steps if k in steps] or ["  nothing"]
        if prep.multi_gpu:
            lines += ["  (the attention inside LTX-2's sequence-parallel all2all wrappers, as their "
                      "original_attention; the wrappers stay)"]
            if barrier_timeout(prep) is not None:
                lines += [f"  before the first step: the all2all barrier timeout raised to {barrier_timeout(prep):g} s "
                          f"(LTX-2's is {ALL2ALL_BARRIER_SECONDS:g} s; a rank still compiling reaches the barrier "
                          "late), put back after the run"]
        lines += [f"ltx-tui applies to each DiffusionVideoDecoder LTX-2 builds{where} (LTX-2's own layout op removed):"]
        lines += [f"  {steps[k].text}" for k in prep.policy.decoder_steps if k in steps] or ["  nothing"]
    if prep.policy.ltx2_does:
        lines += ["LTX-2 does itself:" if prep.multi_gpu else "LTX-2 does, from the flags ltx-tui passes:"]
        lines += [f"  {t}" for t in prep.policy.ltx2_does]
    lines += [f"note: {n}" for n in prep.policy.notes + prep.notes] + [f"warning: {w}" for w in prep.env_warnings]
    lines += ["", "LTX-2 command (what runs, in this process):", f"  {prep.command()}"]
    return "\n".join(lines) + "\n"


def _detail(prep: Prepared, verdict) -> str:
    """A flag's verdict detail as the dry run says it: for an option the profile left to `auto`, what
    the plan decided (the policy was judged against it), not "the profile has"."""
    said = f"the profile has {verdict.option} = "
    if not _left_to_auto(prep.profile, verdict.option):
        return verdict.detail
    if verdict.detail.startswith(said):
        return f"the profile has {verdict.option} = \"auto\", which the plan decided: " + verdict.detail[len(said):]
    return f"{verdict.detail}; the profile has {verdict.option} = \"auto\", decided by the plan"


def _world_text(prep: Prepared) -> str:
    if not prep.world_size:
        return "none visible here: the run exits 1"
    if prep.as_built or prep.world_size == prep.profile.parallel.gpus:
        return f"{prep.world_size} here"
    return f"{prep.world_size} here, but the profile has parallel.gpus = {prep.profile.parallel.gpus}: the run exits 2"


def barrier_timeout(prep: Prepared) -> float | None:
    """The all2all barrier timeout each rank sets before its first step (None: left as LTX-2 has it):
    when ltx-tui compiles the DiT of a multi-GPU run."""
    from backends.launch.mgpu import BARRIER_TIMEOUT_S

    compiles = "compile" in prep.policy.dit_steps and any(s.kind == "compile" for s in prep.plan.steps)
    return BARRIER_TIMEOUT_S if prep.multi_gpu and not prep.as_built and compiles else None


def full_size_params() -> dict[str, int]:
    """Parameters of each model as the memory plan counts it (LTX-2 v1.2.0's full-size configs)."""
    from backends.config import ltx2_shapes as S
    from backends.config.memory import DIT_OUTSIDE_BLOCKS, VAE_PARAMS, block_params, gemma_params, upsampler_params

    return {"LTXModel": S.DIT_LAYERS * block_params()[0] + DIT_OUTSIDE_BLOCKS, "DiffusionVideoDecoder": VAE_PARAMS,
            "LatentUpsampler": upsampler_params(), "LTXGemmaTextEncoder": gemma_params()}


def _predictions(prep: Prepared, built: list, rank: int | None = None) -> Callable[..., tuple[float | None, str | None]]:
    """The memory plan's peak for a stage, when the models the run built are the sizes it counts
    (plus the DiT's weights while the launcher keeps it on the device for a later stage); for a
    rank of a multi-GPU run, that rank's plan."""
    from backends.config.ltx2_shapes import RunShapes
    from backends.config.memory import GIB, Effective, dit_weight_bytes, plan_memory

    full = full_size_params()

    def predict(kind: str, stage_shape: dict[str, int], with_kept_dit: bool = False,
                dit_built: bool = False) -> tuple[float | None, str | None]:
        if kind not in PREDICTED:
            return None, None
        name, model = PREDICTED[kind]
        sizes = [b.params for b in built if b.model == model and b.params]
        if not sizes:  # e.g. the multi-GPU modules' Gemma, which LTX-2 loads through Accelerate, not its builders
            return None, f"no prediction: no {model} was built through the LTX-2 builders ltx-tui wraps"
        off = [n for n in sizes if abs(n - full[model]) > SIZE_TOLERANCE * full[model]]
        if off:
            return None, (f"no prediction: {model} has {off[0]:,} parameters, the memory plan counts LTX-2's "
                          f"full size ({full[model]:,})")
        shape = dict(prep.shape, **stage_shape)
        if not {"width", "height", "frames"} <= shape.keys():
            return None, "no prediction: the run's width, height or frames are not on the command line"
        try:
            shapes = RunShapes(shape["width"], shape["height"], shape["frames"], bounded=False)
        except ValueError as e:
            return None, f"no prediction: {e}"
        memory = plan_memory(prep.plan, shapes, None)
        ranked = rank is not None and rank < len(memory.ranks)
        stages = memory.ranks[rank].stages if ranked else memory.stages
        stage = next((s for s in stages if s.stage == name), None)
        if stage is None:
            return None, f"no prediction: the memory plan has no {name} stage" + (f" for rank {rank}" if ranked else "")
        name = f"{name} (rank {rank})" if ranked else name
        if with_kept_dit:
            return round((stage.peak_bytes + dit_weight_bytes(Effective.of(prep.plan))) / GIB, 3), f"{name} + the kept DiT's weights"
        if stage.running_bytes is not None and kind == "denoise":
            if not dit_built:  # the DiT an earlier stage built, kept: no build here
                return round(stage.running_bytes / GIB, 3), f"{name}, once built (the DiT kept from an earlier stage)"
            return round(stage.peak_bytes / GIB, 3), f"{name}, while built in bf16 before ltx-tui quantizes it"
        return round(stage.peak_bytes / GIB, 3), name
    return predict


def _model_record(built) -> ModelRecord:
    return ModelRecord(built.model, built.stage, round(built.load_s, 4), round(built.apply_s, 4), built.applied,
                       built.changes, built.warnings, built.params, built.kept, built.compile)


def _stage_records(meter, predict, built: list) -> tuple[StageRecord, ...]:
    from backends.launch.meter import GIB

    out = []
    for s in meter.stages:
        dit_built = any(b.model == "LTXModel" and b.stage == s.name and not b.kept for b in built)
        predicted, against = predict(s.kind, s.shape, s.with_kept_dit, dit_built)
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
    rank_records: tuple[RunRecord, ...] = ()  # multi-GPU: each rank's record, already in the ledger
    multi_gpu: bool = False
    missing_ranks: tuple[int, ...] = ()  # multi-GPU: ranks that wrote no record

    @property
    def ran(self) -> bool:
        """Whether anything ran (the module's `--help` builds no model, runs no stage and exits 0)."""
        return bool(self.built or self.record.stages or self.rank_records or self.code != EXIT_OK)


def settle(prep: Prepared, built: list, meter, status: str, code: int, error: str | None) -> tuple[str, int, str | None]:
    """A run that finished but gave no LTXModel the plan is "not applied" (exit 1)."""
    dits = [b for b in built if b.model == "LTXModel"]
    if status == "ok" and not prep.as_built and (built or meter.stages) and not any(b.applied for b in dits):
        return "not applied", EXIT_FAILED, ("profile not applied: no LTXModel was built through LTX-2's builders"
                                            if not dits else "profile not applied to any LTXModel")
    return status, code, error


def make_record(prep: Prepared, *, run_id: str, started: datetime.datetime, wall_s: float, status: str, code: int,
                error: str | None, argv, device, built: list, meter, rank: int | None = None,
                plan_extra: dict | None = None) -> RunRecord:
    """The ledger record of a run (of one rank of a multi-GPU run, with `rank`)."""
    import torch

    plan = {"as_built": prep.as_built,
            "effective": {d.option: d.effective for d in prep.plan},  # JSON values, as `--check --json`'s
            "steps": [s.text for s in prep.plan.steps], "ltx2_does": list(prep.policy.ltx2_does)}
    return RunRecord(
        id=run_id, started=started.isoformat(timespec="seconds"), module=prep.module, status=status,
        exit=code, wall_s=round(wall_s, 3), argv=tuple(argv), ltx_argv=prep.policy.ltx_argv,
        error=error, versions=dict(prep.versions, **{"ltx-tui": TOOL_VERSION, "torch": torch.__version__}),
        device=_device_info(device), shape=prep.shape,
        profile={"path": _whole(prep.profile_path), "sha256": prep.profile_sha256,
                 "values": {d.option: d.requested for d in prep.plan}},
        plan=dict(plan, **(plan_extra or {})),
        models=tuple(_model_record(b) for b in built),
        stages=_stage_records(meter, _predictions(prep, built, rank), built), rank=rank)


def _module_outcome(run: Callable[[], None], module: str, log_error) -> tuple[str, int, str | None, str | None]:
    """Run the module; (status, exit code, error, traceback log) of how it ended."""
    try:
        run()
    except SystemExit as e:  # the module's own exit (argparse errors exit 2; sys.exit("message") 1)
        c = int(e.code) if isinstance(e.code, int) else (0 if e.code is None else 1)  # as Python's exit
        if c != 0:
            said = f"exit status {c}" if isinstance(e.code, int) or str(e.code) == "" else str(e.code)
            return "failed", c, f"{module} exited: {said}", None
    except KeyboardInterrupt:
        return "interrupted", 130, "interrupted", None
    except Exception as e:
        return "failed", EXIT_FAILED, f"{type(e).__name__}: {e}", (log_error() if log_error is not None
                                                                    else traceback.format_exc())
    return "ok", EXIT_OK, None, None


def launch(prep: Prepared, argv: list[str], *, on_built: Callable = lambda built: None,
           log_error: Callable[[], str] | None = None, ledger: str | Path | None = None) -> Outcome:
    """Run the module with the plan applied; never raises for the module's own failure.
    `ledger`: where the ranks of a multi-GPU run append their records (default: the user's)."""
    if prep.multi_gpu:
        return _launch_mgpu(prep, argv, log_error, ledger)
    import torch

    from backends.launch.hooks import Hooks
    from backends.launch.meter import Meter

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    meter = Meter(device)
    hooks = Hooks(prep.plan, prep.policy.dit_steps, prep.policy.decoder_steps, meter, on_built,
                  take_over=not prep.as_built, keep_dit=prep.module in KEEP_DIT_MODULES)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    saved_argv = sys.argv
    sys.argv = [prep.module, *prep.policy.ltx_argv]

    def run_module() -> None:
        with hooks.installed():
            runpy.run_module(prep.module, run_name="__main__", alter_sys=True)
    try:
        status, code, error, log = _module_outcome(run_module, prep.module, log_error)
    finally:
        sys.argv = saved_argv
        for s in list(meter.active):
            meter.pause(s)
    status, code, error = settle(prep, hooks.built, meter, status, code, error)
    record = make_record(prep, run_id=new_id(started), started=started, wall_s=time.perf_counter() - t0,
                         status=status, code=code, error=error, argv=argv, device=device, built=hooks.built,
                         meter=meter)
    return Outcome(code, record, hooks.built, log)


def _launch_mgpu(prep: Prepared, argv: list[str], log_error, ledger) -> Outcome:
    """A multi-GPU module: this process runs its __main__, which starts LTX-2's ranks; the plan and
    the records are the ranks' (`backends.launch.mgpu`). The outcome is the module's, made worse by
    any rank that failed, did not get the plan, or wrote no record."""
    from backends.launch import mgpu
    from backends.launch.meter import Meter

    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    run_id = new_id(started)
    spec = mgpu.RankSpec(prep, run_id, tuple(argv), None if ledger is None else str(Path(ledger).resolve()),
                         barrier_timeout(prep))
    saved_argv = sys.argv
    sys.argv = [prep.module, *prep.policy.ltx_argv]

    def run_module() -> None:
        import warnings

        with mgpu.controller_seam(spec), warnings.catch_warnings():
            # the gate imported the module to read its runner's signatures; runpy warns that it now
            # runs it again as __main__, which is what `python -m` does (the runner LTX-2 ships is
            # __main__'s, as under `python -m`)
            warnings.filterwarnings("ignore", "'ltx_pipelines.*' found in sys.modules", RuntimeWarning)
            runpy.run_module(prep.module, run_name="__main__", alter_sys=True)
    try:
        status, code, error, log = _module_outcome(run_module, prep.module, log_error)
    finally:
        sys.argv = saved_argv
    ranks = mgpu.rank_records(ledger, run_id)
    world = max((r.plan.get("mgpu", {}).get("world_size", 0) for r in ranks), default=0)
    missing = tuple(sorted(set(range(world)) - {r.rank for r in ranks}))
    if status == "ok":
        bad = [r for r in ranks if r.status != "ok"]
        if bad:
            status, code = bad[0].status, max(r.exit for r in bad)
            error = "; ".join(f"rank {r.rank}: {r.status}" + (f" ({r.error})" if r.error else "") for r in bad)
        elif missing:
            status, code, error = "failed", EXIT_FAILED, f"rank(s) {', '.join(map(str, missing))} wrote no record"
    import torch

    record = make_record(prep, run_id=run_id, started=started, wall_s=time.perf_counter() - t0, status=status,
                         code=code, error=error, argv=argv, device=torch.device("cpu"), built=[], meter=Meter(None))
    return Outcome(code, record, [], log, rank_records=tuple(ranks), multi_gpu=True, missing_ranks=missing)
