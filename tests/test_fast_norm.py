"""transformer.fast_norm: `kernels.adaln` in the norm slots of LTX-2's real DiT blocks (Triton's
interpreter on the CPU), the blocks' own functions where the kernels do not apply, and the profile
step that installs it."""

from __future__ import annotations

import copy

import pytest
import torch

from backends.config.options import Profile
from backends.runtime import fast_norm, ltx2, timestep_rows
from backends.runtime.apply import apply_profile

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


@pytest.mark.slow  # 2-15 s on 2 cores: the quick suite stays under 4 minutes (CI runs it)
def test_ltx2s_blocks_run_the_kernels_and_compute_what_they_did():
    model = ltx2.tiny_transformer(layers=2)
    fast = copy.deepcopy(model)
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]
    assert fast_norm.install(fast) == ["transformer_blocks.0", "transformer_blocks.1"]  # once: not wrapped twice
    block = fast.transformer_blocks[0]
    assert isinstance(block.ada_zero_function, fast_norm.FastAdaZero)
    assert type(block.ada_zero_function.own).__name__ == "PytorchAdaZeroFunction"
    inputs = ltx2.transformer_inputs(tokens=23, padded=0)
    with torch.inference_mode():
        got, want = fast(*inputs), model(*inputs)
    # per block: video and audio AdaLN before self-attention and FF, both sides of a2v and v2a (8), post_sa (2),
    # the q/k norm + RoPE of its six attentions (self and text of each modality, a2v, v2a)
    assert fast_norm.counts(fast) == (2 * 16, 0)
    assert isinstance(block.attn1.preattention_function, fast_norm.FastPreAttention)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_only_ltx2s_own_functions_are_replaced():
    """A slot holding another function (LTX-2's fp8-blockwise ops return quantized tensors) keeps it."""
    model = ltx2.tiny_transformer(layers=2)
    other = lambda *args: None  # noqa: E731
    model.transformer_blocks[1].ada_zero_function = other
    assert fast_norm.install(model) == ["transformer_blocks.0"]
    assert model.transformer_blocks[1].ada_zero_function is other
    assert isinstance(model.transformer_blocks[1].post_sa_function, fast_norm.FastPostSA)


def test_a_kernel_error_that_is_not_a_refusal_is_raised(monkeypatch):
    def broken(*args):
        raise ValueError("a bug, not a refusal")
    monkeypatch.setattr(fast_norm.FastAdaZero, "kernel", staticmethod(broken))
    x = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="a bug"):
        fast_norm.FastAdaZero(lambda *args: "own")(x, 1e-6, x[:, :1], x[:, :1])


def test_tensors_the_kernel_refuses_run_the_blocks_own_function(monkeypatch):
    seen = []
    fast = fast_norm.FastAdaZero(lambda *args: seen.append(args) or "own")
    x = torch.randn(1, 4, 8)
    assert fast(x, 1e-6, torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 8)) == "own"
    assert fast(x.transpose(1, 2).contiguous().transpose(1, 2)[:, :, :4], 1e-6, x[:, :1, :4], x[:, :1, :4]) == "own"
    assert len(seen) == 2 and (fast.runs, fast.own_runs) == (0, 2)
    monkeypatch.setattr("kernels.adaln.interpreting", lambda: False)
    monkeypatch.setattr("backends.runtime.fast_norm.interpreting", lambda: False)
    assert fast(x, 1e-6, x[:, :1], x[:, :1]) == "own"  # off CUDA without the interpreter: LTX-2's own ops


def test_while_compiling_the_slot_is_the_kernels_custom_op(monkeypatch):
    """Traced, a slot calls `ltx_tui::post_sa` (which `runtime.shared_rows` can fold with the fp8 rows
    after it), or the block's own function for tensors the kernel refuses."""
    seen = []
    monkeypatch.setattr(fast_norm.FastPostSA, "op", staticmethod(lambda *args: seen.append(args) or "op"))
    fast = fast_norm.FastPostSA(lambda *args: "own", traced=True)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = torch.randn(1, 3, 8)
    assert fast(x, x, None, 1e-6, x[:, :1]) == "op" and len(seen) == 1
    assert fast(x, x.double(), None, 1e-6, x[:, :1]) == "own"
    assert (fast.runs, fast.own_runs) == (0, 0)  # counted eagerly only
    fast.traced = False  # blocks compiled without CUDA graphs: the host's issue time would cost more
    assert fast(x, x, None, 1e-6, x[:, :1]) == "own" and len(seen) == 1


OPS = torch.ops.ltx_tui


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _norms_into_rows(x, y, gate, scale, shift):
    """As a compiled LTX-2 block with fast_norm and fp8 linears: the AdaLN norm into to_q/to_k/to_v's
    fp8 rows, and post_sa's norm into the text cross-attention's to_q, its residual used on."""
    n = OPS.ada_zero(x, 1e-6, scale, shift)
    a = OPS.fp8_rows(n.view(-1, 48), False)
    res, normed = OPS.post_sa(x, y, None, 1e-6, gate)
    b = OPS.fp8_rows(normed.reshape(-1, 48), False)
    return a[0].float() * a[1][:, None], b[0].float() * b[1][:, None], res * 2


def _graph(f, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    from backends.runtime import shared_rows

    gm = make_fx(f, tracing_mode="fake")(*args)
    shared_rows.SharedRows()(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm


def _norm_inputs():
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(2, 5, 48, generator=g) for _ in range(2))
    return x, y, *(torch.randn(2, 1, 48, generator=g) * 0.3 for _ in range(3))


def test_compiled_blocks_take_the_custom_ops_only_under_cuda_graphs():
    """The plan says so: with the block loop captured (or Inductor's CUDA graphs) the replay issues
    nothing on the host; compiled without graphs, the blocks keep Inductor's fusion of these norms."""
    from backends.config.plan import resolve
    from backends.machine.presets import preset

    def traced(**values):
        plan = resolve(Profile().replace(**{"transformer.fast_norm": True, **values}), preset("h200"))
        return plan.step("fast_norm").args["traced"]

    assert traced(**{"compile.enabled": True, "compile.capture": True})
    assert traced(**{"compile.enabled": True, "compile.mode": "reduce-overhead"})
    assert not traced(**{"compile.enabled": True}) and not traced()
    assert not traced(**{"compile.enabled": False, "compile.capture": True})  # eager blocks captured: no tracing


def test_a_norm_whose_one_use_is_fp8_rows_writes_them_itself():
    args = _norm_inputs()
    gm = _graph(_norms_into_rows, *args)
    targets = _targets(gm)
    assert OPS.ada_zero_rows.default in targets and OPS.post_sa_rows.default in targets
    assert not {OPS.ada_zero.default, OPS.post_sa.default, OPS.fp8_rows.default} & set(targets)
    for got, want in zip(gm(*args), _norms_into_rows(*args)):  # e4m3 rows (the interpreter's rounding is coarse)
        assert ((got - want).norm() / want.norm()) < 0.1


def test_a_norm_used_elsewhere_too_keeps_its_rows_apart():
    def f(x, y, gate, scale, shift):
        n = OPS.ada_zero(x, 1e-6, scale, shift)
        res, normed = OPS.post_sa(x, y, None, 1e-6, gate)
        return OPS.fp8_rows(n.view(-1, 48), False)[1], n * 2, OPS.fp8_rows(normed.view(-1, 48), False)[1], normed

    targets = _targets(_graph(f, *_norm_inputs()))
    assert OPS.ada_zero.default in targets and OPS.post_sa.default in targets
    assert OPS.ada_zero_rows.default not in targets and OPS.post_sa_rows.default not in targets


def _adds_into_norms(x, y, z, gate, mask, *mods):
    """As a compiled LTX-2 block after the text cross-attention: vx + attn2 into the a2v and v2a norms
    (the second's scale computed between them), then vx + a2v * gate * mask into the FF's norm, the sum
    used on as the residual."""
    sc1, sh1, sc2, sh2, sc3, sh3 = mods
    a = x + y
    q1 = OPS.ada_zero_rows(a, 1e-6, sc1, sh1)
    q2 = OPS.ada_zero_rows(a, 1e-6, sc2 * 1.5, sh2)
    b = a + z * gate * mask
    q3 = OPS.ada_zero_rows(b, 1e-6, sc3, sh3)
    return (*(q[0].float() * q[1][:, None] for q in (q1, q2, q3)), b * 2)


def _add_inputs():
    g = torch.Generator().manual_seed(0)
    x, y, z = (torch.randn(2, 5, 48, generator=g) for _ in range(3))
    mask = torch.tensor([1.0, 0.0]).view(2, 1, 1)
    return x, y, z, torch.randn(2, 1, 48, generator=g), mask, *(torch.randn(2, 1, 48, generator=g) * 0.3 for _ in range(6))


def test_a_residual_add_into_adaln_norms_joins_them():
    args = _add_inputs()
    gm = _graph(_adds_into_norms, *args)
    targets = _targets(gm)
    assert targets.count(OPS.add_ada_zero_rows.default) == 2  # one with two norms, one with one
    assert OPS.ada_zero_rows.default not in targets and str(torch.ops.aten.add.Tensor) not in map(str, targets)
    for got, want in zip(gm(*args), _adds_into_norms(*args)):  # e4m3 rows (the interpreter's rounding is coarse)
        assert ((got - want).norm() / want.norm()) < 0.1


def test_an_add_whose_norm_reads_the_sum_otherwise_stays():
    """A norm whose scale is computed from the sum cannot be joined with it: the add stays."""
    def f(x, y, sc, sh):
        a = x + y
        return OPS.ada_zero_rows(a, 1e-6, a.mean(1, keepdim=True), sh)[1], a

    targets = _targets(_graph(f, *_add_inputs()[:2], *_add_inputs()[5:7]))
    assert OPS.ada_zero_rows.default in targets and OPS.add_ada_zero_rows.default not in targets


def test_the_fused_ops_are_the_two_they_replace():
    def close(q, s, want):  # e4m3 rows against the norm they stand for (the interpreter rounds coarsely)
        assert q.dtype == torch.float8_e4m3fn and ((q.float() * s[:, None] - want).norm() / want.norm()) < 0.1

    x, y, gate, scale, shift = _norm_inputs()
    close(*OPS.ada_zero_rows(x, 1e-6, scale, shift), OPS.ada_zero(x, 1e-6, scale, shift).view(-1, 48))
    res, q, s = OPS.post_sa_rows(x, y, None, 1e-6, gate)
    want_res, normed = OPS.post_sa(x, y, None, 1e-6, gate)
    torch.testing.assert_close(res, want_res)
    close(q, s, normed.view(-1, 48))


def test_the_profile_installs_it_and_says_where():
    model = ltx2.tiny_transformer(layers=1)
    report = apply_profile(model, Profile().replace(**{"transformer.fast_norm": True}), device="cpu")
    change = report.change("transformer.fast_norm")
    assert change.action == "installed" and change.modules == ("transformer_blocks.0",)
    assert isinstance(model.transformer_blocks[0].post_sa_function, fast_norm.FastPostSA)
    assert "on cpu the blocks' own ops run" in change.detail
    assert "one AdaLN row" in change.detail and getattr(model, timestep_rows.WRAPPED)
    assert not model.transformer_blocks[0].post_sa_function.traced
    plain = ltx2.tiny_transformer(layers=1)
    assert apply_profile(plain, Profile(), device="cpu").change("transformer.fast_norm").action != "installed"
    assert not isinstance(plain.transformer_blocks[0].post_sa_function, fast_norm.FastPostSA)


def compiled_block_run(model, inputs) -> tuple:
    """(the eager outputs, those with the first block compiled by Inductor with `runtime.shared_rows`,
    the compiled code's text)."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    from backends.runtime import shared_rows

    block = model.transformer_blocks[0]
    eager_forward = block.forward
    torch._dynamo.reset()
    with config.patch(post_grad_custom_post_pass=None, fx_graph_cache=False), torch.inference_mode():
        want = model(*inputs)
        assert shared_rows.install()
        block.forward = torch.compile(eager_forward)
        got, code = run_and_get_code(model, *inputs)
    return want, got, "\n".join(code)


@pytest.mark.slow
def test_a_compiled_ltx2_block_with_fp8_linears_has_its_norms_write_the_rows():
    """LTX-2's real DiT blocks with fp8-scaled-mm linears and fast_norm, compiled by Inductor (on the
    CPU) with `runtime.shared_rows`: the AdaLN norms and post_sa write their linears' fp8 rows, and
    the outputs are the eager model's."""
    from backends.runtime import quant

    model = ltx2.tiny_transformer(layers=1)
    quant.plan_quantization(model, "fp8-scaled-mm").apply(model)
    quant.fuse_gelu(model)
    fast_norm.install(model, traced=True)
    want, got, text = compiled_block_run(model, ltx2.transformer_inputs(tokens=23, padded=0))
    # the self-attentions' AdaLN of each modality reads the block's input; the other six read a residual
    # add, which joins them: the a2v and v2a norms of one modality in one op, the FF's in another
    assert text.count("torch.ops.ltx_tui.ada_zero_rows.default(") == 2
    assert text.count("torch.ops.ltx_tui.add_ada_zero_rows.default(") == 4
    assert text.count("torch.ops.ltx_tui.post_sa_rows.default(") == 2
    assert "ltx_tui.ada_zero.default(" not in text and "ltx_tui.post_sa.default(" not in text
    assert text.count("torch.ops.ltx_tui.dit_qk.default(") == 6  # the q/k norm + RoPE of each attention
    for g, w in zip(got, want):
        assert ((g - w).norm() / w.norm()) < 0.05


def _attn1_call():
    model = ltx2.tiny_transformer(layers=1)
    attn = model.transformer_blocks[0].attn1
    seen = {}
    attn.register_forward_pre_hook(lambda m, a, kw: seen.update(kw, x=a[0]) and None, with_kwargs=True)
    with torch.inference_mode():
        model(*ltx2.transformer_inputs(tokens=23, padded=0))
    return attn, seen["x"], seen["pe"]


def test_the_pre_attention_writes_e4m3_where_the_attention_takes_static_scales(monkeypatch):
    """Given `DenseFunction.static_fp8`'s scales, q and k leave the pre-attention in e4m3, so scaled;
    without them in LTX-2's own dtype; a RoPE other than SPLIT runs LTX-2's own function."""
    from backends.runtime.dense_attention import DenseFunction

    attn, x, pe = _attn1_call()
    fast = fast_norm.FastPreAttention(attn.preattention_function)
    with torch.inference_mode():
        q, k = attn.to_q(x), attn.to_k(x)
        want = attn.preattention_function(q, k, attn, None, pe, None)
        got = fast(q, k, attn, None, pe, None)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.allclose(g, w, rtol=1e-4, atol=1e-5)
        attn.attention_function = DenseFunction("sdpa_cudnn")
        scales = torch.tensor([0.01, 0.02])
        monkeypatch.setattr(DenseFunction, "static_fp8", lambda self, q, k, heads, mask: scales)
        for g, w, s in zip(fast(q, k, attn, None, pe, None), want, scales):
            assert g.dtype == torch.float8_e4m3fn and ((g.float() * s - w).norm() / w.norm()) < 0.1
        from ltx_core.model.transformer.rope import LTXRopeType

        monkeypatch.setattr(attn, "rope_type", LTXRopeType.INTERLEAVED)
        with pytest.raises(RuntimeError):  # LTX-2's own interleaved RoPE, which these SPLIT tables do not fit
            fast(q, k, attn, None, pe, None)
    assert (fast.runs, fast.own_runs) == (2, 1)
