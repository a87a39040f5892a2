"""Two fidelities of one measurement: the target workload and the proxy a study screens on.

The space's ``workload`` is the *target*: what the deployment serves, and what a
recommendation is judged on. Measuring every configuration on it is expensive (the
reference campaign's full sweep is five 2048-token burst levels), so a study screens on a
*proxy*: a subset of the target's levels, chosen to keep what decides the ranking at the
top, and measures its leaders on the rest of the target's levels in the same launch.

Why a subset of levels, not shorter requests. A sweep with shorter replies (the project's
earlier default, C=256 at 1024 tokens) never fills the KV pool, so it cannot see
``--mem-fraction-static`` or ``--max-running-requests``: two configurations 16% apart on
the target measured the same on it. Tokens in flight against the KV pool are what decide
the top of the ranking, so the proxy keeps the target's heaviest level (most tokens in
flight) at its full lengths, plus the single-stream level (for the floor constraint and
for pruning), and drops the middle levels. Its value is the objective over the levels it
measured, which for a peak objective is a lower bound of the target value on the same
scale, equal to it where the peak sits at the heaviest level (the common case: the
reference space's best peaks at C=256). Promoting a trial to the target then costs only
its missing levels, not another start-up.

How the default was chosen (``python benchmarks/proxy_choice.py``): candidate proxies are
judged by their top-end regret over random and near-best configurations of a space, not by
rank correlation (a Spearman of 0.94 over random configurations hid the 16% miss above).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from tuner.workload import Workload

Fidelity = Literal["proxy", "target"]
#: Trial attribute naming the fidelity a trial's value was measured at.
FIDELITY_ATTR = "fidelity"


def heaviest_level(target: Workload) -> int:
    """The level with the most tokens in flight (concurrency x (prompt + reply))."""
    multi = [c for c in target.levels if c > 1] or list(target.levels)

    def tokens(c: int) -> float:
        prompt, output = target.mean_lengths(c)
        return c * (prompt + output)

    return max(multi, key=lambda c: (tokens(c), c))


def derive_proxy(target: Workload) -> Workload:
    """The default proxy of a target: its single-stream level (when it has one) and its
    heaviest level, everything else as the target has it. A target of one or two levels
    is its own proxy."""
    keep = {heaviest_level(target)}
    open_loop = target.kind == "poisson" or (target.kind == "trace" and target.trace_mode == "open")
    if 1 in target.levels and not open_loop:  # open-loop levels are rates, not concurrency
        keep.add(1)
    return target.model_copy(update={"levels": tuple(sorted(keep))})


def remaining_levels(target: Workload, measured: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The target's levels a trial has not measured yet, lowest first."""
    done = set(measured)
    return tuple(c for c in target.levels if c not in done)


def is_subset(proxy: Workload, target: Workload) -> bool:
    """Whether a trial measured on ``proxy`` can be completed to ``target`` in the same
    launch: same requests per level, proxy levels among the target's."""
    same = proxy.model_copy(update={"levels": target.levels})
    return set(proxy.levels) <= set(target.levels) and same == target


def proxy_of(target: Workload, setting: Literal["auto", "none"] | Workload, base: Path) -> Workload:
    """The proxy a space's ``proxy:`` setting names: derived (``auto``), the target itself
    (``none``), or a workload of its own (trace paths relative to ``base``)."""
    if setting == "auto":
        return derive_proxy(target)
    if setting == "none":
        return target
    assert isinstance(setting, Workload)
    return setting.resolved(base)


def screening_order(proxy: Workload, target: Workload) -> tuple[int, ...] | None:
    """The order a screened trial measures its levels in: the proxy's, then the rest of the
    target's (a promotion continues in the same launch); None when the proxy is no subset
    of the target (a confirmation then needs a launch of its own)."""
    if not is_subset(proxy, target):
        return None
    return (*proxy.levels, *remaining_levels(target, proxy.levels))
