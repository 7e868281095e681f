"""Usage checks and the JSON of a usage error, shared by `ltx-tui`, `ltx-tui run` and `ltx-tui runs` (headless)."""

from __future__ import annotations

import argparse
import json

from backends.config.options import OPTIONS_BY_KEY, SCHEMA_VERSION
from backends.version import TOOL_VERSION

EXIT_USAGE = 2  # every ltx-tui command's exit code for a usage error or a file it cannot read

WANTED = {"explain": "an option key, one of " + ", ".join(OPTIONS_BY_KEY),
          "capability": "a preset id (--list-capabilities) or a capability JSON file, or leave it out for this machine",
          "ledger": "a JSONL file, or leave --ledger out for the default",
          "profile": "a TOML profile file, or leave --profile out for the default profile"}


def refuse_empty(parser: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """A usage error for an option of `names` given an empty value (taken for a missing one before)."""
    for name in names:
        if getattr(args, name) == "":
            parser.error(f"--{name} was given an empty value; name {WANTED[name]}")


def profile_fields(e) -> dict:
    """A ProfileError's first problem as fields (`file`, `line`, `key`, `problem`, `fix`, where known);
    `more` (where there are): the file's other problems, the same fields."""
    fields = lambda p: {k: v for k, v in (("file", p.path), ("line", p.line), ("key", p.key), ("problem", p.problem),
                                          ("fix", p.hint)) if v is not None}
    return dict(fields(e), more=[fields(m) for m in e.more] or None)


def error_json(kind: str, message: str, fields: dict | None = None, code: int = EXIT_USAGE) -> str:
    """The JSON of a usage error (or with `code` another that ends the command): `message` as printed,
    and where known the fields a script reads (`file`, `line`, `key`, `problem`, `fix`)."""
    error = {"kind": kind, "message": message, **{k: v for k, v in (fields or {}).items() if v is not None}}
    return json.dumps({"schema_version": SCHEMA_VERSION, "tool_version": TOOL_VERSION,
                       "error": error, "exit_code": code}, indent=2)
