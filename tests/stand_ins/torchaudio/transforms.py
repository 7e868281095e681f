"""``torchaudio.transforms`` of the test-only stand-in: every attribute raises when called."""

from __future__ import annotations


def __getattr__(name: str) -> object:
    if name.startswith("_"):
        raise AttributeError(name)
    from . import _unavailable

    return _unavailable(f"torchaudio.transforms.{name}")
