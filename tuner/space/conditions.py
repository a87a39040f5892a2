"""``when``: which parameters apply to a configuration, decided in file order.

A parameter's ``when`` may read only the parameters above it, so one walk down the file
decides every condition: a skipped parameter reads as ``None`` in the expressions below
it. Sampling, completion, validation and the grid walks all go through :func:`applicable`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.expr import Expr, ExprError
from tuner.space.errors import SpaceError
from tuner.space.fields import Problem
from tuner.space.parameters import Parameter


@dataclass(frozen=True)
class Tunable:
    """A validated parameter of a loaded space: its name, its definition, its compiled ``when``."""

    name: str
    spec: Parameter
    when: Expr | None = None


def parse_when(name: str, text: str, names: Sequence[str]) -> tuple[Expr | None, list[Problem]]:
    """Compile parameter ``name``'s ``when`` over the file's parameter ``names`` (in file
    order): the expression, and the problems if it is malformed or reads a parameter that
    is not defined above ``name``."""
    path = f"parameters.{name}.when"
    try:
        when = Expr.parse(text, known=names)
    except ExprError as exc:
        return None, [(path, str(exc))]
    later = sorted(when.names - set(names[: names.index(name)]))
    if later:
        return when, [
            (
                path,
                f"refers to {', '.join(later)}, not defined above {name!r} (conditions run in file order)",
            )
        ]
    return when, []


def applicable(
    params: Sequence[Tunable], env: dict[str, Any], *, source: str, start: int = 0
) -> Iterator[tuple[int, Tunable]]:
    """The parameters from index ``start`` on whose ``when`` holds, in file order, with their index.

    ``env`` holds the values expressions read. Every parameter reached is set to None in
    it (skipped, or not valued yet); the caller records the value it gives a yielded
    parameter in ``env`` before taking the next one, so the conditions below see it.
    A condition that cannot be evaluated raises :class:`SpaceError` (``source`` names the file).
    """
    for i in range(start, len(params)):
        p = params[i]
        env[p.name] = None
        if p.when is None:
            yield i, p
            continue
        try:
            holds = bool(p.when.evaluate(env))
        except ExprError as exc:
            raise SpaceError(source, [(f"parameters.{p.name}.when", str(exc))]) from None
        if holds:
            yield i, p
