"""What torch.compile did not compile: graph breaks, and graphs that ran eagerly instead.

ltx-tui runs Dynamo with `suppress_errors` (`runtime.ltx2.DYNAMO_SETTINGS`): a graph Inductor
cannot build runs eagerly rather than ending a decode. Silent, that would let a smoke check or a
tune time eager code as compiled, so it is counted: Dynamo logs each error it suppresses as a
warning of `torch._dynamo.convert_frame` (one record per frame that then runs eagerly), and
counts graph breaks in `torch._dynamo.utils.counters["graph_break"]`. A `CompileWatch` reports
what happened in this process since it started (the counts are process-wide).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

DYNAMO_LOGGER = "torch._dynamo.convert_frame"
KEPT_REASONS = 8


class _Suppressed(logging.Handler):
    """Counts Dynamo's suppressed-error warnings and keeps the last few first lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.reasons: deque[tuple[int, str]] = deque(maxlen=KEPT_REASONS)

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        lines = [ln.strip() for ln in record.getMessage().splitlines() if ln.strip()]
        exc = record.exc_info[1] if record.exc_info else None
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())}".split(" Set TORCHDYNAMO_VERBOSE")[0] if exc else ""
        text = ": ".join(x for x in (lines[0] if lines else "", why) if x) or "no message"
        self.reasons.append((self.count, text[:300]))


_handler: _Suppressed | None = None
_lock = threading.Lock()


def _installed() -> _Suppressed:
    global _handler
    with _lock:
        if _handler is None:
            _handler = _Suppressed()
            logging.getLogger(DYNAMO_LOGGER).addHandler(_handler)
        return _handler


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


@dataclass(frozen=True)
class CompileHealth:
    """Since a watch started: graph breaks, frames that ran eagerly, the reasons Dynamo gave."""

    graph_breaks: int
    eager: int
    reasons: tuple[str, ...] = ()

    @property
    def compiled(self) -> bool:
        """Nothing fell back to eager."""
        return self.eager == 0

    def __str__(self) -> str:
        text = f"{self.graph_breaks} graph break(s), {self.eager} graph(s) ran eagerly"
        return text + (f" ({self.reasons[0]})" if self.reasons else "")


class CompileWatch:
    """Counts from now on (`health()`)."""

    def __init__(self) -> None:
        self._handler = _installed()
        self._eager0 = self._handler.count
        self._breaks0 = _graph_breaks()

    def health(self) -> CompileHealth:
        h = self._handler
        reasons = tuple(text for n, text in h.reasons if n > self._eager0)
        return CompileHealth(_graph_breaks() - self._breaks0, h.count - self._eager0, reasons)
