"""The internal-error log: a traceback goes to a file, never to the terminal."""

from __future__ import annotations

import os
import sys
import tempfile
import traceback


def log_internal_error() -> str:
    """Write the current exception's traceback to a log file; returns its path."""
    fd, path = tempfile.mkstemp(prefix="ltx-tui-error-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(f"ltx-tui {' '.join(sys.argv[1:])}\n")
        traceback.print_exc(file=f)
    return path
