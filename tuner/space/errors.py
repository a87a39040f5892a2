"""Problems with a space file, reported as ``file: field: message`` lines (exit code 2)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, Tag, ValidationError

from tuner.errors import UsageError
from tuner.space.fields import Problem
from tuner.space.parameters import parameter_kind_problem
from tuner.space.schema import SpaceFile


class SpaceError(UsageError):
    """A search-space file (or a configuration given against it) that is not valid.

    ``problems`` holds ``(field, message)`` pairs; ``field`` is a dotted path such as
    ``parameters.ep_size.choices`` (or ``line 3, column 5`` for YAML syntax), or None
    when the problem is the file itself. The message has one line per problem, each
    starting with the file.
    """

    def __init__(self, source: str, problems: Sequence[Problem]):
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {field}: {msg}" if field else f"{source}: {msg}" for field, msg in self.problems]
        super().__init__("\n".join(lines))

    @property
    def field(self) -> str | None:
        """The field path of the first problem."""
        return self.problems[0][0] if self.problems else None


def dotted(loc: Sequence[str | int]) -> str:
    """``("parameters", "x", "choices", 1)`` as ``parameters.x.choices[1]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _tagged(union: Any) -> dict[str, Any]:
    """The members of a discriminated union by tag (empty for a plain union)."""
    out = {}
    for member in get_args(union):
        if get_origin(member) is Annotated:
            inner, *meta = get_args(member)
            out.update({m.tag: inner for m in meta if isinstance(m, Tag)})
    return out


def _locate(tp: Any, loc: Sequence[str | int]) -> tuple[list[str | int], type[BaseModel] | None]:
    """Follow a pydantic error location through the file model ``tp``: the location as the
    file spells it (union tags and ``[key]`` markers dropped) and the model whose key its
    last part is (for the keys a model allows), or None."""
    path: list[str | int] = []
    parent: type[BaseModel] | None = None
    parts = list(loc)
    while parts:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
            continue
        if origin is Union or origin is types.UnionType:
            tagged = _tagged(tp)
            tag = parts[0]
            if tagged and isinstance(tag, str) and tag in tagged:
                tp = tagged[tag]
                parts.pop(0)
                continue
            models = [m for m in get_args(tp) if isinstance(m, type) and issubclass(m, BaseModel)]
            tp = models[0] if models else Any
            continue
        part = parts.pop(0)
        if part == "[key]":
            continue
        path.append(part)
        parent = tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
        if parent is not None:
            field = parent.model_fields.get(str(part))
            tp = field.annotation if field is not None else Any
        else:
            tp = get_args(tp)[-1] if origin in (dict, list, tuple) else Any
    return path, parent


def validation_problems(exc: ValidationError) -> list[Problem]:
    """The ``(field, message)`` problems of a :class:`SpaceFile` validation error."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        path, parent = _locate(SpaceFile, err["loc"])
        kind = err["type"]
        msg = err["msg"]
        if kind == "value_error":
            msg = str(err["ctx"]["error"])
        elif kind == "parameter_kind":
            sub, msg = parameter_kind_problem(err["input"])
            path = [*path, sub] if sub else path
        elif kind in ("extra_forbidden", "missing"):
            explain = getattr(parent, "key_problem", None)
            hint = explain(kind, str(path[-1])) if explain is not None else None
            if hint is not None:
                sub, msg = hint
                path = [*path[:-1], sub] if sub else path[:-1]
            elif kind == "missing":
                msg = "required field is missing"
            else:
                allowed = f"; allowed: {', '.join(parent.model_fields)}" if parent else ""
                msg = f"unknown key {path[-1]!r}{allowed}"
        problems.append((dotted(path) or None, msg))
    return list(dict.fromkeys(problems))
