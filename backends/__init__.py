"""ltx-tui's backend runtime: options, capability probe, rules, profiles, and applying them.

Never imports textual. Importing this package does not import torch: the parts that need it
(`apply_env`, `apply_profile`, `na3d`, `NeighborhoodAttention3D`, ...) load on first use.
"""

from importlib import import_module

from backends.machine.capability import Capability, CapabilityError, probe
from backends.machine.presets import load_capability, preset
from backends.config.options import Profile
from backends.config.profile import ProfileError, load as load_profile, read as read_profile, save as save_profile
from backends.config.plan import Plan, resolve
from backends.config.rules import Decision, Status, exit_code, summarize

_LAZY = {
    "apply_env": "backends.runtime.apply", "apply_profile": "backends.runtime.apply", "ApplyReport": "backends.runtime.apply",
    "ProfileNotRunnable": "backends.runtime.apply", "na3d": "backends.runtime.attention", "available_backends": "backends.runtime.attention",
    "NeighborhoodAttention3D": "backends.runtime.modules", "quantize_linears": "backends.runtime.quant",
    "ltx_args": "backends.ltx_args",
}

__all__ = [
    "Capability", "CapabilityError", "Decision", "Plan", "Profile", "ProfileError", "Status", "exit_code",
    "load_capability", "load_profile", "preset", "probe", "read_profile", "resolve", "save_profile", "summarize",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'backends' has no attribute {name!r}")
