"""Text from files, paths, NVML or users, made safe for a terminal and for a shell script.

`printable` shows control characters escaped (an ESC byte in a GPU name must not clear the
screen, a newline in a file name must not start a new line of a script); `shell_word` quotes a
string as one shell word.
"""

from __future__ import annotations

import re
import shlex

# C0 and C1 controls and DEL, Unicode line/paragraph separators, bidirectional overrides/isolates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")


def printable(text: str) -> str:
    """`text` on one line with every control character shown escaped (`\\x1b`, `\\n`, `\\u0085`, `\\u202e`);
    everything else, backslashes included, as it is."""
    return _UNSAFE.sub(lambda m: _escape(m.group()), text)


def printable_lines(text: str) -> str:
    """`text` a line at a time as `printable` shows it: its own line breaks kept (a message that lists
    several problems, one a line)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def shell_word(text: str) -> str:
    """`text` as one shell word: single-quoted where needed (shlex.quote), or bash's `$'...'` with
    escapes when it holds control characters (a pasted line then stays one line)."""
    if not _UNSAFE.search(text):
        return shlex.quote(text)
    body = "".join(_escape(c) if _UNSAFE.match(c) else {"\\": "\\\\", "'": "\\'"}.get(c, c) for c in text)
    return f"$'{body}'"
