"""The ltx-pipelines (v1.2.0) command line and environment equivalent to a plan.

Flags carry the profile's values (for `auto` what the plan decided here, with a comment saying
why); an option the plan cannot run here is left out with the reason, options LTX-2 has no flag
for are listed as comments, and so are the plan's fallbacks and warnings (several say what
LTX-2's own pipeline would do differently from ltx-tui's runtime). Nothing is dropped silently. Text from paths, files or NVML reaches the script only
in comments, with control characters escaped (a newline in a file name cannot start a command),
or as a quoted shell word.
"""

from __future__ import annotations

from backends.config.options import OffloadMode, show_value
from backends.config.plan import Plan
from backends.config.rules import Status
from backends.config.run_length import UNIT
from backends.config.values import value
from backends.machine.text import printable, shell_word

PIPELINE = "ltx_pipelines.distilled"
NO_FLAG = ("diffvae.na_backend", "diffvae.natten_kernel", "transformer.attention", "transformer.quantization_scope",
           "transformer.sparse_attention", "transformer.sla_topk", "transformer.fast_norm")


def ltx_args(plan: Plan, label: str = "profile") -> str:
    """A shell snippet: environment, the pipeline command with flags, and comments for the rest."""
    p = plan.profile
    multi = p.parallel.gpus > 1
    env, flags, notes = [], [], []

    def flag(option: str, text: str) -> None:
        d = plan[option]
        if d.status is Status.ERROR:
            notes.append(f"{text} left out: {option} cannot run here: {d.message}")
        else:
            flags.append(text)

    if plan["memory.expandable_segments"].effective:
        env.append("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    elif p.memory.expandable_segments:  # asked, but of no use where the plan was made (no CUDA)
        notes.append(f"memory.expandable_segments = true left out: {plan['memory.expandable_segments'].chain[-1].reason}")
    if multi:
        devices = p.parallel.devices or tuple(range(p.parallel.gpus))
        env.append("export CUDA_VISIBLE_DEVICES=" + ",".join(map(str, devices)))
    elif p.parallel.devices:
        env.append(f"export CUDA_VISIBLE_DEVICES={p.parallel.devices[0]}")
    if not multi:  # LTX-2's multi-GPU CLIs take neither flag (the plan's error says what they run instead)
        for option in ("offload.mode", "transformer.quantization"):
            about = value(option, p.get(option))
            if about.flag:
                flag(option, about.flag)
            elif plan[option].status is Status.ERROR:
                notes.append(f"{option} = {p.get(option)} left out: {plan[option].message}")
            elif about.step:
                notes.append(f"{option} = {p.get(option)}: no ltx-pipelines flag (ltx-tui's runtime applies it)")
    else:  # what the *_mgpu command lines would run instead of the profile's value is an error of the plan
        notes += [f"{option} = {show_value(p.get(option))} left out: {plan[option].message}"
                  for option in ("transformer.quantization", "offload.mode") if plan[option].status is Status.ERROR]
    pinned = plan.pinned()  # what auto decided here, as LTX-2's flags say it
    if plan["compile.enabled"].effective:
        flag("compile.mode", " ".join(pinned.compile.ltx2_flag()))
    elif plan.step("capture") is not None:
        notes.append("compile.capture = true with compile off: no ltx-pipelines flag (ltx-tui's runtime captures "
                     "LTX-2's block loop of eager blocks; LTX-2's --compile capture=true compiles them too)")
    flag("diffvae.mode", value("diffvae.mode", pinned.diffvae.mode).flag)
    notes += [f"{key} = auto -> {show_value(plan[key].effective)}: {plan[key].chain[0].reason}"
              for key in UNIT if str(p.get(key)) == "auto" and plan[key].effective is not None]
    notes.append(f"memory.max_batch_size = {p.memory.max_batch_size}: --max-batch-size is read only by some pipeline "
                 f"modules (not {PIPELINE} nor the *_mgpu ones); add it where your module reads it")
    no_flag = list(NO_FLAG)
    if p.offload.mode is not OffloadMode.NONE:
        no_flag += ["offload.gpu_slots", "offload.prefetch"]
    notes += [f"{key} = {show_value(p.get(key))}: no ltx-pipelines flag" for key in no_flag]
    notes += [f"{d.option}: {d.status}: {d.message}" for d in plan
              if d.status in (Status.FALLBACK, Status.WARNING) and d.message]
    module = f"{PIPELINE}_mgpu" if multi else PIPELINE
    family = "*_mgpu module" if multi else "pipeline module"
    lines = [f"# ltx-pipelines v1.2.0 equivalent of {printable(label)} (use your {family} in place of {module})"]
    lines += env
    lines.append(f"python -m {module}" + (" \\" if flags else ""))
    lines += [f"    {f}" + (" \\" if i < len(flags) - 1 else "") for i, f in enumerate(flags)]
    lines += [f"# {printable(n)}" for n in notes]
    return "\n".join(lines) + "\n"


def run_command(profile_path: str, module: str = PIPELINE) -> str:
    """The `ltx-tui run` command line that runs LTX-2's `module` with the profile applied to every
    model it builds (the module's own arguments follow `--`)."""
    return (f"ltx-tui run --profile {shell_word(profile_path)} -- {module}  "
            f"# then the module's own arguments (checkpoints, prompt, ...), not the flags the profile sets\n")
