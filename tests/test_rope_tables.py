"""`runtime.rope_tables` on LTX-2's real LTXModel: a forward whose positions equal an earlier
forward's takes that forward's RoPE tables (bit for bit what LTX-2 computes), positions changed in
place or of another shape compute new ones, and a cache holds a preprocessor's last two tables."""

import dataclasses

import pytest
import torch

from backends.runtime import ltx2, rope_tables

pytestmark = [pytest.mark.ltx2, pytest.mark.usefixtures("ltx2_core")]


def _caches(model):
    return [p.simple_preprocessor._prepare_positional_embeddings
            for p in (model.video_args_preprocessor, model.audio_args_preprocessor)]


def test_same_positions_reuse_the_tables_with_the_same_output():
    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=23, padded=0)
    with torch.inference_mode():
        ref = model(video, audio, None)
        assert rope_tables.install(torch.nn.Sequential(model)) and rope_tables.install(model)  # once
        caches = _caches(model)
        assert all(isinstance(c, rope_tables.Tables) for c in caches)
        first = model(video, audio, None)
        counts = [c.computed for c in caches]
        # video: its own table and its cross-attention's; audio's cross-attention asks for its own again here
        assert counts == [2, 1]
        again = model(dataclasses.replace(video, latent=video.latent * 2), audio, None)
        assert [c.computed for c in caches] == counts  # the same positions: nothing computed
        second = model(video, audio, None)
    for r, f, s in zip(ref, first, second):
        assert torch.equal(r, f) and torch.equal(r, s)
    assert not torch.equal(again[0], ref[0])


def test_positions_changed_in_place_or_reshaped_compute_new_tables():
    model = ltx2.tiny_transformer(layers=1)
    video, audio, _ = ltx2.transformer_inputs(tokens=23, padded=0)
    rope_tables.install(model)
    video_tables = _caches(model)[0]
    with torch.inference_mode():
        model(video, audio, None)
        video.positions.add_(1.0)  # an inference tensor: no version counter sees this
        moved = model(video, audio, None)
        assert video_tables.computed == 4
        fresh = ltx2.tiny_transformer(layers=1)(video, audio, None)
        assert all(torch.equal(m, f) for m, f in zip(moved, fresh))
        other, audio2, _ = ltx2.transformer_inputs(tokens=17, padded=0)
        model(other, audio2, None)
    assert video_tables.computed == 6 and len(video_tables.entries) == rope_tables.KEEP


def test_disabled_installs_nothing(monkeypatch):
    monkeypatch.setattr(rope_tables, "ENABLED", False)
    assert not rope_tables.install(ltx2.tiny_transformer(layers=1))
    assert not rope_tables.install(torch.nn.Linear(2, 2))
