"""The plan: what a profile means on one machine, and what ltx-tui's runtime does for it.

`resolve(profile, capability)` decides every option (`backends.config.rules`) and turns the
effective values into runtime steps (`Step`s): which callable goes on which modules with which
arguments. `plan_here` is the plan for this machine's device (its tune cache included), which
`--check`, the app, `apply_profile`, the smoke checks and the launcher use; the memory plan,
`--ltx-args` and the smoke workers read a plan's decisions and steps rather than the profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from backends.config.ltx2_shapes import DEFAULT_RUN, RunShapes
from backends.config.options import OPTIONS_BY_KEY, Profile, show_value, toml_value
from backends.config.rules import Decision, Status, Summary, decide, exit_code, summarize
from backends.config.run_length import UNIT, RunLength
from backends.config.values import LOADER, RUNTIME, VALUES, value
from backends.machine.capability import Capability
from backends.machine.tuned import Tuned

# The runtime's steps, in the order apply_profile takes them.
STEP_ORDER = ("env", "diffvae_layout", "na_backend", "dense_attention", "fast_norm", "quantize", "offload",
              "compile", "capture")
# Options the runtime leaves to the LTX-2 pipeline or launcher, and why: their errors are judged
# where they run (the GPUs, the batch), not by the runtime.
PIPELINE = {
    "memory.max_batch_size": "batching is the pipeline's (--max-batch-size)",
    "parallel.gpus": "multi-GPU launch is the pipeline's (*_mgpu modules)",
    "parallel.devices": "device selection is the launcher's (CUDA_VISIBLE_DEVICES)",
}


@dataclass(frozen=True)
class Step:
    """One thing the runtime does: `kind` (one of STEP_ORDER), its arguments, and in words."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """Decisions for every option of the vocabulary, and the runtime steps they make."""

    profile: Profile
    capability: Capability
    decisions: tuple[Decision, ...]
    steps: tuple[Step, ...]
    tuned: Tuned | None = None
    length: RunLength | None = None  # the run's length `auto` decided for (None: `--tune --runs N`'s)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)

    def __len__(self) -> int:
        return len(self.decisions)

    def __getitem__(self, key: str) -> Decision:
        for d in self.decisions:
            if d.option == key:
                return d
        raise KeyError(key)

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def step_for(self, option: str) -> Step | None:
        """The runtime step that realises `option` (None: the pipeline's, or nothing to do)."""
        return next((s for s in self.steps if option in s.options), None)

    def runtime_text(self, option: str) -> str:
        """What the runtime does for `option`, in words."""
        if option in PIPELINE:
            return f"left to the LTX-2 pipeline: {PIPELINE[option]}"
        step = self.step_for(option)
        if step is not None:
            return step.text
        d = self[option]
        if d.status is Status.ERROR:
            return f"nothing: {option} cannot run here"
        return "nothing to do"

    @property
    def blocking(self) -> list[Decision]:
        """Errors that stop the runtime: all but those of the options the launcher or the pipeline judge
        where they run (PIPELINE). A sparse attention, which nothing installs, stops it."""
        return [d for d in self.decisions if d.status is Status.ERROR and d.option not in PIPELINE]

    @property
    def not_refused(self) -> list[str]:
        """The options in error the runtime and the launcher let through: PIPELINE's, judged where the
        run goes (a single-GPU module without CUDA runs on the device LTX-2 picks, the CPU)."""
        return [d.option for d in self.decisions if d.status is Status.ERROR and d.option in PIPELINE]

    def refusal(self) -> str:
        """Why the runtime refuses this plan, an option a line with its fix ("" when it does not)."""
        if not self.blocking:
            return ""
        return "the profile cannot run here:\n" + "\n".join(
            f"  {d.option} = {toml_value(d.requested)}: {d.message} (fix: {d.remedy})" for d in self.blocking)

    def pinned(self) -> Profile:
        """The profile with what `auto` of the options whose first call compiles (`diffvae.mode`,
        `compile.enabled`) decided here written in: what LTX-2's flags say for this plan."""
        values = {k: self[k].effective for k in UNIT
                  if str(self.profile.get(k)) == "auto" and self[k].effective is not None}
        return self.profile.replace(**values)

    def summary(self) -> Summary:
        return summarize(self.decisions)

    def exit_code(self, *, strict: bool = False) -> int:
        return exit_code(self.decisions, strict=strict)


def _runs(d: Decision) -> bool:
    return d.status is not Status.ERROR and d.effective is not None


def _steps(profile: Profile, d: Mapping[str, Decision]) -> list[Step]:
    steps = [Step("env", {"expandable_segments": bool(d["memory.expandable_segments"].effective)},
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA initialises)"
                  if d["memory.expandable_segments"].effective else "allocator settings left as they are",
                  ("memory.expandable_segments",))]
    mode, na, kernel = d["diffvae.mode"], d["diffvae.na_backend"], d["diffvae.natten_kernel"]
    if _runs(mode):
        compiled = value("diffvae.mode", mode.effective).compiled
        steps.append(Step("diffvae_layout", {"mode": mode.effective, "compile": compiled},
                          f"LTX-2 DiffusionVideoDecoder: {mode.effective} layout (LTX-2's own apply_diffvae_config)"
                          + (", blocks compiled" if compiled else ""), ("diffvae.mode",)))
    if _runs(na) and value("diffvae.na_backend", na.effective).step == "na_backend":  # blackwell_dsl: the layout's
        backend = f"natten:{kernel.effective}" if na.effective == "natten" else na.effective
        where = "every module with attention_function and kernel_size (LTX-2's NeighborhoodAttention3D)"
        steps.append(Step("na_backend", {"backend": backend},
                          f"NAFunction({backend!r}) as attention_function(attn, q, k, v) on {where}",
                          ("diffvae.na_backend", "diffvae.natten_kernel")))
    attention = d["transformer.attention"]
    if _runs(attention):
        steps.append(Step("dense_attention", {"name": attention.effective},
                          f"DenseFunction({attention.effective!r}) as attention_function(q, k, v, heads) (and the "
                          "masked slot where it can mask) on every module with attention_function and heads",
                          ("transformer.attention",)))
    if d["transformer.fast_norm"].effective:
        c, m = d["compile.enabled"], d["compile.mode"]
        # compiled blocks take the kernels as custom ops only where CUDA graphs replay them: each costs
        # the host ~0.1-0.2 ms to issue, more than Inductor's own fusion of these norms
        traced = bool(_runs(c) and c.effective and (d["compile.capture"].effective
                                                    or (_runs(m) and value("compile.mode", m.effective).cuda_graphs)))
        steps.append(Step("fast_norm", {"traced": traced}, "kernels.adaln's one-pass norms in every LTX-2 DiT block's "
                          "ada_zero_function and post_sa_function, kernels.dit_qk's q/k norm + RoPE in its attentions' "
                          "preattention_function" + (" (compiled: custom ops, the norms writing fp8-scaled-mm linears' "
                                                     "rows, replayed in CUDA graphs)" if traced else
                                                     " (compiled blocks without CUDA graphs keep Inductor's fusion)"),
                          ("transformer.fast_norm",)))
    q, scope = d["transformer.quantization"], profile.transformer.quantization_scope.value
    if _runs(q) and value("transformer.quantization", q.effective).step:
        loader = value("transformer.quantization", q.effective).runner == LOADER
        steps.append(Step("quantize", {"method": q.effective, "scope": scope, "loader": loader},
                          f"{q.effective}: LTX-2's loader quantizes while it builds the DiT (--quantization "
                          f"{q.effective}, passed by `ltx-tui run`); apply_profile refuses a built model" if loader else
                          f"{q.effective} replaces the nn.Linear in scope {scope} that it can run",
                          ("transformer.quantization", "transformer.quantization_scope")))
    o = d["offload.mode"]
    if _runs(o) and o.effective != "none":
        p, prefetch = profile.offload, d["offload.prefetch"].effective
        steps.append(Step("offload", {"mode": o.effective, "gpu_slots": p.gpu_slots, "prefetch": prefetch},
                          f"each transformer block's weights in {'pinned CPU memory' if o.effective == 'cpu' else 'a memory-mapped file'}"
                          f", streamed through {p.gpu_slots} GPU slot(s), {prefetch} block(s) ahead",
                          ("offload.mode", "offload.gpu_slots", "offload.prefetch")))
    c = d["compile.enabled"]
    keys = ("compile.mode", "compile.backend", "compile.fullgraph", "compile.dynamic", "compile.capture")
    if _runs(c) and c.effective and all(d[k].status is not Status.ERROR for k in keys):
        args = {k.split(".")[1]: d[k].effective for k in keys}
        args["cudagraphs"] = value("compile.mode", args["mode"]).cuda_graphs or bool(args["capture"])
        graphs = ("; LTX-2's block loop captured as one CUDA graph per input shape (its prepare calls before it too), "
                  "from its second call (other "
                  "models: Inductor's graphs, one per block)" if args["capture"] else
                  "; Inductor's CUDA graphs, one per block, a step marked at each model forward" if args["cudagraphs"]
                  else "")
        steps.append(Step("compile", args, "torch.compile per transformer block: " + ", ".join(
            f"{k}={v}" for k, v in args.items()) + graphs, ("compile.enabled", *keys)))
    elif _runs(c) and not c.effective and _runs(d["compile.capture"]) and d["compile.capture"].effective:
        steps.append(Step("capture", {}, "LTX-2's block loop, its blocks eager, captured as one CUDA graph per input "
                          "shape from its second call (other models: not captured)", ("compile.capture",)))
    return sorted(steps, key=lambda s: STEP_ORDER.index(s.kind))


def resolve(profile: Profile, capability: Capability, tuned: Tuned | None = None,
            length: RunLength | None = None, run: RunShapes | None = None) -> Plan:
    """Resolve `profile` on `capability` into decisions and runtime steps; `auto` values follow
    `tuned` (what `ltx-tui --tune` measured on this machine: `machine.tuned.load_tuned`) when given,
    for a run of `length` (default: the generations `--tune --runs N` gave, of LTX-2's distilled schedule);
    with `run` (the run's shapes) the checks that depend on them too (the multi-GPU token cap)."""
    decisions = tuple(decide(profile, capability, tuned, run, length))
    by_key = {x.option: x for x in decisions}
    return Plan(profile, capability, decisions, tuple(_steps(profile, by_key)), tuned, length)


def first_device(profile: Profile, capability: Capability) -> str:
    """Where the runtime puts the profile's model on this machine: its first GPU, or the CPU."""
    return f"cuda:{(profile.parallel.devices or (0,))[0]}" if capability.cuda else "cpu"


def plan_here(profile: Profile, capability: Capability, device: Any = None, length: RunLength | None = None,
              run: RunShapes | None = None) -> Plan:
    """The plan of `profile` on this machine (`capability` probed live; another machine's plans
    without measurements), `auto` following this machine's `--tune` measurements for a run of
    `length`: the run's plan (every GPU), or with `device` the plan for tensors on that device
    (`apply_profile`)."""
    from backends.machine.tuned import load_tuned

    here = capability if device is None else capability.for_device(device)
    tuned = load_tuned(capability, run.label if run is not None else None, or_latest=True)
    return resolve(profile, here, tuned, length, run)


def tuned_note(tuned: Tuned, run: RunShapes | None, can_tune: bool = True) -> str:
    """What `auto` follows, in words, and the tune to run where it was measured at another shape than
    the run's (`run`; None: LTX-2's default run, which ltx-tui plans for until told otherwise);
    `can_tune` False: this machine cannot time that shape (a CPU), so the GPU machine is named."""
    head = f"auto follows `ltx-tui --tune` measurements at {tuned.shapes} ({tuned.written})"
    target = run or DEFAULT_RUN
    if tuned.shapes == target.label:
        return head
    whose = "this run's" if run is not None else "LTX-2's default run,"
    frames = f" --frames {target.frames}" + (f" --batch {target.batch}" if target.batch > 1 else "")
    where = "" if can_tune else " on the GPU machine (this one cannot time it)"
    return (f"{head}, not at {whose} {target.label}: the fastest choice can differ with the shape; measure "
            f"it{where} with `ltx-tui --tune --resolution {target.width}x{target.height}{frames}`")


def explain(key: str, plan: Plan) -> str:
    """`ltx-tui --explain KEY`: values, rules with their verdict here, what the runtime does with
    the option in general and with this plan, the LTX-2 flag."""
    from backends.config.rules import RULES, Facts

    spec = OPTIONS_BY_KEY[key]
    d = plan[key]
    facts = Facts(plan.capability, plan.profile)
    lines = [f"{key}: {spec.help}", f"  values:   {spec.allowed()} (default {show_value(spec.default)})",
             f"  profile:  {show_value(d.requested)} -> {d.effective_text} ({d.status})"]
    lines += [f"            {s.text}" for s in d.chain]
    if d.remedy and d.status is not Status.OK:
        lines.append(f"            fix: {d.remedy}")
    lines.append("  rules:" if spec.rules else "  rules:    none (any value runs)")
    for rule_id in spec.rules:
        rule = RULES[rule_id]
        verdict = "holds" if rule.holds(facts) else "fires"
        lines.append(f"    {rule_id:<34} {verdict:<6} {rule.message(facts) if verdict == 'fires' else ''}".rstrip())
    if key in VALUES:
        lines.append("  each value:")
        for v, about in VALUES[key].items():
            facts_of = [f"needs {', '.join(about.needs)}" if about.needs else "",
                        "" if about.runner == RUNTIME else f"run by: {about.runner}",
                        f"LTX-2: {about.flag}" if about.flag else "", "timed by --tune" if about.tuned else ""]
            lines.append(f"    {v:<26} {about.text}" + "".join(f"; {x}" for x in facts_of if x))
    lines.append(f"  does:     {spec.runtime}")
    lines.append(f"  runtime:  {plan.runtime_text(key)}")
    lines.append(f"  LTX-2:    {spec.flag or 'no ltx-pipelines flag'}")
    return "\n".join(lines) + "\n"
