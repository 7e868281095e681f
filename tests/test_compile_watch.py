"""Compile failures are counted, not hidden: graph breaks, and graphs Dynamo ran eagerly after
suppressing an error (as ltx-tui's DYNAMO_SETTINGS make it do), in the report, the smoke check
and the tune."""

import pytest
import torch

from backends.runtime.compile_watch import CompileWatch
from backends.runtime.ltx2 import DYNAMO_SETTINGS


def _broken_backend(gm, example_inputs):
    raise RuntimeError("inductor could not build this graph (test)")


def test_a_suppressed_compile_error_counts_as_eager():
    torch._dynamo.reset()
    watch = CompileWatch()
    fn = torch.compile(lambda x: x.sin() + 1, backend=_broken_backend)
    with torch._dynamo.config.patch(**DYNAMO_SETTINGS):
        out = fn(torch.ones(3))
    assert torch.equal(out, torch.ones(3).sin() + 1)  # it ran, eagerly
    health = watch.health()
    assert health.eager == 1 and not health.compiled
    assert "WON'T CONVERT" in health.reasons[0] and "could not build this graph" in health.reasons[0]
    assert CompileWatch().health().eager == 0  # a new watch starts from zero


def test_graph_breaks_are_counted():
    torch._dynamo.reset()
    watch = CompileWatch()

    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    torch.compile(f, backend="eager")(torch.ones(2))
    health = watch.health()
    assert health.graph_breaks >= 1 and health.compiled and "graph break" in str(health)


def test_a_frame_dynamo_skips_whole_is_not_compiled():
    """A graph break Dynamo cannot resume from (here inside try/finally) skips the whole frame: no
    warning, no graph-break count; only the graphs compiled (none) tell."""
    torch._dynamo.reset()
    watch = CompileWatch()

    def f(x):
        try:
            x = x + 1
            torch._dynamo.graph_break()
        finally:
            pass
        return x * 2

    torch.compile(f, backend="eager")(torch.ones(2))
    health = watch.health()
    assert health.graphs == 0 and health.eager == 0 and not health.compiled
    assert str(health).startswith("0 graph(s) compiled")


@pytest.mark.parametrize("where", ["report", "tune"])
def test_eager_fallback_fails_the_report_reader_and_the_tune(where, monkeypatch):
    from backends.config.options import Profile
    from backends.runtime.apply import apply_profile
    from backends.runtime.modules import dense_stack

    torch._dynamo.reset()
    model = dense_stack(2, 32, head_dim=16).eval()
    report = apply_profile(model, Profile().replace(**{"compile.enabled": True, "compile.backend": "eager",
                                                       "transformer.attention": "sdpa_math"}), device="cpu")
    monkeypatch.setattr(torch._dynamo.config, "suppress_errors", True)
    # what a failing Inductor does: every frame's backend raises, Dynamo runs it eagerly
    monkeypatch.setattr("torch._dynamo.output_graph.OutputGraph.call_user_compiler",
                        lambda self, gm, *a, **k: _broken_backend(gm, None))
    with torch.inference_mode():
        model(torch.randn(1, 5, 32))
    health = report.compile_health()
    assert health.eager >= 1 and "ran eagerly" in str(report)
    if where == "tune":
        from backends.tune.measure import FellBack, _all_compiled

        with pytest.raises(FellBack, match="not timed as compiled"):
            _all_compiled(report)


@pytest.mark.slow  # the smoke worker's LTX-2 probe model: ~7 s on two cores
def test_eager_fallback_fails_the_smoke_check(monkeypatch):
    from dataclasses import asdict

    from backends.config.options import Profile
    from backends.config.plan import resolve
    from backends.machine.capability import probe
    from backends.smoke import _worker, plan_checks

    torch._dynamo.reset()
    plan = resolve(Profile().replace(**{"compile.enabled": True, "compile.backend": "eager"}), probe())
    spec = next(s for s in plan_checks(plan) if s.kind == "compile")
    monkeypatch.setattr(torch._dynamo.config, "suppress_errors", True)
    monkeypatch.setattr("torch._dynamo.output_graph.OutputGraph.call_user_compiler",
                        lambda self, gm, *a, **k: _broken_backend(gm, None))
    row = _worker(asdict(spec))
    assert row["status"] == "fail" and "ran eagerly" in row["message"], row
