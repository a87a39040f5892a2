"""Per-request measurement records: the one data shape every backend produces.

The simulator, the emulator and a real server measured over HTTP all yield the
same records, so the metrics of a level are computed by one piece of code
(:mod:`tuner.metrics`) whatever produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: ``RequestRecord.error`` of a request cut when its closed-loop window closed.
CUT_AT_WINDOW_END = "cut-at-window-end"


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it. Times are seconds on one monotonic clock.

    ``token_times`` holds the arrival time of each output token (or of each chunk,
    when a server streams several tokens per chunk, in which case ``output_tokens``
    is larger than ``len(token_times)``). ``error`` is ``None`` for a request that
    finished normally, :data:`CUT_AT_WINDOW_END` for one still streaming when a
    closed-loop window closed (its tokens inside the window count, it is no failure).
    """

    start: float
    end: float | None = None
    first_token: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    token_times: np.ndarray | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None


@dataclass(slots=True)
class LevelRecords:
    """All requests of one concurrency level, plus the level's wall-clock window.

    ``window``: the level measured a window of a steady load (closed loop): its throughput
    counts the tokens streamed inside [``started``, ``ended``], whether or not their request
    finished inside it; otherwise the tokens of finished requests over the whole level.
    """

    concurrency: int
    records: Sequence[RequestRecord]
    started: float
    ended: float
    max_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    window: bool = False
    #: Set on a burst level stopped before it drained (:mod:`tuner.level_watch`): the
    #: projected throughput of the whole level, which its metrics report; the records are
    #: those up to the stop (``ended``), as a closed-loop window's are.
    projected_tok_s: float | None = None
