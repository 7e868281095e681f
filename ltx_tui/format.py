"""How option values read on screen, shared by `--check`'s text and the app. No textual."""

from __future__ import annotations

from typing import Any


def show_value(value: Any) -> str:
    """An option value as the user writes it: `-` for none, `true`, `0,1`, `0.1`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
