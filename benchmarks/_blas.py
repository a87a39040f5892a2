"""Pin OpenBLAS's kernels for every benchmark process; imported before numpy is.

A study is chaotic in its inputs: the additive model's least squares (numpy -> OpenBLAS)
round differently with each CPU's kernels, a near-tie between two moves then goes the other
way, and from there the study is another study. On an AVX-512 machine the reference space's
20 seeds gave 8 within 2% of the best; the same code and seeds with OpenBLAS's Haswell
kernels gave 14 (benchmarks/search_efficiency.py, 2026-12). Haswell's kernels (AVX2) run on
every x86-64 machine of the last decade, so with them a benchmark figure is the same on any
of them. Set ``OPENBLAS_CORETYPE`` yourself to run another kernel; other architectures
ignore it. Worker processes (joblib) inherit it; a process that loaded numpy before this
module (a test importing a benchmark) keeps the kernels it has, its workers get these.
"""

from __future__ import annotations

import os

#: OpenBLAS kernel set the benchmarks run with (see the module docstring).
CORETYPE = "Haswell"

os.environ.setdefault("OPENBLAS_CORETYPE", CORETYPE)


def coretype() -> str:
    """The kernel set this process runs with."""
    return os.environ["OPENBLAS_CORETYPE"]
