"""Start points of a space that lists none: the engine's defaults, once per layout that fits.

A space a person writes for their own host rarely comes with known-good configurations,
and a study that starts from random proposals spends its first trials learning what every
engine user knows: the engine's defaults run, and the parallel layout decides most of the
rest. So a space without ``start:`` is measured first at its *neutral point* (every
parameter at the engine's default where the space offers it as ``null``, else the middle
of its domain) and at that point with each other parallel layout the space allows (one
parameter changed at a time: TP8, PP8, TP4 PP2, TP8 EP8...), skipping what the engine's
rules reject and what the model's memory plan says cannot fit. The local walk of
:mod:`tuner.sampler` then starts from the best of them.
"""

from __future__ import annotations

from typing import Any

from tuner.failures import LaunchFailure
from tuner.space import Space

#: Share of the budget the generated start points may take (the reference space lists five
#: for a budget of 40: an eighth; layouts are fewer than the knobs a walk has to try).
MAX_BUDGET_SHARE = 0.25


def neutral(space: Space) -> dict[str, Any]:
    """The space's neutral configuration: each parameter at the engine's default where one
    of its values is that default (``null``, ``--ep-size 1``, one decode step, a switch
    off), else the middle of an ordered numeric domain, else its first value."""
    point: dict[str, Any] = {}
    for name, values in space.value_lists().items():
        default = _engine_default(space, name, values)
        if default is not _NONE:
            point[name] = default
        elif values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            ordered = sorted(values)
            point[name] = ordered[len(ordered) // 2]
        elif values:
            point[name] = values[0]
    for name, p in space.parameters.items():
        low, high = getattr(p, "low", None), getattr(p, "high", None)
        if name not in point and low is not None and high is not None:  # a float without a step
            point[name] = (low + high) / 2
    return space.effective(space.complete(point))


_NONE = object()


def _engine_default(space: Space, name: str, values: list[Any]) -> Any:
    """The value of parameter ``name`` that launches what leaving it out launches: the one
    whose rendering on the space's fixed command line parses (by the engine) to the same
    server arguments, with no environment added; ``_NONE`` when no value does, or when the
    engine does not model the parameter (every value parses alike)."""
    command, fixed_flags, fixed_env = space.launch.command, dict(space.launch.flags), dict(space.launch.env)

    def parsed(value: Any) -> tuple[Any, dict[str, str]]:
        flags, env = dict(fixed_flags), dict(fixed_env)
        space.parameters[name].apply(value, flags, env)
        spec = space.engine.render(command, flags, env)
        return space.engine.parse(spec.argv), env

    try:
        base = space.engine.parse(space.engine.render(command, fixed_flags, fixed_env).argv)
        rendered = [(v, *parsed(v)) for v in values]
    except (LaunchFailure, ValueError):
        return _NONE
    if len({repr(args) for _, args, _ in rendered}) < 2 and all(env == fixed_env for *_, env in rendered):
        return _NONE
    for value, args, env in rendered:
        if args == base and env == fixed_env:
            return value
    return _NONE


def fits(space: Space, params: dict[str, Any]) -> bool:
    """Whether ``params`` passes the space's rules and, for an engine the simulator models,
    the memory plan of the space's model on its host (weights, KV pool, CUDA graphs)."""
    full = space.effective(space.complete(params))
    if space.check(full):
        return False
    if not space.engine.simulated:
        return True
    from tuner.sim.model import PerfModel

    spec = space.render(full)
    try:
        PerfModel(space.hardware_profile, space.model_profile, spec.args, spec.env)  # type: ignore[arg-type]
    except LaunchFailure:
        return False
    return True


def defaults(space: Space, budget: int) -> list[dict[str, Any]]:
    """The neutral point, then the neutral point under each other layout, in file order:
    those that fit, one per layout, at most :data:`MAX_BUDGET_SHARE` of ``budget``."""
    base = neutral(space)
    candidates = [base]
    for name, values in space.value_lists().items():
        for value in values:
            if name in base and repr(value) != repr(base[name]):
                candidates.append(space.effective(space.complete({**base, name: value})))
    out: list[dict[str, Any]] = []
    layouts: set[str] = set()
    for point in candidates:
        try:
            layout = space.render(point).args.layout
        except LaunchFailure:
            continue
        if layout in layouts or not fits(space, point):
            continue
        layouts.add(layout)
        out.append(point)
    return out[: max(1, int(budget * MAX_BUDGET_SHARE))]
