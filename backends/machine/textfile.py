"""Reading a small user file safely (regular files only, with a size bound), and writing one
atomically.

A FIFO would block the reader, a device (/dev/zero) or a huge file would fill memory; each is
refused with a message that says what the path is instead.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class FileProblem(Exception):
    """The path cannot be read as a small regular file; the message says why."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them; FileProblem otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileProblem("file not found") from None
    except PermissionError:
        raise FileProblem("permission denied") from None
    except OSError as e:
        raise FileProblem(f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileProblem(f"is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise FileProblem(f"is {st.st_size:,} bytes; at most {limit:,} are read")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except PermissionError:
        raise FileProblem("permission denied") from None
    except OSError as e:
        raise FileProblem(f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise FileProblem(f"is larger than {limit:,} bytes (it grew while being read)")
    return data


def write_atomically(path: Path, data: bytes, *, overwrite: bool) -> None:
    """Write `data` to `path`: a complete file or none (a temporary file, fsync, then rename).
    Without `overwrite` an existing file is never replaced, even one that appears meanwhile."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if path appeared meanwhile: never a silent overwrite
            except FileExistsError:
                raise FileExistsError(f"{path}: already exists") from None
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
