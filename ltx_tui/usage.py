"""Usage checks the command lines of `ltx-tui`, `ltx-tui run` and `ltx-tui runs` share (headless)."""

from __future__ import annotations

import argparse

WANTED = {"explain": "an option key (ltx-tui --help lists the options; e.g. diffvae.mode)",
          "capability": "a preset id (--list-capabilities) or a capability JSON file, or leave it out for this machine",
          "ledger": "a JSONL file, or leave --ledger out for the default"}


def refuse_empty(parser: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """A usage error for an option of `names` given an empty value (taken for a missing one before)."""
    for name in names:
        if getattr(args, name) == "":
            parser.error(f"--{name} was given an empty value; name {WANTED[name]}")
