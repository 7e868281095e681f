"""What torch.compile did not compile: graph breaks, and graphs that ran eagerly instead.

ltx-tui runs Dynamo with `suppress_errors` (`runtime.ltx2.DYNAMO_SETTINGS`): a graph Inductor
cannot build runs eagerly rather than ending a decode. Silent, that would let a smoke check or a
tune time eager code as compiled, so it is counted: Dynamo logs each error it suppresses as a
warning of `torch._dynamo.convert_frame` (one record per frame that then runs eagerly), and
counts graph breaks in `torch._dynamo.utils.counters["graph_break"]` and the graphs it compiled
in `counters["stats"]["unique_graphs"]`. A frame Dynamo skips whole (a graph break it cannot
resume from) is logged below warning level and counted nowhere else: after forwards that should
have compiled, no compiled graph at all says so. A `CompileWatch` reports what happened in this
process since it started (the counts are process-wide).
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

    def emit(self, record: logging.LogRecord) -> None:  # called under the handler's lock
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


def _counts() -> tuple[int, int]:
    """(graph breaks, graphs compiled) so far in this process."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


@dataclass(frozen=True)
class CompileHealth:
    """Since a watch started: graph breaks, frames that ran eagerly, the reasons Dynamo gave, the
    graphs compiled (a graph served from the compile caches counts: Dynamo traced it)."""

    graph_breaks: int
    eager: int
    reasons: tuple[str, ...] = ()
    graphs: int = 0

    @property
    def compiled(self) -> bool:
        """Something compiled and nothing fell back to eager (read after the forwards)."""
        return self.eager == 0 and self.graphs > 0

    def __str__(self) -> str:
        text = f"{self.graphs} graph(s) compiled, {self.graph_breaks} graph break(s), {self.eager} ran eagerly"
        return text + (f" ({self.reasons[0]})" if self.reasons else "")


class CompileWatch:
    """Counts from now on (`health()`)."""

    def __init__(self) -> None:
        self._handler = _installed()
        with self._handler.lock:
            self._eager0 = self._handler.count
        self._breaks0, self._graphs0 = _counts()

    def health(self) -> CompileHealth:
        h = self._handler
        with h.lock:  # a thread logging meanwhile must not change the deque under us
            reasons = tuple(text for n, text in h.reasons if n > self._eager0)
            eager = h.count - self._eager0
        breaks, graphs = _counts()
        return CompileHealth(breaks - self._breaks0, eager, reasons, graphs - self._graphs0)
