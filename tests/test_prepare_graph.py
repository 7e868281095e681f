"""compile.capture's graphs of LTX-2's `prepare` calls (`backends.runtime.prepare_graph`) on LTX-2's real
LTXModel, the parts that need no GPU: what is installed and released, the eager path off CUDA, and the
frequency grids on the device. The captures themselves: tests/test_ltx2_gpu.py."""

import pytest
import torch

from backends.runtime import block_graph, ltx2
from backends.runtime.prepare_graph import PrepareGraphs, capture_prepare

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


def test_capture_takes_both_prepare_calls_once_and_releases_them_with_the_loop():
    model = ltx2.tiny_transformer(layers=1)
    graphs = block_graph.capture_loop(model)
    prepares = [model.video_args_preprocessor.prepare, model.audio_args_preprocessor.prepare]
    assert all(isinstance(p, PrepareGraphs) for p in prepares) and graphs.prepares == prepares
    assert capture_prepare(model) == []  # installed once
    for p in prepares:
        p.graphs["a signature"], p.grids["a grid"], p.pool = None, torch.zeros(1), object()
    assert block_graph.release_loop_graphs(model)
    assert all(not p.graphs and not p.grids and p.pool is None for p in prepares)


def test_off_cuda_prepare_runs_as_it_was():
    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=12)
    with torch.inference_mode():
        want = model.video_args_preprocessor.prepare(video, audio)
        capture_prepare(model)
        got = model.video_args_preprocessor.prepare(video, audio)
    assert torch.equal(got.x, want.x) and torch.equal(got.positional_embeddings[0], want.positional_embeddings[0])
    assert not model.video_args_preprocessor.prepare.graphs


def test_while_it_runs_prepare_ltx2s_frequency_grids_come_on_the_device_and_are_ltx2s_again_after():
    """A capture refuses LTX-2's blocking copy of its cached host grid to the device: the grid functions
    `transformer_args` calls give the grid on the call's device (one copy per arguments and device,
    kept for the graphs' replays) inside the call, LTX-2's own outside it, an exception included."""
    from ltx_core.model.transformer import rope, transformer_args

    graphs = PrepareGraphs(lambda modality, cross: None)
    with graphs._device_grids(torch.device("meta")):  # no CUDA here: a device LTX-2's copy would go to
        assert transformer_args.generate_freq_grid_pytorch is not rope.generate_freq_grid_pytorch
        a = transformer_args.generate_freq_grid_pytorch(10000.0, 3, 64)
        b = transformer_args.generate_freq_grid_pytorch(10000.0, 3, 64)
        c = transformer_args.generate_freq_grid_np(10000.0, 3, 64)
    assert a is b and a.device.type == c.device.type == "meta" and len(graphs.grids) == 2
    assert a.shape == rope.generate_freq_grid_pytorch(10000.0, 3, 64).shape
    assert transformer_args.generate_freq_grid_pytorch is rope.generate_freq_grid_pytorch
    with graphs._device_grids(torch.device("cpu")):
        assert torch.equal(transformer_args.generate_freq_grid_np(10000.0, 3, 64),
                           rope.generate_freq_grid_np(10000.0, 3, 64))
    with pytest.raises(ZeroDivisionError), graphs._device_grids(torch.device("cpu")):
        1 / 0
    assert transformer_args.generate_freq_grid_np is rope.generate_freq_grid_np
