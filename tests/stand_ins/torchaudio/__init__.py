"""Test-only stand-in for ``torchaudio`` (no wheel exists for torch 2.13).

LTX-2 v1.2.0's ``ltx_core.model.audio_vae.ops`` imports torchaudio at import time but only
calls it to turn an input waveform into a mel spectrogram (``AudioProcessor``: audio
conditioning, e.g. ``a2vid_two_stage``, retake/dub-it with audio). Generation pipelines
(``distilled``, ``ti2vid_*``) never call it. Put ``tests/stand_ins`` on ``sys.path`` only when
the real package is missing; any actual use raises instead of computing something wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from . import functional, transforms

__all__ = ["functional", "transforms"]
STAND_IN = True


def __getattr__(name: str) -> object:
    if name.startswith("_"):
        raise AttributeError(name)
    return _unavailable(f"torchaudio.{name}")


def _unavailable(qualname: str) -> Callable[..., NoReturn]:
    def call(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(
            f"{qualname} was called, but this torchaudio is ltx-tui's test stand-in "
            "(tests/stand_ins/torchaudio): it only lets LTX-2 import. Install a real torchaudio "
            "matching your torch to use audio input."
        )

    call.__qualname__ = qualname
    return call
