"""The app's smoke run checks the plan `--check` and the workers make: the tune cache included.

Found on the H200: `--tune` chose transformer.attention = pytorch; the app planned its checks
without the tune cache (attention sdpa_cudnn) and its worker, planning again with it, refused
the step ("this machine's plan has {'name': 'pytorch'}"). Here with the real `plan_checks` and
real workers (no fake runner) on this machine's live capability.
"""

import pytest
from textual.widgets import DataTable

from backends.config.options import Profile
from backends.config.plan import plan_here
from backends.machine.capability import probe
from backends.machine.tuned import Candidate, Tuned, store_tuned
from backends.smoke import plan_checks
from fakes import FakeNvml
from ltx_tui.app import LtxTuiApp


def _tuned_to_math_attention(cap):
    """A tune cache in which SDPA's math backend measured fastest (no prior picks it: without CUDA the
    prior is torch's own SDPA dispatch, with CUDA a fused backend)."""
    store_tuned(cap, Tuned(cap.fingerprint(), "224x224x9", (
        Candidate("transformer.attention", "sdpa_math", "measured", 1.0, 0.0),
        Candidate("transformer.attention", "pytorch", "measured", 2.0, 0.0)), written="2026-12-01T00:00:00+00:00"))


def test_the_plan_here_follows_the_tune_cache():
    cap = probe()
    assert plan_here(Profile(), cap).step("dense_attention").args["name"] != "sdpa_math"
    _tuned_to_math_attention(cap)
    assert plan_here(Profile(), cap).step("dense_attention").args["name"] == "sdpa_math"
    assert "attention sdpa_math" in [s.name for s in plan_checks(plan_here(Profile(), cap))]


@pytest.mark.slow
async def test_app_smoke_after_a_tune_passes_every_row():
    cap = probe()
    _tuned_to_math_attention(cap)
    app = LtxTuiApp(None, cap, env={}, nvml_module=FakeNvml([]), poll_interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        table = app.query_one("#smoke-table", DataTable)
        for _ in range(1200):  # real workers: a few seconds each
            await pilot.pause(0.1)
            if app._smoke_cancel is None and table.row_count:
                break
        rows = [[str(c) for c in table.get_row(str(k))] for k in range(table.row_count)]
        assert "attention sdpa_math" in [r[0] for r in rows]
        # a decoder layout is LTX-2's: skipped, not failed, where ltx-core cannot be imported
        assert all(r[1] == "pass" or r[1] == "skipped" and r[0].startswith("diffvae") for r in rows), rows


def test_value_marks_follow_the_tune_cache():
    """The chooser's marks follow the tune cache, as the app's plan does (they used to resolve without it)."""
    from ltx_tui.app import value_marks

    cap = probe()
    _tuned_to_math_attention(cap)
    from backends.machine.tuned import load_tuned

    marks = value_marks(Profile(), cap, "transformer.attention", load_tuned(cap))
    assert "fastest measured here" in marks["automatic"][1]
    assert "fastest measured here" not in value_marks(Profile(), cap, "transformer.attention")["automatic"][1]
