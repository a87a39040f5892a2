"""Field types of space files: names and values a file may give flags and variables, and the
strict base model (unknown keys are errors, loaded files are frozen)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

#: ``(field, message)``: a dotted field path (None for the file itself) and what is wrong there
Problem = tuple[str | None, str]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KIND_NAMES: dict[type, str] = {dict: "a mapping", list: "a list"}


def kind_of(value: Any) -> str:
    """How an error message names the kind of a YAML value (``a mapping``, ``str``)."""
    return _KIND_NAMES.get(type(value), type(value).__name__)


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"must be null, a boolean, a number or a string, not {kind_of(value)}")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {kind_of(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _integer(value: Any) -> Any:
    if not isinstance(value, int):
        raise ValueError(f"an int parameter needs an integer, not {value!r}")
    return value


def _flag_value(value: Any) -> Any:
    if isinstance(value, list):
        for item in value:
            if item is None or isinstance(item, list | dict):
                raise ValueError("list items must be booleans, numbers or strings")
        return value
    return _scalar(value)


def _flag_name(name: str) -> str:
    if not name.startswith("-") or name.strip("-") == "" or any(c.isspace() for c in name):
        raise ValueError(f"{name!r} is not a flag name (flags start with '-' and have no spaces)")
    return name


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    return name


Scalar = Annotated[Any, AfterValidator(_scalar)]
Number = Annotated[Any, AfterValidator(_number)]
Integer = Annotated[Any, AfterValidator(_number), AfterValidator(_integer)]
FlagValue = Annotated[Any, AfterValidator(_flag_value)]
FlagName = Annotated[str, AfterValidator(_flag_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
#: expression over parameters defined above; the parameter is sampled only when true
When = Annotated[str | None, Field(description="expression over parameters defined above")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def key_problem(cls, error: str, key: str) -> tuple[str | None, str] | None:
        """A clearer report than the generic one for an unknown (``extra_forbidden``) or
        missing key of this model: ``(field relative to the model or None, message)``."""
        return None


class Bundle(Strict):
    """A named choice that sets several flags and/or variables at once (a layout)."""

    flags: dict[FlagName, FlagValue] = {}
    env: dict[EnvName, Scalar] = {}
