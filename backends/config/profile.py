"""TOML profiles, schema v1: strict reading with errors that say where and how to fix,
deterministic atomic writing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from backends.machine import textfile
from backends.machine.text import printable
from backends.version import TOOL_VERSION
from backends.machine.textfile import FileProblem, read_bounded, too_deep

from backends.config.options import (
    OPTIONS,
    OPTIONS_BY_KEY,
    SCHEMA_VERSION,
    SECTIONS,
    Generated,
    InvalidValue,
    Profile,
    suggest,
    type_name,
)

MAX_BYTES = 1024 * 1024  # a profile is a few hundred bytes; anything past 1 MiB is not one
MAX_NESTING = 16  # a profile nests [table] key = [array]: 2 levels
GENERATED_KEYS = ("tool_version", "time", "capability_fingerprint", "capability_source")


class ProfileError(Exception):
    """A profile that cannot be read; `str()` names file, line, key, value, what is allowed, a fix;
    `more`: the file's other problems, each a line of `str()` after the first."""

    def __init__(self, path: str | os.PathLike, problem: str, *, line: int | None = None,
                 key: str | None = None, hint: str | None = None, more: tuple[ProfileError, ...] = ()) -> None:
        self.path, self.line, self.key, self.problem, self.hint = str(path), line, key, problem, hint
        self.more = more
        where = self.path + (f":{line}" if line else "")
        text = f"{where}: " + (f"{key}: " if key else "") + problem + (f" ({hint})" if hint else "")
        # paths and keys may hold control characters
        super().__init__("\n".join([printable(text), *(str(m) for m in more)]))


class ProfileExistsError(FileExistsError):
    """Saving would overwrite a file and `overwrite=True` was not given."""


@dataclass(frozen=True)
class ProfileWarning:
    path: str
    message: str

    def __str__(self) -> str:
        return printable(f"{self.path}: warning: {self.message}")


# --- reading --------------------------------------------------------------------------------

def _header(name: str) -> str:
    """`name` as a TOML table header: [diffvae], or quoted when it is not a bare key (["[red]x[/]"])."""
    return f"[{name}]" if re.fullmatch(r"[A-Za-z0-9_\-]+", name) else f"[{json.dumps(name)}]"


def _line_of(text: str, table: str | None, key: str | None) -> int | None:
    """Best-effort line number of `[table]` or of `key` inside it."""
    current: str | None = None
    name = r"(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[A-Za-z0-9_.\-]+)"  # quoted (any characters) or bare
    header = re.compile(rf"^\s*\[\s*{name}\s*\]")
    assign = re.compile(rf"^\s*{name}\s*=")
    for number, line in enumerate(text.splitlines(), 1):
        if m := header.match(line):
            current = m.group(1).strip("\"'")
            if current == (table if key is None else f"{table}.{key}"):  # [table], or [table.key] for a key
                return number
            continue
        if key is not None and current == table and (m := assign.match(line)) and m.group(1).strip("\"'") == key:
            return number
    return None


def parse(data: dict[str, Any], path: str | os.PathLike = "<profile>", text: str = "") -> tuple[Profile, list[ProfileWarning]]:
    """A Profile from parsed TOML data; raises ProfileError on the first bad entry, the others after
    it in its `more`."""
    warnings: list[ProfileWarning] = []
    errors: list[ProfileError] = []

    def fail(problem: str, *, table: str | None = None, key: str | None = None, hint: str | None = None) -> None:
        line = _line_of(text, table, key) if text else None
        keypath = ".".join(x for x in (table, key) if x) or None
        errors.append(ProfileError(path, problem, line=line, key=keypath, hint=hint))

    version = data.get("schema_version")
    if not data:
        warnings.append(ProfileWarning(str(path), "the file holds no settings: every option takes its default "
                                                  "(ltx-tui's export writes a whole profile)"))
    elif version is None:
        warnings.append(ProfileWarning(str(path), "no schema_version; reading it as schema_version = 1"))
    elif isinstance(version, bool) or not isinstance(version, int):
        fail(f"expected an integer, found {type_name(version)}", key="schema_version",
             hint=f"write schema_version = {SCHEMA_VERSION}")
    elif version > SCHEMA_VERSION:
        fail(f"schema_version {version} is newer than this ltx-tui understands ({SCHEMA_VERSION})",
             key="schema_version", hint="upgrade ltx-tui (git pull, then the README's install line), or re-export the profile with this one")
    elif version < 1:
        fail(f"schema_version {version} is not valid; the first schema is 1", key="schema_version")

    if errors:  # a schema this ltx-tui does not read: its entries mean nothing yet
        raise errors[0]
    allowed_top = ["schema_version", "generated", *SECTIONS]
    values: dict[str, Any] = {}
    for top, body in data.items():
        if top not in allowed_top and isinstance(body, dict):
            hint = suggest(top, [*SECTIONS, "generated"]) or f"known tables: {', '.join(SECTIONS)}, generated"
            fail(f"unknown table {_header(top)}", table=top, hint=hint)
            continue
        if top not in allowed_top:
            hint = suggest(top, ["schema_version"]) or (
                f"the only key outside a table is schema_version; options go in their tables ({', '.join(SECTIONS)})")
            fail(f"unknown key {top!r} outside any table", key=top, hint=hint)
            continue
        if top in ("schema_version",):
            continue
        if not isinstance(body, dict):
            fail(f"expected a table [{top}], found {type_name(body)}", key=top)
            continue
        if top == "generated":
            continue
        names = [o.name for o in OPTIONS if o.section == top]
        for name, value in body.items():
            key = f"{top}.{name}"
            if key not in OPTIONS_BY_KEY:
                elsewhere = [o.key for o in OPTIONS if o.name == name]
                hint = suggest(name, names) or (f"it belongs in [{elsewhere[0].split('.')[0]}]" if elsewhere
                                                 else f"keys of [{top}]: {', '.join(names)}")
                fail(f"unknown key {name!r} in [{top}]", table=top, key=name, hint=hint)
                continue
            try:
                values[key] = OPTIONS_BY_KEY[key].convert(value)
            except InvalidValue as e:
                fail(e.problem, table=top, key=name, hint=e.hint)
    profile = Profile()
    if values and not errors:  # an invariant across options is checked on values that each are valid
        try:
            profile = profile.replace(**values)
        except InvalidValue as e:
            table, _, name = e.key.partition(".")
            fail(e.problem, table=table, key=name, hint=e.hint)
    if errors:
        first, *more = sorted(errors, key=lambda e: (e.line is None, e.line or 0))  # by line, unknown last
        raise ProfileError(first.path, first.problem, line=first.line, key=first.key, hint=first.hint,
                           more=tuple(more))
    gen = data.get("generated")
    if isinstance(gen, dict):
        extra = [k for k in gen if k not in GENERATED_KEYS]
        if extra:
            warnings.append(ProfileWarning(str(path), f"[generated] has unknown key(s) {', '.join(extra)}; ignored"))
        profile = dataclasses.replace(profile, generated=Generated(
            tool_version=str(gen.get("tool_version", "")), time=str(gen.get("time", "")),
            capability_fingerprint=gen.get("capability_fingerprint"), capability_source=gen.get("capability_source")))
    return profile, warnings


def _hint(path: Path, kind: str) -> str | None:
    """The fix for a profile path that cannot be read (FileProblem.kind)."""
    if kind == "directory":
        try:
            names = sorted(str(f) for f in path.iterdir() if f.suffix == ".toml" and f.is_file())
        except OSError:
            names = []
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return (f"pass one of its .toml files: {shown}" if names else
                "it holds no .toml file: pass the profile's file, or run `ltx-tui` to create one")
    return {"missing": "check the path, or run `ltx-tui` to create a profile",
            "dangling": "point the link at the profile, or pass the profile's own path",
            "permission": "check the file's permissions",
            "too-large": "a profile is a few hundred bytes of TOML: check that this is the profile's file"}.get(kind)


_KEY_LINE = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_TABLE_LINE = re.compile(r"\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")


def _set_twice(text: str, line: int | None) -> tuple[str, int] | None:
    """(dotted key, its first line) where line `line` of `text` sets again a plain `key = value` that
    an earlier line of the same table set; None where that is not surely what it is (the key is
    checked against what tomllib reads of the lines before)."""
    lines = text.splitlines()
    if not line or line > len(lines) or not (m := _KEY_LINE.match(lines[line - 1])):
        return None
    key, table, first, open_string = m.group(1), (), None, None
    for n, s in enumerate(lines[: line - 1], start=1):
        if open_string:  # a line of a multi-line string
            open_string = None if s.count(open_string) % 2 else open_string
            continue
        if header := _TABLE_LINE.match(s):
            if header.group(1) == "[[":  # an array of tables: which one is the key's is not this simple
                return None
            table, first = tuple(part.strip().strip("\"'") for part in header.group(2).split(".")), None
        elif (k := _KEY_LINE.match(s)) and k.group(1) == key:
            first = n
        open_string = next((q for q in ('"""', "'''") if s.count(q) % 2), None)
    try:
        data = tomllib.loads("\n".join(lines[: line - 1]))
        for part in table:
            data = data[part]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        return None
    if first is None or not isinstance(data, dict) or key not in data:
        return None
    return ".".join((*table, key)), first


def _line_key(lines: list[str], line: int) -> str | None:
    """The dotted key that line `line` sets (its table from the last plain header above), if it reads
    as `key = ...`."""
    if not line or line > len(lines) or not (m := _KEY_LINE.match(lines[line - 1])):
        return None
    table = next((h.group(2) for s in reversed(lines[: line - 1]) if (h := _TABLE_LINE.match(s)) and h.group(1) == "["),
                 None)
    return m.group(1) if table is None else f"{table.strip()}.{m.group(1)}"


def _syntax(text: str, line: int | None, problem: str) -> tuple[str, str | None, str | None]:
    """(problem, key, fix) for tomllib's `problem` at `line`, in a profile's words where the slip is a
    common one (a string not closed or not quoted, a capitalised boolean, a table declared twice)."""
    lines = text.splitlines()
    key = _line_key(lines, line) if line else None
    if m := re.fullmatch(r"Cannot declare \((.*)\) twice", problem):
        name = ".".join(part.strip().strip("'\"") for part in m.group(1).split(",") if part.strip())
        return f"the table [{name}] is declared twice", None, f"keep one [{name}] header and put all its keys under it"
    value = lines[line - 1].split("=", 1)[1].split("#", 1)[0].strip() if key else ""
    leaf = key.rpartition(".")[2] if key else ""
    if value[:1] in ("'", '"') and (len(value) < 2 or value[-1] != value[0]):
        return f"the string {value} is not closed", key, f"close it: {leaf} = {value}{value[0]}"
    if problem == "Invalid value" and value.lower() in ("true", "false") and value not in ("true", "false"):
        return f"{value} is not a TOML boolean", key, f"write it in lower case: {leaf} = {value.lower()}"
    if problem == "Invalid value" and re.fullmatch(r"[A-Za-z_][\w.+-]*", value):
        return f"{value} is not a TOML value (a string needs quotes)", key, f'quote it: {leaf} = "{value}"'
    if problem.startswith("Expected '=' after a key"):
        return problem, None, 'each line is a key, "=", and a value (key = "value"), or a [table] header'
    return problem, key, None


def read(path: str | os.PathLike) -> tuple[Profile, list[ProfileWarning]]:
    """Read a profile file: (profile, warnings). Raises ProfileError for anything unusable."""
    p = Path(path)
    try:
        raw = read_bounded(p, MAX_BYTES)
    except FileProblem as e:
        raise ProfileError(p, str(e), hint=_hint(p, e.kind)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ProfileError(p, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", line=line,
                           hint="TOML files must be UTF-8; re-save the file as UTF-8") from None
    nested = ProfileError(p, f"arrays or tables nested more than {MAX_NESTING} levels deep; not a profile",
                          hint="a profile's values are strings, numbers, booleans and arrays of integers")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        problem = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
        line = int(m.group(1)) if m else getattr(e, "lineno", None)
        if line is None and msg.endswith("(at end of document)"):
            line = len(text.splitlines()) or None
        col = f", column {m.group(2)}" if m else ""
        bom = text.startswith("\ufeff") and line == 1  # tomllib reads a byte-order mark as a character
        twice = _set_twice(text, line) if problem == "Cannot overwrite a value" else None
        if twice:
            key, first = twice
            raise ProfileError(p, f"set twice (lines {first} and {line})", line=line, key=key,
                               hint="keep one of the two lines") from None
        problem, key, fix = _syntax(text, line, problem)
        raise ProfileError(p, f"TOML syntax error{col}: {problem}", line=line, key=key,
                           hint="the file starts with a byte-order mark (BOM); re-save it as UTF-8 without one"
                           if bom else fix) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise nested from None
    if too_deep(data, MAX_NESTING):
        raise nested
    return parse(data, p, text)


def load(path: str | os.PathLike) -> Profile:
    """Read a profile file (warnings dropped; use `read` to see them)."""
    return read(path)[0]


# --- writing --------------------------------------------------------------------------------

def to_data(profile: Profile, generated: Generated | None = None) -> dict[str, Any]:
    """The TOML document of a profile, in vocabulary order."""
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for section in SECTIONS:
        body: dict[str, Any] = {}
        for spec in (o for o in OPTIONS if o.section == section):
            value = profile.get(spec.key)
            if value is None:
                continue
            body[spec.name] = list(value) if isinstance(value, tuple) else (
                value.plain() if hasattr(value, "plain") else value)
        data[section] = body
    gen = generated or profile.generated
    if gen is not None:
        data["generated"] = {k: v for k, v in dataclasses.asdict(gen).items() if v is not None}
    return data


def dumps(profile: Profile, generated: Generated | None = None) -> str:
    return tomli_w.dumps(to_data(profile, generated))


def generated_for(capability: Any = None, now: datetime.datetime | None = None) -> Generated:
    """Provenance for a profile validated on `capability` (a backends.machine.capability.Capability)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return Generated(
        tool_version=TOOL_VERSION,
        time=now.replace(microsecond=0).isoformat(),
        capability_fingerprint=capability.fingerprint() if capability is not None else None,
        capability_source=capability.source if capability is not None else None,
    )


def save(profile: Profile, path: str | os.PathLike, *, capability: Any = None, overwrite: bool = False,
         wait: bool = True, now: datetime.datetime | None = None) -> Path:
    """Write `profile` with `textfile.write_atomically`: a regular file complete or not at all,
    replaced only with `overwrite` (ProfileExistsError otherwise), keeping its mode; a symlink's
    target; a device or FIFO written through (`wait`: for the FIFO's reader)."""
    p = Path(path)
    generated = generated_for(capability, now)
    body = dumps(profile, generated).encode("utf-8")
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory; give a file name such as {p / 'ltx-profile.toml'}")
    try:
        textfile.write_atomically(p, body, overwrite=overwrite, wait=wait)
    except textfile.OutputExists:
        raise ProfileExistsError(f"{p}: already exists; pass overwrite=True to replace it") from None
    return p
