"""Prompt and reply lengths of the simulated chat workload.

Chat prompts end on their own: a reply's natural length is drawn from a log-normal
distribution and then cut at the request's ``max_tokens`` (unless ``ignore_eos``).
"""

from __future__ import annotations

import numpy as np

#: Median natural reply length (tokens). Calibrated to the reference sweep, where
#: requests with max_tokens=2048 generated ~1,600 tokens on average: with the spread
#: below, E[min(X, 2048)] = 1,592.
CHAT_REPLY_MEDIAN_TOKENS = 1700
#: Log-space standard deviation of reply lengths (same calibration target).
CHAT_REPLY_SIGMA = 0.5


def reply_lengths(
    rng: np.random.Generator, n: int, max_tokens: int | np.ndarray, ignore_eos: bool
) -> np.ndarray:
    """Output token counts of ``n`` requests (``max_tokens``: one cap, or one per request)."""
    if ignore_eos:
        return np.broadcast_to(np.asarray(max_tokens, dtype=np.int64), (n,)).copy()
    natural = rng.lognormal(np.log(CHAT_REPLY_MEDIAN_TOKENS), CHAT_REPLY_SIGMA, n)
    return np.clip(np.rint(natural), 1, max_tokens).astype(np.int64)
