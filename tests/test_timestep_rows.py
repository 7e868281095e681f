"""`runtime.timestep_rows` on LTX-2's real LTXModel: timesteps equal across a modality's tokens go
in with one token, with the same outputs; per-token values that differ stay per token. Inputs are
shaped as LTX-2's pipelines make them: `denoise_mask * sigma`, (B, T, 1)."""

import dataclasses

import pytest
import torch

from backends.runtime import ltx2, timestep_rows

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


def _seen(model):
    """Record the timesteps each of the model's preprocessors gets."""
    seen = []
    for name in ("video_args_preprocessor", "audio_args_preprocessor"):
        pre = getattr(model, name, None)
        if pre is None:
            continue
        prepare = pre.prepare

        def spy(modality, cross=None, _prepare=prepare, _name=name):
            seen.append((_name, tuple(modality.timesteps.shape)))
            return _prepare(modality, cross)
        pre.prepare = spy
    return seen


def test_pipeline_timesteps_that_are_uniform_go_in_as_one_row_with_the_same_output():
    model = ltx2.tiny_transformer(layers=2)
    video, audio, _ = ltx2.transformer_inputs(tokens=23, padded=0)
    assert video.timesteps.shape == (1, 23, 1)  # as the pipelines make them
    with torch.inference_mode():
        ref = model(video, audio, None)
        seen = _seen(model)
        assert timestep_rows.install(torch.nn.Sequential(model)) and timestep_rows.install(model)  # once
        out = model(video, audio, None)
    assert seen == [("video_args_preprocessor", (1, 1, 1)), ("audio_args_preprocessor", (1, 1, 1))]
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)
    assert video.timesteps.shape == (1, 23, 1)  # the caller's modality is not changed


def test_per_token_timesteps_that_differ_stay_per_token():
    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=23, padded=0)
    mask = torch.ones(1, 23, 1)
    mask[:, :5] = 0  # a conditioning frame: denoise_mask * sigma as LTX-2's pipelines make it
    video = dataclasses.replace(video, timesteps=mask * 0.5)
    with torch.inference_mode():
        ref = model(video, audio, None)
        seen = _seen(model)
        timestep_rows.install(model)
        out = model(video, audio, None)
    assert seen == [("video_args_preprocessor", (1, 23, 1)), ("audio_args_preprocessor", (1, 1, 1))]
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)


def test_a_video_only_model_and_the_modalitys_documented_form():
    from ltx_core.model.transformer.model import LTXModel, LTXModelType

    torch.manual_seed(0)
    model = ltx2.wake_zero_tables(LTXModel(model_type=LTXModelType.VideoOnly, num_attention_heads=2,
                                           attention_head_dim=32, in_channels=16, out_channels=16, num_layers=1,
                                           cross_attention_dim=64).eval(), torch.Generator().manual_seed(0))
    video, _, _ = ltx2.transformer_inputs(tokens=9, padded=0, with_audio=False)
    video = dataclasses.replace(video, timesteps=video.timesteps[..., 0])  # (B, T), as `Modality` documents
    with torch.inference_mode():
        ref = model(video, None, None)[0]
        seen = _seen(model)
        assert timestep_rows.install(model)
        out = model(video, None, None)[0]
    assert seen == [("video_args_preprocessor", (1, 1))]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_collapse_leaves_what_it_cannot_check():
    video, audio, _ = ltx2.transformer_inputs(tokens=3, padded=0)
    one = dataclasses.replace(video, timesteps=video.timesteps[:, :1])
    batch = dataclasses.replace(video, timesteps=torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    wide = dataclasses.replace(video, timesteps=torch.full((1, 3, 2), 0.5))  # not one value a token
    assert timestep_rows.collapse(None, one, wide) == (None, one, wide)
    rows = timestep_rows.collapse(batch)[0].timesteps  # each batch row has its own value
    assert rows.tolist() == [[0.5], [0.25]]
    assert timestep_rows.install(torch.nn.Linear(2, 2)) is False


def test_a_copy_keeps_the_rows_and_runs_its_own_weights():
    import copy

    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=9, padded=0)
    assert timestep_rows.install(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
        seen = _seen(twin)
        assert not torch.equal(twin(video, audio, None)[0], model(video, audio, None)[0])  # its own weights
    assert seen == [("video_args_preprocessor", (1, 1, 1)), ("audio_args_preprocessor", (1, 1, 1))]


def test_keyword_calls_are_collapsed_too():
    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=9, padded=0)
    timestep_rows.install(model)
    seen = _seen(model)
    with torch.inference_mode():
        model(video=video, audio=audio, perturbations=None)
        model(video, audio=audio, perturbations=None)
    assert seen == [("video_args_preprocessor", (1, 1, 1)), ("audio_args_preprocessor", (1, 1, 1))] * 2
