"""compile.capture's block-loop graphs (`backends.runtime.block_graph`) on LTX-2's real LTXModel,
the parts that need no GPU: finding the loop, a call's signature, the static buffers, the compile
arguments, and the eager path off CUDA. The captures themselves: tests/test_ltx2_gpu.py."""

import dataclasses

import pytest
import torch
import torch.nn as nn

from backends.runtime import block_graph, ltx2
from backends.runtime.apply import compile_kwargs

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


@pytest.fixture(scope="module")
def model_and_args():
    model = ltx2.tiny_transformer(layers=2)
    video, audio, _ = ltx2.transformer_inputs(tokens=12)
    with torch.inference_mode():
        v = model.video_args_preprocessor.prepare(video, audio)
        a = model.audio_args_preprocessor.prepare(audio, video)
    return model, v, a


def test_the_loop_is_ltx2s_ltxmodel_even_inside_a_wrapper(model_and_args):
    model = model_and_args[0]
    assert block_graph.loop_owner(model) is model
    assert block_graph.loop_owner(nn.Sequential(model)) is model
    assert block_graph.loop_owner(nn.Sequential(nn.Linear(2, 2))) is None


def test_a_signature_follows_shapes_strides_and_baked_in_values(model_and_args):
    _, v, _ = model_and_args
    key = block_graph.args_key(v)
    assert block_graph.args_key(dataclasses.replace(v, x=v.x.clone())) == key  # values are not in it
    assert block_graph.args_key(dataclasses.replace(v, x=v.x[:, :-1])) != key  # shape
    assert block_graph.args_key(dataclasses.replace(v, x=v.x.transpose(0, 1))) != key  # strides
    assert block_graph.args_key(dataclasses.replace(v, x=v.x.double())) != key  # dtype
    assert block_graph.args_key(dataclasses.replace(v, enabled=not v.enabled)) != key  # a branch the graph takes
    cos, sin = v.positional_embeddings
    assert block_graph.args_key(dataclasses.replace(v, positional_embeddings=(cos[..., :-1], sin[..., :-1]))) != key
    assert block_graph.args_key(None) is None
    with pytest.raises(TypeError):  # a field the graph would bake in but cannot compare
        block_graph.args_key(dataclasses.replace(v, enabled=[True]))
    with pytest.raises(TypeError, match="cannot be keyed"):  # a tensor in it would be keyed by identity
        block_graph.args_key(dataclasses.replace(v, positional_embeddings=(cos, 1.0)))


def test_static_buffers_are_copies_and_take_each_calls_values(model_and_args):
    _, v, _ = model_and_args
    static = block_graph.static_args(v)
    assert static.x.data_ptr() != v.x.data_ptr() and torch.equal(static.x, v.x)
    assert static.positional_embeddings[0].data_ptr() != v.positional_embeddings[0].data_ptr()
    assert static.enabled == v.enabled
    other = dataclasses.replace(v, x=torch.randn_like(v.x),
                                positional_embeddings=tuple(torch.randn_like(t) for t in v.positional_embeddings))
    block_graph.copy_args(static, other)
    assert torch.equal(static.x, other.x)
    assert all(torch.equal(s, o) for s, o in zip(static.positional_embeddings, other.positional_embeddings))


def test_the_perturbation_signature_is_ltx2s_graph_signature(model_and_args):
    from ltx_core.guidance.perturbations import BatchedPerturbationConfig, Perturbation, PerturbationConfig, \
        PerturbationType

    model, v, a = model_and_args
    graphs = block_graph.LoopGraphs(model, model._process_transformer_blocks)
    clean = BatchedPerturbationConfig.empty(1, 2, "cpu", torch.float32)
    skip = BatchedPerturbationConfig([PerturbationConfig([Perturbation(PerturbationType.SKIP_VIDEO_SELF_ATTN, [1])])],
                                     2, "cpu", torch.float32)
    assert graphs.key(v, a, clean) == graphs.key(v, a, BatchedPerturbationConfig.empty(1, 2, "cpu", torch.float32))
    assert graphs.key(v, a, clean) != graphs.key(v, a, skip)
    with pytest.raises(ValueError, match="host copy"):
        graphs.key(v, a, BatchedPerturbationConfig.from_masks(clean.block_masks))


def test_the_perturbation_signature_is_worked_out_once_per_mask_contents(model_and_args, monkeypatch):
    """LTX-2's graph_signature asks each block's guards of the host masks (4.6 ms a forward at 48 blocks,
    with the GPU idle before the replay): once per mask contents and processor, not at every call."""
    from ltx_core.guidance.perturbations import BatchedPerturbationConfig, Perturbation, PerturbationConfig, \
        PerturbationType

    model, v, a = model_and_args
    graphs = block_graph.LoopGraphs(model, model._process_transformer_blocks)
    processor = model.block_input_processor
    calls = []
    signature = type(processor).graph_signature
    monkeypatch.setattr(type(processor), "graph_signature", lambda self, p: calls.append(p) or signature(self, p))
    skip = BatchedPerturbationConfig([PerturbationConfig([Perturbation(PerturbationType.SKIP_VIDEO_SELF_ATTN, [1])])],
                                     2, "cpu", torch.float32)
    keys = [graphs.key(v, a, BatchedPerturbationConfig.empty(1, 2, "cpu", torch.float32)) for _ in range(3)]
    assert len(set(keys)) == 1 and len(calls) == 1
    assert graphs.key(v, a, skip) != keys[0] and len(calls) == 2
    assert graphs.key(v, a, skip) == graphs.key(v, a, skip) and len(calls) == 2
    other = type(processor).__new__(type(processor))  # a processor put in its place is asked again
    other.__dict__.update(processor.__dict__)
    monkeypatch.setattr(model, "block_input_processor", other)
    assert graphs.key(v, a, skip) == graphs.key(v, a, skip) and len(calls) == 3


def test_off_cuda_the_loop_runs_as_it_was(model_and_args):
    model, v, a = model_and_args
    from ltx_core.guidance.perturbations import BatchedPerturbationConfig

    p = BatchedPerturbationConfig.empty(1, 2, "cpu", torch.float32)
    graphs = block_graph.LoopGraphs(model, model._process_transformer_blocks)
    with torch.inference_mode():
        want, _ = model._process_transformer_blocks(v, a, p)
        got, _ = graphs(v, a, p)
    assert torch.equal(got.x, want.x) and not graphs.graphs and graphs.reason is None


def test_blocks_under_a_captured_loop_compile_without_graphs_of_their_own():
    base = {"backend": "inductor", "fullgraph": False, "dynamic": "auto", "capture": True}
    assert "mode" not in compile_kwargs({**base, "mode": "reduce-overhead"}, loop_graph=True)
    assert compile_kwargs({**base, "mode": "max-autotune"}, loop_graph=True)["mode"] == "max-autotune-no-cudagraphs"
    assert "options" not in compile_kwargs({**base, "mode": "default"}, loop_graph=True)
    # a model without LTX-2's loop keeps Inductor's CUDA graphs, one per block
    assert compile_kwargs({**base, "mode": "default"})["options"] == {"triton.cudagraphs": True}
    assert compile_kwargs({**base, "mode": "reduce-overhead"})["mode"] == "reduce-overhead"


def test_disposing_the_dit_in_a_run_releases_its_loop_graphs():
    """LTX-2's registry keeps a disposed model's shell: graphs left on it would hold their pool and
    static buffers through the decode."""
    from types import SimpleNamespace

    from backends.launch import hooks

    model = ltx2.tiny_transformer(layers=1)
    x0 = nn.Module()
    x0.velocity_model = model  # as LTX-2's X0Model holds the LTXModel
    graphs = block_graph.capture_loop(x0)
    assert model._process_transformer_blocks is graphs
    disposed = []
    for kept in (model, None):  # the DiT kept for the next stage keeps its graphs; any other is released
        graphs.graphs["a signature"], graphs.pool = object(), object()
        dispose = hooks.Hooks._wrap_dispose(SimpleNamespace(kept=kept and ("key", kept)), disposed.append)
        dispose(x0)
        assert bool(graphs.graphs) == (kept is not None) and (graphs.pool is None) == (kept is None)
    assert disposed == [x0]
    assert block_graph.release_loop_graphs(x0) and not block_graph.release_loop_graphs(nn.Linear(2, 2))


def test_capture_without_compile_takes_the_eager_loop_of_ltx2s_dit():
    """compile.capture with compile off: a `capture` step installs the loop graphs on LTX-2's eager
    blocks (no torch.compile) and one AdaLN row; a model without LTX-2's loop is no target."""
    from backends.config.options import Profile
    from backends.config.plan import resolve
    from backends.machine.presets import preset
    from backends.runtime.apply import PREPARE, ApplyReport, ProfileNotRunnable

    plan = resolve(Profile().replace(**{"compile.capture": True}), preset("h200"))
    step = plan.step("capture")
    model = ltx2.tiny_transformer(layers=2)
    video, audio, _ = ltx2.transformer_inputs(tokens=12)
    with torch.inference_mode():
        want = model(video, audio, None)
    report = ApplyReport(plan)
    PREPARE["capture"](step, model, plan, torch.device("cuda"), None)(model, report)
    assert isinstance(model._process_transformer_blocks, block_graph.LoopGraphs)
    assert report.loop_graphs is model._process_transformer_blocks
    change = report.change("compile.capture")
    assert change.action == "captured" and "blocks eager" in change.detail and "one AdaLN row" in change.detail
    assert not any(hasattr(b.forward, "_torchdynamo_orig_callable") for b in model.transformer_blocks)
    with torch.inference_mode():  # off CUDA the loop runs as it is
        got = model(video, audio, None)
    assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))
    other = nn.Sequential(nn.Linear(2, 2))
    report = ApplyReport(plan)
    PREPARE["capture"](step, other, plan, torch.device("cuda"), None)(other, report)
    assert report.change("compile.capture").action == "no target" and report.loop_graphs is None
    with pytest.raises(ProfileNotRunnable, match="CUDA device"):
        PREPARE["capture"](step, model, plan, torch.device("cpu"), None)
