"""Reading a small user file safely (regular files only, with a size bound, nesting bounded),
and writing an output file as the user means it.

Reading: a FIFO would block the reader, a device (/dev/zero) or a huge file would fill memory;
each is refused with a message that says what the path is instead.

Writing (`write_atomically`, every writer's one helper): a device or a FIFO is written through
(opened and written, never replaced; `/dev/stdout` and `/dev/fd/N` write to that descriptor); a
directory or a socket is refused; a regular file is replaced only when asked (`overwrite`), as
a whole (a temporary file in its directory, fsync, rename), keeping its mode; a symlink's target
is written, the link kept; a new file gets the umask's mode.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shlex
import stat
import sys
from pathlib import Path
from typing import Any


class FileProblem(Exception):
    """The path cannot be read as a small regular file; the message says why, `kind` in a word
    (missing, dangling, permission, directory, special, binary, too-large, unreadable) for a caller's hint."""

    def __init__(self, message: str, kind: str = "unreadable") -> None:
        super().__init__(message)
        self.kind = kind


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
        if os.path.islink(path):
            end = os.path.realpath(path)  # the end of a chain of links, the one that is missing
            raise FileProblem(f"is a symbolic link to {end}, which does not exist", "dangling") from None
        raise FileProblem("file not found", "missing") from None
    except PermissionError:
        raise FileProblem("permission denied", "permission") from None
    except OSError as e:
        raise FileProblem(f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileProblem(f"is {_kind(st.st_mode)}, not a regular file",
                          "directory" if stat.S_ISDIR(st.st_mode) else "special")
    if st.st_size > limit:
        raise FileProblem(f"is {st.st_size:,} bytes; at most {limit:,} are read", "too-large")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except PermissionError:
        raise FileProblem("permission denied", "permission") from None
    except OSError as e:
        raise FileProblem(f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise FileProblem(f"is larger than {limit:,} bytes (it grew while being read)", "too-large")
    return data


def too_deep(value: Any, limit: int) -> bool:
    """Whether parsed TOML/JSON `value` nests lists/tables more than `limit` levels (walked without
    recursion: a deeply nested file must not crash whoever walks it next)."""
    level = [value]
    for _ in range(limit + 1):
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())
                 if isinstance(v, (dict, list))]
        if not level:
            return False
    return True


class OutputError(OSError):
    """`path` cannot be written as asked; `str()` names the path and says why (also `strerror`)."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        super().__init__(problem)
        self.filename, self.strerror = str(path), problem

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class OutputExists(OutputError, FileExistsError):
    """`path` is an existing regular file and replacing it was not asked for."""


# paths that name one of this process's file descriptors (opening them anew would not do)
_FD_PATH = re.compile(r"/dev/(?:std(in|out|err)|fd/(\d+))|/proc/(?:self|thread-self|(\d+))/fd/(\d+)")


def _descriptor(path: str | os.PathLike) -> int | None:
    """The file descriptor `path` stands for (`/dev/stdout`, `/dev/fd/3`, a symlink to one), or None."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's limit on a chain of symlinks
        if m := _FD_PATH.fullmatch(p):
            std, fd, pid, pid_fd = m.groups()
            if pid is not None and int(pid) != os.getpid():
                return None
            return ("in", "out", "err").index(std) if std else int(fd or pid_fd)
        try:
            link = os.readlink(p)
        except OSError:
            return None
        p = os.path.normpath(os.path.join(os.path.realpath(os.path.dirname(p)), link))
    return None


def _through(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode)


def check_output(path: str | os.PathLike, *, overwrite: bool) -> os.stat_result | None:
    """What `path` is now (None: nothing there yet); raises what `write_atomically` would:
    OutputError for a directory, a socket or the like, OutputExists for a regular file when not
    `overwrite`. A device, a FIFO or one of this process's descriptors is always fine."""
    if _descriptor(path) is not None:
        return None
    try:
        st = os.stat(path)  # follows symlinks: the target is what gets written
    except (FileNotFoundError, NotADirectoryError):
        folder = os.path.dirname(os.path.realpath(path))
        if os.path.isdir(folder):
            return None
        if os.path.lexists(folder):
            raise OutputError(path, f"{folder} is not a folder; give a path in a folder") from None
        given = os.path.dirname(os.path.abspath(path))
        link = f" ({given} is a symlink to it)" if given != folder and os.path.islink(given) else ""
        raise OutputError(path, f"its folder {folder} does not exist{link}; create it (mkdir -p "
                          f"{shlex.quote(folder)}) or give a path in an existing folder") from None
    if stat.S_ISREG(st.st_mode):
        if not overwrite:
            raise OutputExists(path, "exists")
    elif not _through(st):
        raise OutputError(path, f"is {_kind(st.st_mode)}; give the path of a file"
                          + (" in it" if stat.S_ISDIR(st.st_mode) else ""))
    return st


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (symlinks followed, hard links included); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_through(path: str | os.PathLike, data: bytes, wait: bool) -> None:
    """Write into a device or FIFO; without `wait` a FIFO nobody reads is an error, not a hang."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | (0 if wait else os.O_NONBLOCK))
    except OSError as e:
        if e.errno == errno.ENXIO and not wait:
            raise OutputError(path, "is a FIFO nobody reads; start its reader (e.g. `cat FILE`), then write "
                              "again") from None
        raise
    try:
        if not _through(os.fstat(fd)):  # replaced between the check and the open: never write into it
            raise OutputError(path, "changed while being opened; write again")
        os.set_blocking(fd, True)
        _write_fd(fd, data)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike, data: bytes, *, overwrite: bool, wait: bool = True) -> None:
    """Write `data` to `path` as described at the top of this module. A regular file is a
    complete file or none, and without `overwrite` an existing one is never replaced, even one
    that appears meanwhile (OutputExists). `wait`: a FIFO's writer waits for its reader."""
    fd = _descriptor(path)
    if fd is not None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _write_fd(fd, data)
        return
    st = check_output(path, overwrite=overwrite)
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(path, data, wait)
        return
    target = Path(os.path.realpath(path))
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    # a new file: 0666 less the umask, as the kernel applies it; an existing one keeps its mode
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666 if st is None else 0o600)
    try:
        with os.fdopen(out, "wb") as f:
            if st is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # fails if the file appeared meanwhile: never a silent overwrite
            except FileExistsError:
                raise OutputExists(path, "exists") from None
            os.unlink(tmp)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
