"""ltx-tui's backend runtime: options, capability probe, rules, profiles.

Never imports textual. Importing this package does not import torch.
"""

from backends.capability import Capability, CapabilityError, load_capability, preset, probe
from backends.options import Profile
from backends.profile import ProfileError, load as load_profile, read as read_profile, save as save_profile
from backends.rules import Decision, Status, exit_code, resolve, summarize

__all__ = [
    "Capability", "CapabilityError", "Decision", "Profile", "ProfileError", "Status", "exit_code",
    "load_capability", "load_profile", "preset", "probe", "read_profile", "resolve", "save_profile", "summarize",
]
