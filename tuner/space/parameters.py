"""The kinds of tunable parameter, as a pydantic discriminated union (:data:`Parameter`).

One class per kind: ``categorical`` with a list of values, ``categorical`` with bundle
choices, ``bool``, ``int`` and ``float``. Each owns its domain: the values it enumerates,
its Optuna distribution and sampling, whether a value is inside it, how command-line text
reads as one, what a value sets in the launch, and its default. The checks pydantic cannot
express (one target per parameter, ``low`` below ``high``, no duplicate choices...) are
each kind's :meth:`~_Parameter.problems`; :class:`~tuner.space.Space` reports them in the
same file-and-field form as the structural ones.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Union

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from tuner.engines.base import format_value
from tuner.space.fields import (
    Bundle,
    EnvName,
    FlagName,
    Integer,
    Number,
    Problem,
    Scalar,
    Strict,
    When,
    kind_of,
)


def same_choice(a: Any, b: Any) -> bool:
    """Equality that keeps True apart from 1 (YAML choices may hold both)."""
    return (isinstance(a, bool) == isinstance(b, bool)) and a == b


def _decimals(x: float) -> int:
    exponent = Decimal(str(x)).as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


_NUMERIC_KEYS = ("low", "high", "step", "log")
#: the value that leaves a key unset, where it is not None
_UNSET = {"log": False}


def _unused(kind: str) -> dict[str, tuple[str | None, str]]:
    return {key: (key, f"not used by a {kind} parameter") for key in _NUMERIC_KEYS}


def _none_as_empty(value: Any) -> Any:
    """``choices: null`` lists no choices (reported as such, not as a type error)."""
    return [] if value is None else value


class _Parameter(Strict):
    """What every kind of parameter answers; ``type`` is narrowed by each kind."""

    type: str
    #: the kind as messages name it (``type`` in the file)
    kind: ClassVar[str]
    #: keys of other kinds a file may put here by mistake: (field or None, message)
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _drop_unset(cls, data: Any) -> Any:
        """A key of another kind left at its unset value (``step: null``, ``log: false``)
        says nothing about this parameter, so it is accepted and ignored."""
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if k not in cls.misplaced or v is not _UNSET.get(k)}

    @classmethod
    def key_problem(cls, error: str, key: str) -> tuple[str | None, str] | None:
        """A missing key is required by this kind; a misplaced one gets its own message."""
        if error == "missing":
            return key, f"required for a {cls.kind} parameter"
        return cls.misplaced.get(key)

    @property
    def gridable(self) -> bool:
        """Whether :meth:`values` is a finite list (all but a float without a step)."""
        return True

    def values(self) -> list[Any]:
        """Every value of the domain, in order (categorical order as in the file)."""
        raise NotImplementedError

    def size(self) -> int:
        """``len(values())``, without listing them where the kind can count."""
        return len(self.values())

    def default(self) -> Any:
        """The value a configuration that leaves this parameter out takes: the domain's first."""
        return self.values()[0]

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution of the domain (what the samplers see)."""
        raise NotImplementedError

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        """Sample a value from ``trial`` under ``name``."""
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside this parameter's domain, or None if it is inside."""
        raise NotImplementedError

    def coerce(self, text: str) -> Any:
        """The domain value a person means by ``text`` (``8``, ``null``, ``tp8``, ``true``)."""
        raise NotImplementedError

    def apply(self, value: Any, flags: dict[str, Any], env: dict[str, Any]) -> None:
        """Set what ``value`` means into the flag and env mappings (overriding fixed ones)."""
        raise NotImplementedError

    def targets(self) -> tuple[set[str], set[str]]:
        """Flags and env variables this parameter may set."""
        raise NotImplementedError

    def problems(self, path: str) -> list[Problem]:
        """What the field types cannot say is wrong with this definition (``path`` names it)."""
        return []


class _Choice(_Parameter):
    """A parameter that takes one of a listed set of values."""

    def distribution(self) -> BaseDistribution:
        return CategoricalDistribution(self.values())

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        return trial.suggest_categorical(name, self.values())

    def problem(self, value: Any) -> str | None:
        values = self.values()
        if any(same_choice(value, v) for v in values):
            return None
        return f"{value!r} is not one of {values!r}"

    def coerce(self, text: str) -> Any:
        lowered = text.strip().lower()
        for v in self.values():
            if text == format_value(v) or (v is None and lowered in ("null", "none", "~", "")):
                return v
        raise ValueError(f"{text!r} is not one of {self.values()!r}")


class _Single(_Parameter):
    """A parameter that sets exactly one flag or one environment variable."""

    flag: FlagName | None = None
    env: EnvName | None = None

    def apply(self, value: Any, flags: dict[str, Any], env: dict[str, Any]) -> None:
        if self.flag is not None:
            flags[self.flag] = value
        else:
            assert self.env is not None
            env[self.env] = value

    def targets(self) -> tuple[set[str], set[str]]:
        return ({self.flag} if self.flag else set()), ({self.env} if self.env else set())

    def problems(self, path: str) -> list[Problem]:
        if (self.flag is None) == (self.env is None):
            return [(path, "needs exactly one of 'flag', 'env' or bundle choices (a mapping)")]
        return []


class CategoricalParameter(_Single, _Choice):
    """One of a list of values for a flag or variable; ``null`` leaves it unset."""

    type: Literal["categorical"]
    choices: Annotated[list[Scalar], BeforeValidator(_none_as_empty)] = Field(default_factory=list)
    when: When = None
    description: str | None = None

    kind: ClassVar[str] = "categorical"
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = _unused("categorical")

    def values(self) -> list[Any]:
        return list(self.choices)

    def problems(self, path: str) -> list[Problem]:
        out = super().problems(path)
        if not self.choices:
            out.append((f"{path}.choices", "a categorical parameter needs at least one choice"))
        for i, value in enumerate(self.choices):
            if any(same_choice(value, other) for other in self.choices[:i]):
                out.append((f"{path}.choices[{i}]", f"duplicate choice {value!r}"))
        return out


class BundleParameter(_Choice):
    """A categorical whose choices are named bundles of flags and variables (a layout)."""

    type: Literal["categorical"]
    choices: dict[str, Bundle | None]
    when: When = None
    description: str | None = None

    kind: ClassVar[str] = "categorical"
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = {
        **_unused("categorical"),
        "flag": (None, "bundle choices set their own flags/env: remove 'flag'/'env'"),
        "env": (None, "bundle choices set their own flags/env: remove 'flag'/'env'"),
    }

    @property
    def bundles(self) -> dict[str, Bundle]:
        """The choices by name, an empty bundle for a ``null`` one."""
        return {k: v if v is not None else Bundle() for k, v in self.choices.items()}

    def values(self) -> list[Any]:
        return list(self.choices)

    def apply(self, value: Any, flags: dict[str, Any], env: dict[str, Any]) -> None:
        bundle = self.bundles[value]
        flags.update(bundle.flags)
        env.update(bundle.env)

    def targets(self) -> tuple[set[str], set[str]]:
        bundles = self.bundles.values()
        return {f for b in bundles for f in b.flags}, {e for b in bundles for e in b.env}

    def problems(self, path: str) -> list[Problem]:
        if not self.choices:
            return [(f"{path}.choices", "a categorical parameter needs at least one choice")]
        return []


class BoolParameter(_Single, _Choice):
    """On or off: a bare flag (or nothing), or a variable set to ``1``/``0``."""

    type: Literal["bool"]
    when: When = None
    description: str | None = None

    kind: ClassVar[str] = "bool"
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = {
        **_unused("bool"),
        "choices": ("choices", "a bool parameter has the choices false/true; remove 'choices'"),
    }

    def values(self) -> list[Any]:
        return [False, True]

    def coerce(self, text: str) -> Any:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{text!r} is not a boolean")


class _Numeric(_Single):
    """A number between ``low`` and ``high``, on a ``step`` grid or (float) continuous."""

    low: Number
    high: Number
    step: Number | None = None
    log: bool = False
    when: When = None
    description: str | None = None

    #: the one step a log scale allows (none for floats)
    log_step: ClassVar[int | None] = None

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        tolerance = 1e-9 * max(1.0, abs(self.high - self.low))
        if not self.low - tolerance <= value <= self.high + tolerance:
            return f"{value!r} is outside [{self.low}, {self.high}]"
        if self.step:
            k = (value - self.low) / self.step
            if abs(k - round(k)) > 1e-6:
                return f"{value!r} is not on the grid {self.low} + k*{self.step}"
        return None

    def _parse(self, text: str) -> Any:
        raise NotImplementedError

    def coerce(self, text: str) -> Any:
        value = self._parse(text)
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def problems(self, path: str) -> list[Problem]:
        out = super().problems(path)
        if self.step is not None and self.step <= 0:
            out.append((f"{path}.step", "must be positive"))
        if self.log and self.step is not None and self.step != self.log_step:
            out.append((f"{path}.log", "log scale and step cannot be combined"))
        if out:
            return out
        if self.low > self.high:
            out.append((f"{path}.low", f"low ({self.low}) is above high ({self.high})"))
        elif self.log and self.low <= 0:
            out.append((f"{path}.low", "a log-scale parameter needs low > 0"))
        elif self.step is not None:
            k = (self.high - self.low) / self.step
            if abs(k - round(k)) > 1e-9 * max(1.0, k):
                out.append(
                    (
                        f"{path}.high",
                        f"high - low ({self.high} - {self.low}) is not a multiple of step ({self.step})",
                    )
                )
        return out


class IntParameter(_Numeric):
    """An integer in ``[low, high]``, every ``step`` (default 1)."""

    type: Literal["int"]
    low: Integer
    high: Integer
    step: Integer | None = None

    kind: ClassVar[str] = "int"
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = {
        "choices": ("choices", "a int parameter takes low/high/step, not choices")
    }
    log_step: ClassVar[int | None] = 1

    def values(self) -> list[Any]:
        return list(range(self.low, self.high + 1, self.step or 1))

    def size(self) -> int:
        return (self.high - self.low) // (self.step or 1) + 1

    def distribution(self) -> BaseDistribution:
        return IntDistribution(self.low, self.high, log=self.log, step=self.step or 1)

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        return trial.suggest_int(name, self.low, self.high, step=self.step or 1, log=self.log)

    def problem(self, value: Any) -> str | None:
        if isinstance(value, float):
            return f"{value!r} is not an integer"
        return super().problem(value)

    def _parse(self, text: str) -> Any:
        return int(text)


class FloatParameter(_Numeric):
    """A real number in ``[low, high]``: continuous, or every ``step`` (then a finite grid)."""

    type: Literal["float"]

    kind: ClassVar[str] = "float"
    misplaced: ClassVar[dict[str, tuple[str | None, str]]] = {
        "choices": ("choices", "a float parameter takes low/high/step, not choices")
    }

    @property
    def gridable(self) -> bool:
        return self.step is not None

    @property
    def decimals(self) -> int | None:
        """Decimal places of the grid (from ``low`` and ``step``); None when continuous."""
        return max(_decimals(self.low), _decimals(self.step)) if self.step else None

    def values(self) -> list[Any]:
        if self.step is None:
            raise ValueError("a float without a step has no finite grid")
        count = round((self.high - self.low) / self.step)
        return [round(self.low + k * self.step, self.decimals) for k in range(count + 1)]

    def default(self) -> Any:
        return self.values()[0] if self.gridable else self.low

    def distribution(self) -> BaseDistribution:
        return FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        value = trial.suggest_float(name, float(self.low), float(self.high), step=self.step, log=self.log)
        # Optuna's stepped floats carry binary noise (0.8800000000000001)
        decimals = self.decimals
        return round(value, decimals) if decimals is not None else value

    def _parse(self, text: str) -> Any:
        return float(text)


_KINDS = ("categorical", "bool", "int", "float")


def _parameter_tag(value: Any) -> str | None:
    """Which class a parameter mapping validates as; None when the file does not say."""
    if isinstance(value, _Parameter):
        return "bundle" if isinstance(value, BundleParameter) else value.type
    if not isinstance(value, dict) or value.get("type") not in _KINDS:
        return None
    if value["type"] != "categorical":
        return value["type"]
    choices = value.get("choices")
    if isinstance(choices, dict):
        return "bundle"
    return "categorical" if choices is None or isinstance(choices, list | tuple) else None


def parameter_kind_problem(value: Any) -> tuple[str | None, str]:
    """Why :data:`Parameter` could not tell the kind of ``value``: (field under it, message)."""
    if not isinstance(value, dict):
        return None, f"must be a mapping, not {kind_of(value)}"
    if "type" not in value:
        return "type", "required field is missing"
    if value["type"] not in _KINDS:
        return "type", "Input should be " + ", ".join(map(repr, _KINDS[:-1])) + f" or {_KINDS[-1]!r}"
    return "choices", "must be a list of values, or a mapping of bundle names to {flags, env}"


#: One tunable, as the file defines it: what it sets, its domain, and when it applies.
Parameter = Annotated[
    Union[  # noqa: UP007 - Tag/Discriminator need the Union spelled out
        Annotated[CategoricalParameter, Tag("categorical")],
        Annotated[BundleParameter, Tag("bundle")],
        Annotated[BoolParameter, Tag("bool")],
        Annotated[IntParameter, Tag("int")],
        Annotated[FloatParameter, Tag("float")],
    ],
    Discriminator(
        _parameter_tag,
        custom_error_type="parameter_kind",
        custom_error_message="cannot tell the kind of parameter",
    ),
]
