"""backends.config.ltx2_shapes against LTX-2 v1.2.0's source and its real decoder."""

import pytest
import torch

from backends.config import ltx2_shapes as S
from backends.config.ltx2_shapes import RunShapes, parse_resolution


def test_shapes_at_768x512x121():
    s = RunShapes(768, 512, 121)
    assert s.latent == (16, 16, 24) and s.dit_tokens == 6144
    assert [(x.thw, x.heads, x.kernel, x.calls) for x in s.na_stages()] == [
        ((18, 16, 24), 16, (3, 7, 7), 4), ((18, 32, 48), 8, (3, 7, 7), 6), ((35, 32, 48), 4, (3, 5, 5), 4),
        ((69, 64, 96), 4, (3, 5, 5), 2), ((121, 128, 192), 2, (3, 7, 7), 16)]


@pytest.mark.parametrize("w, h, f, why", [
    (770, 512, 121, "multiples of 32 from 32 to 4096 .* — use 768x512$"), (768, 512, 120, r"8k\+1 .* — use 113 or 121$"),
    (0, 512, 9, "multiples of 32"), (768, 512, 9, None), (4096, 4096, 1025, None),
    (768, 512, 80000001, r"frames 80000001: must be 8k\+1 from 1 to 1025 .* — use at most 1025$"),
    (8192, 512, 121, "resolution 8192x512: .* from 32 to 4096 .* — use 4096x512$")])
def test_run_shapes_check_their_arguments(w, h, f, why):
    if why is None:
        RunShapes(w, h, f)
        return
    with pytest.raises(ValueError, match=why):
        RunShapes(w, h, f)


def test_a_shape_ltx2s_command_line_chose_is_not_held_to_ltx_tuis_bounds():
    """`ltx-tui run` measures what LTX-2's own flags ask for (a 1033-frame video over several GPUs):
    its plan and memory prediction take the shape; only its structure must hold."""
    assert RunShapes(4608, 2048, 1033, bounded=False) == RunShapes(4608, 2048, 1033, bounded=False)
    with pytest.raises(ValueError, match="at most 1025"):
        RunShapes(768, 512, 1033)
    with pytest.raises(ValueError, match="8k\\+1"):
        RunShapes(768, 512, 1034, bounded=False)


@pytest.mark.parametrize("text, ok", [("768x512", (768, 512)), ("768X512", (768, 512)), ("768", None),
                                      ("axb", None), ("-1x5", None), ("[b]1x1[/b]", None)])
def test_parse_resolution(text, ok):
    if ok:
        assert parse_resolution(text) == ok
    else:
        with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
            parse_resolution(text)


@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_facts_are_ltx2s():
    from ltx_core.model.transformer.model import LTXModel
    from ltx_core.model.video_vae import diffusion_video_decoder as d
    import ast
    import inspect
    from pathlib import Path

    import ltx_core
    from ltx_core.types import SpatioTemporalScaleFactors

    # gemma_assets imports transformers: read its constant from the source
    source = Path(ltx_core.__file__).parent / "text_encoders" / "gemma" / "gemma_assets.py"
    TOKENIZER_MAX_LENGTH = next(ast.literal_eval(n.value) for n in ast.parse(source.read_text()).body
                                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "TOKENIZER_MAX_LENGTH")

    assert tuple(SpatioTemporalScaleFactors.default()) == (S.TIME_SCALE, S.SPACE_SCALE, S.SPACE_SCALE)
    p = inspect.signature(LTXModel.__init__).parameters
    assert (p["num_layers"].default, p["num_attention_heads"].default, p["attention_head_dim"].default,
            p["cross_attention_dim"].default) == (S.DIT_LAYERS, S.DIT_HEADS, S.DIT_HEAD_DIM, S.DIT_HEADS * S.DIT_HEAD_DIM)
    assert TOKENIZER_MAX_LENGTH == S.TEXT_TOKENS
    assert d._L_STAGE_CHANNELS == (*S.VAE_STAGE_CHANNELS, S.VAE_STAGE5[0])
    assert d._DIFF_STAGE_DEPTHS_DEFAULT[:-1] == S.VAE_STAGE_DEPTHS
    assert d._L_STAGE_KERNELS[:-1] == S.VAE_STAGE_KERNELS
    assert tuple(s for s, _ in d._L_UPSAMPLES) == S.VAE_UPSAMPLE_STRIDES
    assert (d._L_UPSAMPLES[-1][1], d._DIFF_STAGE5_DEPTH_DEFAULT, d._DIFF_STAGE5_KERNEL_DEFAULT) == (2, 8, (3, 7, 7))
    dec = inspect.signature(d.DiffusionVideoDecoder.__init__).parameters
    assert (dec["head_dim"].default, dec["patch_size"].default, dec["default_num_inference_steps"].default) == (
        S.VAE_HEAD_DIM, S.VAE_PATCH, S.VAE_STEPS)


@pytest.mark.slow
@pytest.mark.ltx2
@pytest.mark.usefixtures("ltx2_core")
def test_stage_shapes_are_what_ltx2s_decoder_hands_its_na(monkeypatch):
    """LTX-2's decoder with the default stage layout at narrow widths: the (T, H, W) and kernel of
    every NA call it makes, and how many, match na_stages()."""
    from ltx_core.model.video_vae.diffusion_video_decoder import DiffusionVideoDecoder

    from backends.runtime import ltx2

    monkeypatch.setattr(S, "VAE_HEAD_DIM", 16)
    monkeypatch.setattr(S, "VAE_STAGE_CHANNELS", (128, 64, 32, 32))
    monkeypatch.setattr(S, "VAE_STAGE5", (16, 8, (3, 7, 7)))
    torch.manual_seed(0)
    decoder = ltx2.wake_zero_tables(DiffusionVideoDecoder(in_channels=8, head_dim=16,
                                                          stage_channels=(128, 64, 32, 32, 16)).eval())
    seen: list = []

    def record(attn, q, k, v):
        seen.append((tuple(q.shape[1:4]), q.shape[4], tuple(attn.kernel_size)))
        from ltx_core.model.video_vae.transformer.fallback_na import EagerSdpaAttention
        return EagerSdpaAttention()(attn, q, k, v)

    for m in decoder.modules():
        if type(m).__name__ == "NeighborhoodAttention3D":
            m.attention_function = record
    shapes = RunShapes(256, 224, 17)  # a latent above the decoder's minimum tile: no edge padding
    with torch.inference_mode():
        decoder(torch.randn(1, 8, *shapes.latent), generator=torch.Generator().manual_seed(1))
    want = [(s.thw, s.heads, s.kernel) for s in shapes.na_stages() for _ in range(s.calls)]
    assert sorted(seen) == sorted(want)
