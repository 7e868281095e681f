"""`runtime.shared_rows`: one fp8 row quantization per input in a compiled block."""

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

from backends.runtime import quant, shared_rows

ROWS = torch.ops.ltx_tui.fp8_rows.default


def _rows(graph) -> int:
    return sum(n.target is ROWS for n in graph.nodes)


def test_the_pass_keeps_one_quantization_per_input_and_gelu():
    def f(x, c):  # as LTX-2's attention: to_q, to_k, to_v of x; to_k, to_v of a context
        a, b, g = (torch.ops.ltx_tui.fp8_rows(x.reshape(-1, 64), gelu) for gelu in (False, False, True))
        d, e = (torch.ops.ltx_tui.fp8_rows(c.reshape(-1, 64), False) for _ in range(2))
        return a[0].float() + b[0].float() + g[0].float(), a[1] + b[1] + g[1], d[1] * e[1], x.reshape(-1, 64)[:1]

    x, c = torch.randn(2, 8, 64), torch.randn(2, 8, 64)
    gm = make_fx(f)(x, c)
    want = gm(x, c)
    assert _rows(gm.graph) == 5
    shared_rows.SharedRows()(gm.graph)
    gm.recompile()
    assert _rows(gm.graph) == 3  # x plain, x with gelu, c
    views = [n for n in gm.graph.nodes if n.op == "call_function" and "view" in str(n.target)]
    assert views and all(n.users for n in views)  # the merged calls' views went with them
    assert all(torch.equal(got, w) for got, w in zip(gm(x, c), want))


def test_different_shapes_of_one_input_are_different_inputs():
    def f(x):
        return (torch.ops.ltx_tui.fp8_rows(x.reshape(-1, 64), False)[1],
                torch.ops.ltx_tui.fp8_rows(x.reshape(-1, 32), False)[1])

    gm = make_fx(f)(torch.randn(4, 64))
    shared_rows.SharedRows()(gm.graph)
    assert _rows(gm.graph) == 2


def test_install_leaves_anothers_pass_alone(monkeypatch):
    from torch._inductor import config

    monkeypatch.setattr(config, "post_grad_custom_post_pass", None)
    assert shared_rows.install() and isinstance(config.post_grad_custom_post_pass, shared_rows.SharedRows)
    assert shared_rows.install()  # already there
    other = object()
    monkeypatch.setattr(config, "post_grad_custom_post_pass", other)
    assert not shared_rows.install() and config.post_grad_custom_post_pass is other


def test_a_traced_fp8_linear_quantizes_through_the_custom_op():
    """Under torch.compile the quantization is the op the pass can see (the kernel itself otherwise)."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []
    backend = aot_autograd(fw_compiler=lambda gm, _: graphs.append(gm) or gm)
    linears = nn.ModuleList(quant.FP8ScaledMMLinear(nn.Linear(64, 64)) for _ in range(3))
    x = torch.randn(2, 8, 64)
    with torch.inference_mode():
        want = sum(lin(x) for lin in linears)
        got = torch.compile(lambda t: sum(lin(t) for lin in linears), backend=backend)(x)
    assert torch.equal(got, want) and _rows(graphs[-1].graph) == 3


@pytest.mark.slow
def test_inductor_runs_the_pass_on_a_compiled_block():
    """The pass as Inductor runs it (here on the CPU): three fp8 linears of one input, one quantization
    in the generated code, the same outputs as eager."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    linears = nn.ModuleList(quant.FP8ScaledMMLinear(nn.Linear(64, 64)) for _ in range(3))
    x = torch.randn(2, 8, 64)
    torch._dynamo.reset()
    with config.patch(post_grad_custom_post_pass=None, fx_graph_cache=False), torch.inference_mode():
        assert shared_rows.install()
        want = sum(lin(x) for lin in linears)
        got, code = run_and_get_code(torch.compile(lambda t: sum(lin(t) for lin in linears)), x)
    calls = [line for c in code for line in c.splitlines() if "torch.ops.ltx_tui.fp8_rows.default(" in line]
    assert torch.equal(got, want) and len(calls) == 1


DEQUANT = torch.ops.ltx_tui.fp8_dequant_rows.default


def _o_into_to_out(o8, scale, gate):
    """As LTX-2's attention hands cuDNN's fp8 O to to_out: dequantized rows, viewed (B, S, inner) and
    back, then quantized again by the fp8 linear."""
    o = torch.ops.ltx_tui.fp8_dequant_rows(o8, scale, torch.bfloat16).view(2, 8, 64)
    if gate is not None:
        o = o * gate
    return torch.ops.ltx_tui.fp8_rows(o.reshape(-1, 64), False)


def test_rows_just_dequantized_go_to_the_next_linear_as_they_are():
    o8 = (torch.randn(16, 64) * 20).to(torch.float8_e4m3fn)
    scale = torch.rand(16) + 0.5
    gm = make_fx(lambda o8, scale: _o_into_to_out(o8, scale, None), tracing_mode="fake")(o8, scale)
    shared_rows.SharedRows()(gm.graph)
    gm.recompile()
    assert _rows(gm.graph) == 0 and not any(n.target is DEQUANT for n in gm.graph.nodes)
    q, s = gm(o8, scale)
    assert q is o8 and s is scale


def test_rows_changed_after_the_dequantization_are_quantized_again():
    o8 = (torch.randn(16, 64) * 20).to(torch.float8_e4m3fn)
    gm = make_fx(_o_into_to_out, tracing_mode="fake")(o8, torch.ones(16), torch.ones(64))
    shared_rows.SharedRows()(gm.graph)
    assert _rows(gm.graph) == 1 and any(n.target is DEQUANT for n in gm.graph.nodes)


def test_rows_of_another_shape_are_quantized_again():
    def f(o8, scale):  # the same bytes as rows of 32: other rows, other scales
        return torch.ops.ltx_tui.fp8_rows(torch.ops.ltx_tui.fp8_dequant_rows(o8, scale, torch.float32).view(-1, 32),
                                          False)

    gm = make_fx(f, tracing_mode="fake")((torch.randn(16, 64)).to(torch.float8_e4m3fn), torch.ones(16))
    shared_rows.SharedRows()(gm.graph)
    assert _rows(gm.graph) == 1


def test_dequant_rows_is_the_inverse_of_fp8_rows():
    x = torch.randn(5, 64, dtype=torch.bfloat16) * 7
    q, s = quant._fp8_rows(x)
    torch.testing.assert_close(quant.dequant_rows(q, s, torch.bfloat16), x, rtol=0.07, atol=0)
