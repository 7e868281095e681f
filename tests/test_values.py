"""Every member of every option enum has a descriptor, and every consumer handles it: the rules,
the plan's steps, the runtime's prepare pass, the memory plan, --ltx-args, --explain, the smoke
checks, the launcher's flag policy and the tune. A value added to an enum without all of that
fails here, not in a user's run."""

import pytest

from backends.config.ltx2_shapes import DEFAULT_RUN
from backends.config.memory import plan_memory
from backends.config.options import OPTIONS, Kind, Profile, show_value
from backends.config.plan import STEP_ORDER, explain, resolve
from backends.config.rules import RULES, Status
from backends.config.values import LOADER, NOBODY, RUNTIME, VALUES, value
from backends.launch import flags
from backends.ltx_args import ltx_args
from backends.machine.presets import preset
from backends.runtime import apply, attention, dense_attention, quant
from backends.smoke import plan_checks
from backends.tune import candidates

CHOICES = [(o.key, member.value) for o in OPTIONS if o.kind is Kind.CHOICE for member in o.choices]
MACHINES = ("cpu", "a100", "h100", "h200", "b200", "h100x2")


def test_every_enum_member_has_a_descriptor_and_nothing_else_does():
    assert {k for k, _ in CHOICES} == set(VALUES)
    for key, values in VALUES.items():
        assert set(values) == {v for k, v in CHOICES if k == key}, key


@pytest.mark.parametrize("key, v", CHOICES)
def test_descriptor_is_consistent(key, v):
    about = value(key, v)
    assert about.text and all(r in RULES for r in about.needs)
    assert about.runner in (RUNTIME, LOADER, NOBODY)
    assert about.step is None or about.step in STEP_ORDER
    if about.runner == LOADER:
        assert about.flag and about.flag.startswith("--")  # only LTX-2 runs it: through its flag
    if key == "transformer.quantization":
        assert about.weight_bytes and about.bound is not None
        assert bool(about.runner == RUNTIME and about.step) == (v in quant.BUILDERS)
    if key == "diffvae.mode":  # auto's memory is its pick's
        assert (about.decode_coef is not None) == (v != "auto") and about.bound is not None
    if key == "compile.mode":
        assert (about.without_graphs is not None) == about.cuda_graphs and about.bound is not None
    if about.tuned:
        assert key in candidates.OPTIONS or key == "diffvae.natten_kernel"  # kernels: natten:KERNEL candidates


def _profile(key, v):
    values = {key: v}
    if key.startswith("compile.") and key != "compile.enabled":
        values["compile.enabled"] = True
    if v == "blackwell_dsl":
        values.update({"diffvae.mode": "blackwell_dsl", "diffvae.na_backend": "blackwell_dsl"})
    if key == "diffvae.natten_kernel":
        values["diffvae.na_backend"] = "natten"
    if key == "offload.mode" and v != "none":
        values["transformer.quantization"] = "fp8-cast"
    return Profile().replace(**values)


@pytest.mark.parametrize("key, v", CHOICES)
def test_every_consumer_handles_every_value(key, v):
    profile = _profile(key, v)
    for machine in MACHINES:
        plan = resolve(profile, preset(machine))
        d = plan[key]
        about = value(key, v)
        plan_memory(plan, DEFAULT_RUN, None)
        ltx_args(plan)
        explain(key, plan)
        plan_checks(plan)
        try:
            flags.policy(("--prompt", "x"), plan.pinned())
        except flags.FlagConflict:
            pass
        if about.runner == NOBODY:
            assert d.status is Status.ERROR, (machine, d)  # never ok for what nothing runs
        runs = d.status is not Status.ERROR and d.effective is not None and not plan.blocking
        if not (runs and about.step and show_value(d.effective) == v):
            continue
        step = plan.step(about.step)
        assert step is not None, (machine, key, v)
        assert step.kind in apply.PREPARE
        if step.kind == "quantize":
            assert step.args["loader"] == (about.runner == LOADER)
            assert step.args["loader"] or step.args["method"] in quant.BUILDERS
        if step.kind == "na_backend":
            assert step.args["backend"] in attention.BACKENDS
        if step.kind == "dense_attention":
            assert step.args["name"] in dense_attention.NAMES


def test_every_rule_a_value_needs_is_listed_by_its_option():
    """--explain lists an option's rules from its spec: every rule a value needs is among them."""
    from backends.config.options import OPTIONS_BY_KEY

    for key, values in VALUES.items():
        missing = {r for about in values.values() for r in about.needs} - set(OPTIONS_BY_KEY[key].rules)
        assert not missing, (key, missing)


def test_every_rule_is_listed_by_some_option():
    """--explain lists each option's rules from its spec: a rule no option lists would never be shown."""
    listed = {r for o in OPTIONS for r in o.rules}
    assert set(RULES) - listed == set()


def test_every_options_does_line_is_a_whole_phrase():
    """`--explain` printed 'does: nothing: the LTX-2 pipeline's' for five options: a sentence cut short."""
    for spec in OPTIONS:
        assert spec.runtime and not spec.runtime.rstrip().endswith(("'s", ":", ",")), (spec.key, spec.runtime)
