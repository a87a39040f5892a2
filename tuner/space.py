"""Search-space files: what a study may change, what it keeps fixed, and how it measures.

A space file (YAML) names the engine, the simulator's hardware and model profiles, the
fixed launch (command, flags, environment), the tunable parameters, constraints, the
workload and the objective. :func:`load_space` validates all of it up front and
reports every problem with the file and the field path
(``search_spaces/x.yaml: parameters.ep_size.choices: ...``), so a typo costs a second,
not a server restart.

A loaded :class:`Space` is the glue between Optuna and the launch:
:meth:`Space.suggest` samples a configuration (define-by-run, honouring ``when``),
:meth:`Space.render` turns it into a :class:`~tuner.engines.base.LaunchSpec`,
:meth:`Space.check` applies constraints and the engine's launch rules without a launch,
and :meth:`Space.key` names a configuration by what it renders to, so two parameter sets
that launch the same server are measured once.

Parameter semantics:

* Each parameter sets exactly one thing: a ``flag``, an ``env`` variable, or a bundle
  (categorical ``choices`` given as a mapping ``name -> {flags, env}``).
* ``bool`` on a flag renders as the bare flag when true and nothing when false; on an
  env variable as ``1``/``0``.
* A ``null`` choice leaves the flag or variable unset (the engine's default), also when
  the fixed launch sets it.
* ``when`` (an expression over parameters defined above) decides whether the parameter
  is sampled at all; a skipped parameter renders nothing and reads as ``None`` in later
  expressions.
"""

from __future__ import annotations

import json
import keyword
import math
import re
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import optuna
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from tuner import engines, profiles
from tuner.engines.base import Engine, LaunchSpec, format_value, render_env
from tuner.errors import UsageError
from tuner.expr import FUNCTIONS, Expr, ExprError
from tuner.failures import LaunchFailure
from tuner.objectives import Objective
from tuner.workload import Workload

#: The space ``tuner`` uses when none is named: the reference host and model.
DEFAULT_SPACE = "kimi-k2.6-8x-rtx-pro-6000"

SPACE_SUFFIXES = (".yaml", ".yml")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpaceError(UsageError):
    """A search-space file (or a configuration given against it) that is not valid.

    ``problems`` holds ``(field, message)`` pairs; ``field`` is a dotted path such as
    ``parameters.ep_size.choices`` (or ``line 3, column 5`` for YAML syntax), or None
    when the problem is the file itself. The message has one line per problem, each
    starting with the file.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str | None, str]]):
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {field}: {msg}" if field else f"{source}: {msg}" for field, msg in self.problems]
        super().__init__("\n".join(lines))

    @property
    def field(self) -> str | None:
        """The field path of the first problem."""
        return self.problems[0][0] if self.problems else None


# --------------------------------------------------------------------------- file model


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list"}.get(type(value), type(value).__name__)


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"must be null, a boolean, a number or a string, not {_kind(value)}")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
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
FlagValue = Annotated[Any, AfterValidator(_flag_value)]
FlagName = Annotated[str, AfterValidator(_flag_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Bundle(_Strict):
    """A named choice that sets several flags and/or variables at once (a layout)."""

    flags: dict[FlagName, FlagValue] = {}
    env: dict[EnvName, Scalar] = {}


def _choices_kind(value: Any) -> str | None:
    if isinstance(value, list | tuple):
        return "scalars"
    if isinstance(value, dict):
        return "bundles"
    return None


Choices = Annotated[
    Union[  # noqa: UP007 - Tag/Discriminator need the Union spelled out
        Annotated[list[Scalar], Tag("scalars")],
        Annotated[dict[str, Bundle | None], Tag("bundles")],
    ],
    Discriminator(
        _choices_kind,
        custom_error_type="choices_type",
        custom_error_message="must be a list of values, or a mapping of bundle names to {flags, env}",
    ),
]


class Parameter(_Strict):
    """One tunable: what it sets (flag, env or bundles), its domain, and when it applies."""

    type: Literal["categorical", "bool", "int", "float"]
    flag: FlagName | None = None
    env: EnvName | None = None
    choices: Choices | None = None
    low: Number | None = None
    high: Number | None = None
    step: Number | None = None
    log: bool = False
    #: expression over parameters defined above; the parameter is sampled only when true
    when: str | None = None
    description: str | None = None

    @property
    def bundles(self) -> dict[str, Bundle] | None:
        """Bundle choices (name -> Bundle), or None for a flag/env parameter."""
        if isinstance(self.choices, dict):
            return {k: v if v is not None else Bundle() for k, v in self.choices.items()}
        return None


class UnitSettings(_Strict):
    """systemd unit settings for the rendered service (see tuner.units)."""

    description: str | None = None
    user: str | None = None
    working_directory: str | None = None
    environment_file: str | None = None


class Launch(_Strict):
    """The fixed part of every launch."""

    command: list[str] = Field(min_length=1)
    flags: dict[FlagName, FlagValue] = {}
    env: dict[EnvName, Scalar] = {}
    #: interpreter for rendered units: replaces command[0] when it is python/python3
    python: str | None = None
    unit: UnitSettings = UnitSettings()


class Constraint(_Strict):
    """A condition every configuration must meet; ``reason`` is what a violation reports."""

    expr: str
    reason: str | None = None


class SpaceFile(_Strict):
    """The YAML document, as validated."""

    name: str = Field(min_length=1)
    engine: str = "sglang"
    #: the engine release on the target host (``"0.5.23"``): its flag spellings and launch
    #: rules judge the configurations; unset, the adapter's default release
    engine_version: str | None = None
    description: str = ""
    hardware: str
    model: str
    launch: Launch
    parameters: dict[str, Parameter] = {}
    constraints: list[Constraint] = []
    workload: Workload = Workload()
    objective: Objective = Objective()
    #: configurations measured first (a warm start: e.g. the known-good settings of a hand-run
    #: campaign); a parameter left out takes the first value of its domain.
    start: list[dict[str, Any]] = []


# --------------------------------------------------------------------------- errors


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(tp: Any, loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model a location inside ``tp`` points into (for "allowed keys")."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _model_at(get_args(tp)[0], loc)
    if origin is Union or origin is types.UnionType:
        for member in get_args(tp):
            found = _model_at(member, loc)
            if found is not None:
                return found
        return None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if not loc:
            return tp
        field = tp.model_fields.get(str(loc[0]))
        return _model_at(field.annotation, loc[1:]) if field is not None else None
    if origin in (dict, list, tuple) and loc:
        return _model_at(get_args(tp)[-1], loc[1:])
    return None


def _validation_problems(exc: ValidationError) -> list[tuple[str | None, str]]:
    problems: list[tuple[str | None, str]] = []
    for err in exc.errors(include_url=False):
        raw = list(err["loc"])
        loc: list[str | int] = []
        for i, part in enumerate(raw):
            if part == "[key]":
                continue
            if i > 0 and raw[i - 1] == "choices" and part in ("scalars", "bundles"):
                continue  # the union's tag, not a key of the file
            loc.append(part)
        kind = err["type"]
        if kind == "value_error":
            msg = str(err["ctx"]["error"])
        elif kind == "extra_forbidden":
            model = _model_at(SpaceFile, loc[:-1])
            allowed = f"; allowed: {', '.join(model.model_fields)}" if model else ""
            msg = f"unknown key {loc[-1]!r}{allowed}"
        elif kind == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"]
        problems.append((_dotted(loc) or None, msg))
    return problems


# --------------------------------------------------------------------------- YAML


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would silently keep the last one)."""


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        except TypeError:
            pass  # unhashable key: construct_mapping reports it
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpaceError(source, [(None, "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(source, [(None, f"cannot read: {exc}")]) from None
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        raise SpaceError(source, [(where, f"YAML syntax error: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise SpaceError(source, [(None, f"YAML syntax error: {exc}")]) from None


# --------------------------------------------------------------------------- parameters


def _decimals(x: float) -> int:
    exponent = Decimal(str(x)).as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _same_choice(a: Any, b: Any) -> bool:
    """Equality that keeps True apart from 1 (YAML choices may hold both)."""
    return (isinstance(a, bool) == isinstance(b, bool)) and a == b


def _render_same(a: Any, b: Any) -> bool:
    """Whether two parameter values render the same (0.88 and 0.8800000000000001 do)."""
    if (
        isinstance(a, float | int)
        and isinstance(b, float | int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return format_value(float(a)) == format_value(float(b))
    return _same_choice(a, b)


class _Param:
    """A validated parameter with its compiled condition and its value domain."""

    def __init__(self, name: str, spec: Parameter, when: Expr | None):
        self.name = name
        self.spec = spec
        self.when = when
        self.bundles = spec.bundles
        if spec.type == "float":
            self.decimals = max(_decimals(spec.low), _decimals(spec.step)) if spec.step else None

    @property
    def gridable(self) -> bool:
        return self.spec.type != "float" or self.spec.step is not None

    def values(self) -> list[Any]:
        """Every value of the domain, in order (categorical order as in the file)."""
        s = self.spec
        if s.type == "categorical":
            return list(self.bundles) if self.bundles is not None else list(s.choices or [])
        if s.type == "bool":
            return [False, True]
        if s.type == "int":
            return list(range(s.low, s.high + 1, s.step or 1))
        if s.step is None:
            raise ValueError(f"parameter {self.name!r} is a float without a step: no finite grid")
        count = round((s.high - s.low) / s.step)
        return [round(s.low + k * s.step, self.decimals) for k in range(count + 1)]

    def size(self) -> int:
        s = self.spec
        if s.type == "int":
            return (s.high - s.low) // (s.step or 1) + 1
        return len(self.values())

    def distribution(self) -> BaseDistribution:
        s = self.spec
        if s.type in ("categorical", "bool"):
            return CategoricalDistribution(self.values())
        if s.type == "int":
            return IntDistribution(s.low, s.high, log=s.log, step=s.step or 1)
        return FloatDistribution(float(s.low), float(s.high), log=s.log, step=s.step)

    def suggest(self, trial: optuna.Trial) -> Any:
        s = self.spec
        if s.type in ("categorical", "bool"):
            return trial.suggest_categorical(self.name, self.values())
        if s.type == "int":
            return trial.suggest_int(self.name, s.low, s.high, step=s.step or 1, log=s.log)
        value = trial.suggest_float(self.name, float(s.low), float(s.high), step=s.step, log=s.log)
        # Optuna's stepped floats carry binary noise (0.8800000000000001)
        return round(value, self.decimals) if self.decimals is not None else value

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside this parameter's domain, or None if it is inside."""
        s = self.spec
        if s.type in ("categorical", "bool"):
            values = self.values()
            if any(_same_choice(value, v) for v in values):
                return None
            return f"{value!r} is not one of {values!r}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if s.type == "int" and not isinstance(value, int):
            return f"{value!r} is not an integer"
        tolerance = 1e-9 * max(1.0, abs(s.high - s.low))
        if not s.low - tolerance <= value <= s.high + tolerance:
            return f"{value!r} is outside [{s.low}, {s.high}]"
        if s.step:
            k = (value - s.low) / s.step
            if abs(k - round(k)) > 1e-6:
                return f"{value!r} is not on the grid {s.low} + k*{s.step}"
        return None

    def coerce(self, text: str) -> Any:
        """The domain value a person means by ``text`` (``8``, ``null``, ``tp8``, ``true``)."""
        lowered = text.strip().lower()
        if self.spec.type == "categorical":
            for v in self.values():
                if text == format_value(v) or (v is None and lowered in ("null", "none", "~", "")):
                    return v
            raise ValueError(f"{text!r} is not one of {self.values()!r}")
        if self.spec.type == "bool":
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError(f"{text!r} is not a boolean")
        value: Any = int(text) if self.spec.type == "int" else float(text)
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def apply(self, value: Any, flags: dict[str, Any], env: dict[str, Any]) -> None:
        """Set what ``value`` means into the flag and env mappings (overriding fixed ones)."""
        if self.bundles is not None:
            bundle = self.bundles[value]
            flags.update(bundle.flags)
            env.update(bundle.env)
        elif self.spec.flag is not None:
            flags[self.spec.flag] = value
        else:
            env[self.spec.env] = value


def _targets(spec: Parameter) -> tuple[set[str], set[str]]:
    """Flags and env variables a parameter may set."""
    if spec.bundles is not None:
        flags = {f for b in spec.bundles.values() for f in b.flags}
        env = {e for b in spec.bundles.values() for e in b.env}
        return flags, env
    return ({spec.flag} if spec.flag else set()), ({spec.env} if spec.env else set())


def _domain_problems(path: str, p: Parameter) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    targets = (p.flag is not None) + (p.env is not None) + (p.bundles is not None)
    if targets != 1:
        if p.bundles is not None:
            out.append((path, "bundle choices set their own flags/env: remove 'flag'/'env'"))
        else:
            out.append((path, "needs exactly one of 'flag', 'env' or bundle choices (a mapping)"))
    numeric = {k: getattr(p, k) for k in ("low", "high", "step") if getattr(p, k) is not None}
    if p.type in ("categorical", "bool"):
        for key in numeric:
            out.append((f"{path}.{key}", f"not used by a {p.type} parameter"))
        if p.log:
            out.append((f"{path}.log", f"not used by a {p.type} parameter"))
    if p.type == "bool" and p.choices is not None:
        out.append((f"{path}.choices", "a bool parameter has the choices false/true; remove 'choices'"))
    if p.type == "bool" and p.bundles is not None:
        out.append((f"{path}.type", "bundle choices need type: categorical"))
    if p.type == "categorical":
        if not p.choices:
            out.append((f"{path}.choices", "a categorical parameter needs at least one choice"))
        elif isinstance(p.choices, list):
            for i, value in enumerate(p.choices):
                if any(_same_choice(value, other) for other in p.choices[:i]):
                    out.append((f"{path}.choices[{i}]", f"duplicate choice {value!r}"))
    if p.type in ("int", "float"):
        if p.choices is not None:
            out.append((f"{path}.choices", f"a {p.type} parameter takes low/high/step, not choices"))
        for key in ("low", "high"):
            if getattr(p, key) is None:
                out.append((f"{path}.{key}", f"required for a {p.type} parameter"))
        if p.type == "int":
            for key, value in numeric.items():
                if not isinstance(value, int):
                    out.append((f"{path}.{key}", f"an int parameter needs an integer, not {value!r}"))
        if p.step is not None and p.step <= 0:
            out.append((f"{path}.step", "must be positive"))
        if p.log and p.step is not None and not (p.type == "int" and p.step == 1):
            out.append((f"{path}.log", "log scale and step cannot be combined"))
        if out or p.low is None or p.high is None:
            return out
        if p.low > p.high:
            out.append((f"{path}.low", f"low ({p.low}) is above high ({p.high})"))
        elif p.log and p.low <= 0:
            out.append((f"{path}.low", "a log-scale parameter needs low > 0"))
        elif p.step is not None:
            k = (p.high - p.low) / p.step
            if abs(k - round(k)) > 1e-9 * max(1.0, k):
                out.append(
                    (f"{path}.high", f"high - low ({p.high} - {p.low}) is not a multiple of step ({p.step})")
                )
    return out


def _profile_ident(ident: str, base: Path | None) -> str:
    """A profile id, or a profile file path resolved against the space file's folder."""
    if base is not None and ident.endswith(SPACE_SUFFIXES):
        candidate = base / ident
        if candidate.exists():
            return str(candidate)
    return ident


# --------------------------------------------------------------------------- the space


class Space:
    """A loaded, validated search space (see the module docstring for its semantics)."""

    def __init__(self, spec: SpaceFile, *, source: str = "<space>", base_dir: Path | None = None):
        self.spec = spec
        self.source = source
        problems: list[tuple[str | None, str]] = []

        self._params: list[_Param] = []
        names = list(spec.parameters)
        owners: dict[tuple[str, str], str] = {}
        for i, (name, p) in enumerate(spec.parameters.items()):
            path = f"parameters.{name}"
            if not name.isidentifier() or keyword.iskeyword(name) or name in FUNCTIONS:
                problems.append(
                    (
                        path,
                        f"{name!r} cannot be a parameter name: expressions need an "
                        f"identifier that is not a keyword or {', '.join(FUNCTIONS)}",
                    )
                )
            domain = _domain_problems(path, p)
            problems.extend(domain)
            flags, env_vars = _targets(p)
            for kind, target in [("flag", f) for f in sorted(flags)] + [("env", e) for e in sorted(env_vars)]:
                other = owners.setdefault((kind, target), name)
                if other != name:
                    problems.append(
                        (
                            path,
                            f"{kind} {target} is also set by parameter {other!r}; a flag or "
                            "variable may be tuned by one parameter only",
                        )
                    )
            when = None
            if p.when is not None:
                try:
                    when = Expr.parse(p.when, known=names)
                    later = sorted(when.names - set(names[:i]))
                    if later:
                        problems.append(
                            (
                                f"{path}.when",
                                f"refers to {', '.join(later)}, not defined "
                                f"above {name!r} (conditions run in file order)",
                            )
                        )
                except ExprError as exc:
                    problems.append((f"{path}.when", str(exc)))
            if not domain:
                self._params.append(_Param(name, p, when))

        self._constraints: list[tuple[Expr, str]] = []
        for i, c in enumerate(spec.constraints):
            try:
                self._constraints.append((Expr.parse(c.expr, known=names), c.reason or c.expr))
            except ExprError as exc:
                problems.append((f"constraints[{i}].expr", str(exc)))

        engine: Engine | None = None
        try:
            engine = engines.get(spec.engine)
        except KeyError as exc:
            problems.append(("engine", str(exc.args[0])))
        if engine is not None and spec.engine_version is not None:
            try:
                engine = engines.for_version(engine, spec.engine_version)
            except KeyError as exc:
                problems.append(("engine_version", str(exc.args[0])))
        try:
            self.hardware_profile = profiles.hardware(_profile_ident(spec.hardware, base_dir))
        except profiles.ProfileError as exc:
            problems.append(("hardware", str(exc)))
        try:
            self.model_profile = profiles.model(_profile_ident(spec.model, base_dir))
        except profiles.ProfileError as exc:
            problems.append(("model", str(exc)))

        launch = spec.launch
        if launch.python is not None and not launch.python.startswith("/"):
            problems.append(("launch.python", f"must be an absolute path, not {launch.python!r}"))
        wd = launch.unit.working_directory
        if wd is not None and not wd.startswith("/"):
            problems.append(("launch.unit.working_directory", f"must be an absolute path, not {wd!r}"))

        if problems:
            raise SpaceError(source, problems)
        assert engine is not None
        self.engine: Engine = engine
        self._by_name = {p.name: p for p in self._params}
        self._referenced = set().union(*(p.when.names for p in self._params if p.when))
        start_problems: list[tuple[str | None, str]] = []
        for i, point in enumerate(self.spec.start):
            unknown = sorted(set(point) - set(self._by_name))
            start_problems += [(f"start[{i}].{n}", "no such parameter in this space") for n in unknown]
            if unknown:
                continue
            try:
                self.effective(self.complete(point))
            except SpaceError as exc:
                start_problems += [
                    (f"start[{i}]" + (f".{f.split('.', 1)[1]}" if f else ""), m) for f, m in exc.problems
                ]
        if start_problems:
            raise SpaceError(source, start_problems)

    # ---- construction

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<space>", base_dir: Path | None = None) -> Space:
        """Validate a parsed document (the YAML's top-level mapping)."""
        if not isinstance(data, dict):
            raise SpaceError(source, [(None, f"a space file must be a mapping, not {_kind(data)}")])
        try:
            spec = SpaceFile.model_validate(data)
        except ValidationError as exc:
            raise SpaceError(source, _validation_problems(exc)) from None
        return cls(spec, source=source, base_dir=base_dir)

    # ---- plain attributes

    @property
    def name(self) -> str:
        """Default study name."""
        return self.spec.name

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def hardware(self) -> str:
        """Hardware profile id (the simulator's host; its gpu_count feeds the launch rules)."""
        return self.spec.hardware

    @property
    def model(self) -> str:
        """Model profile id (the simulator's model)."""
        return self.spec.model

    @property
    def gpu_count(self) -> int:
        return self.hardware_profile.gpu_count

    @property
    def workload(self) -> Workload:
        return self.spec.workload

    @property
    def objective(self) -> Objective:
        return self.spec.objective

    @property
    def launch(self) -> Launch:
        return self.spec.launch

    @property
    def parameters(self) -> dict[str, Parameter]:
        """Parameter definitions by name, in file order."""
        return dict(self.spec.parameters)

    # ---- sampling

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample a configuration from ``trial`` (define-by-run, in file order).

        A parameter whose ``when`` is false is not sampled and is absent from the result.
        """
        params: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for p in self._params:
            if p.when is not None and not self._condition(p, env):
                env[p.name] = None
                continue
            params[p.name] = env[p.name] = p.suggest(trial)
        return params

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with every applicable parameter that is missing set to the first value of
        its domain (for categoricals listing ``null`` first: the engine's default)."""
        out: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for p in self._params:
            if p.when is not None and not self._condition(p, env):
                env[p.name] = None
                continue
            value = params[p.name] if p.name in params else p.values()[0] if p.gridable else p.spec.low
            out[p.name] = env[p.name] = value
        return out

    def start_points(self) -> list[dict[str, Any]]:
        """The file's ``start`` configurations, completed and validated."""
        return [self.effective(self.complete(point)) for point in self.spec.start]

    def value_lists(self) -> dict[str, list[Any]]:
        """Every value of every gridable parameter, by name (for exhaustive or local search)."""
        return {p.name: p.values() for p in self._params if p.gridable}

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distribution of every parameter (regardless of ``when``), by name."""
        return {p.name: p.distribution() for p in self._params}

    def effective(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters that apply to ``params`` (``when`` true), validated, in file order.

        Values of parameters whose ``when`` is false are dropped. Raises
        :class:`SpaceError` for unknown names, missing values or values outside a domain.
        """
        unknown = sorted(set(params) - set(self._by_name))
        problems: list[tuple[str | None, str]] = [
            (f"parameters.{n}", "no such parameter in this space") for n in unknown
        ]
        active: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for p in self._params:
            if p.when is not None and not self._condition(p, env):
                env[p.name] = None
                continue
            if p.name not in params:
                problems.append((f"parameters.{p.name}", "no value given"))
                env[p.name] = None
                continue
            value = params[p.name]
            problem = p.problem(value)
            if problem:
                problems.append((f"parameters.{p.name}", problem))
            active[p.name] = env[p.name] = value
        if problems:
            raise SpaceError(self.source, problems)
        return active

    def coerce(self, assignments: Mapping[str, str]) -> dict[str, Any]:
        """Turn ``{name: text}`` (command-line ``name=value`` pairs) into typed values."""
        out: dict[str, Any] = {}
        problems: list[tuple[str | None, str]] = []
        for name, text in assignments.items():
            p = self._by_name.get(name)
            if p is None:
                problems.append((f"parameters.{name}", "no such parameter in this space"))
                continue
            try:
                out[name] = p.coerce(text)
            except ValueError as exc:
                problems.append((f"parameters.{name}", str(exc)))
        if problems:
            raise SpaceError(self.source, problems)
        return out

    # ---- rendering and identity

    def _resolve(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        active = self.effective(params)
        flags = dict(self.spec.launch.flags)
        env = dict(self.spec.launch.env)
        for p in self._params:
            if p.name in active:
                p.apply(active[p.name], flags, env)
        return flags, env

    def render(self, params: Mapping[str, Any]) -> LaunchSpec:
        """The launch for ``params``: fixed command and flags, tunables overriding them."""
        flags, env = self._resolve(params)
        return self.engine.render(self.spec.launch.command, flags, env)

    def key(self, params: Mapping[str, Any]) -> str:
        """Canonical identity of a configuration: its command, flags and env, sorted and
        stringified as rendered. Two parameter sets that launch the same server have the
        same key (a ``when``-skipped parameter, or 0.88 versus 0.8800000000000001)."""
        flags, env = self._resolve(params)
        canonical: list[tuple[str, Any]] = []
        for flag, value in sorted(flags.items()):
            if value is None or value is False:
                continue
            if value is True:
                canonical.append((flag, True))
            elif isinstance(value, list | tuple):
                canonical.append((flag, [format_value(v) for v in value]))
            else:
                canonical.append((flag, format_value(value)))
        data = {
            "command": list(self.spec.launch.command),
            "flags": canonical,
            "env": sorted(render_env(env).items()),
        }
        return json.dumps(data, separators=(",", ":"))

    def differences(self, params: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """Parameters whose effective values differ: ``{name: (value in params, value in
        other)}``, file order; a parameter that does not apply on one side reads None."""
        a, b = self.effective(params), self.effective(other)
        return {
            p.name: (a.get(p.name), b.get(p.name))
            for p in self._params
            if not _render_same(a.get(p.name), b.get(p.name))
        }

    # ---- feasibility

    def check(self, params: Mapping[str, Any]) -> list[str]:
        """Why ``params`` cannot run: violated constraints (``constraint: <reason>``) and
        the engine's refusal (``invalid-args: <engine message>``, ``crash: ...``) under
        the hardware profile's GPU count. Empty when the configuration is feasible."""
        active = self.effective(params)
        env = {p.name: active.get(p.name) for p in self._params}
        reasons = []
        for i, (expr, reason) in enumerate(self._constraints):
            try:
                ok = expr.evaluate(env)
            except ExprError as exc:
                raise SpaceError(self.source, [(f"constraints[{i}].expr", str(exc))]) from None
            if not ok:
                reasons.append(f"constraint: {reason}")
        spec = self.render(params)
        try:
            self.engine.check(spec.argv, self.gpu_count)
        except LaunchFailure as exc:
            reasons.append(str(exc))
        return reasons

    # ---- the whole grid

    def is_finite(self) -> bool:
        """Whether the space is a finite grid (no float parameter without a step)."""
        return all(p.gridable for p in self._params)

    def _require_grid(self) -> None:
        continuous = [p.name for p in self._params if not p.gridable]
        if continuous:
            raise ValueError(f"not a finite grid: float parameter(s) without step: {', '.join(continuous)}")

    def grid_size(self) -> int:
        """Number of configurations :meth:`all_configs` yields, counted without listing them."""
        self._require_grid()

        def count(i: int, env: dict[str, Any]) -> int:
            if i == len(self._params):
                return 1
            p = self._params[i]
            if p.when is not None and not self._condition(p, env):
                return count(i + 1, {**env, p.name: None})
            if p.name in self._referenced:
                return sum(count(i + 1, {**env, p.name: v}) for v in p.values())
            return p.size() * count(i + 1, env)

        return count(0, {})

    def all_configs(self) -> Iterator[dict[str, Any]]:
        """Every configuration of the grid (``when`` honoured), as parameter dicts.

        Check :meth:`grid_size` first: a space of a dozen parameters easily has millions.
        """
        self._require_grid()
        params = self._params
        domains = [p.values() for p in params]

        def walk(i: int, current: dict[str, Any], env: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(params):
                yield dict(current)
                return
            p = params[i]
            if p.when is not None and not self._condition(p, env):
                env[p.name] = None
                yield from walk(i + 1, current, env)
                return
            for value in domains[i]:
                current[p.name] = env[p.name] = value
                yield from walk(i + 1, current, env)
            del current[p.name]

        return walk(0, {}, {})

    def _condition(self, p: _Param, env: Mapping[str, Any]) -> bool:
        assert p.when is not None
        try:
            return bool(p.when.evaluate(env))
        except ExprError as exc:
            raise SpaceError(self.source, [(f"parameters.{p.name}.when", str(exc))]) from None

    # ---- output forms

    def unit(
        self,
        params: Mapping[str, Any],
        *,
        header: Iterable[str] = (),
        description: str | None = None,
    ) -> str:
        """The systemd unit of ``params``, with the space's ``launch.unit`` settings."""
        from tuner.units import render_systemd_unit

        settings = self.spec.launch.unit
        return render_systemd_unit(
            self.render(params),
            description=description or settings.description or f"{self.spec.engine} server ({self.name})",
            header=list(header),
            python=self.spec.launch.python,
            user=settings.user,
            working_directory=settings.working_directory,
            environment_file=settings.environment_file,
        )

    def shell(self, params: Mapping[str, Any]) -> str:
        """A copy-pasteable shell command of ``params``."""
        from tuner.units import render_shell

        return render_shell(self.render(params))

    def __repr__(self) -> str:
        return f"Space({self.name!r}, {len(self._params)} parameters, source={self.source!r})"


# --------------------------------------------------------------------------- files


def _space_dirs() -> list[Path]:
    """Folders holding packaged spaces: the installed package data, then (for a source
    checkout where the package-data link is not materialised) the repository's folder."""
    dirs = [
        Path(str(resources.files("tuner") / "data" / "spaces")),
        Path(__file__).resolve().parent.parent / "search_spaces",
    ]
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and all(d.resolve() != o.resolve() for o in out):
            out.append(d)
    return out


def packaged_spaces() -> list[str]:
    """Names of the spaces that ship with tuner."""
    return sorted({p.stem for d in _space_dirs() for p in d.iterdir() if p.suffix in SPACE_SUFFIXES})


def resolve_space(name_or_path: str | Path) -> Path:
    """The file a space argument means: an existing path, else a packaged space by name
    (``kimi-k2.6-8x-rtx-pro-6000``, with or without ``.yaml``)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    name = str(name_or_path)
    if "/" not in name and "\\" not in name:
        stem = name[: -len(path.suffix)] if path.suffix in SPACE_SUFFIXES else name
        for d in _space_dirs():
            for suffix in SPACE_SUFFIXES:
                candidate = d / f"{stem}{suffix}"
                if candidate.is_file():
                    return candidate
    known = ", ".join(packaged_spaces()) or "(none)"
    what = "is a folder, not a space file" if path.is_dir() else "no such file or packaged space"
    raise SpaceError(name, [(None, f"{what}; packaged spaces: {known}")])


def load_space(path: str | Path) -> Space:
    """Load and validate a space file (a path, or a packaged space's name).

    Raises :class:`SpaceError` (a UsageError: exit code 2) naming the file and the field
    of every problem found: YAML syntax (with its line), unknown keys, wrong types, bad
    or unknown names in expressions, unknown engine/hardware/model ids.
    """
    file = resolve_space(path)
    source = str(path) if Path(path).expanduser().is_file() else str(file)
    data = _with_base(_read_yaml(file, source), file, source, seen=(file.resolve(),))
    return Space.from_dict(data, source=source, base_dir=file.parent)


def _with_base(data: Any, file: Path, source: str, seen: tuple[Path, ...]) -> Any:
    """Resolve ``extends: <space>``: the base file's document, overridden key by key.

    Mappings merge recursively; any other value (lists included) replaces the base's. The
    base is found like ``--space`` (a path relative to this file, or a packaged name).
    """
    if not isinstance(data, dict) or "extends" not in data:
        return data
    base_name = data.pop("extends")
    if not isinstance(base_name, str):
        raise SpaceError(source, [("extends", "must be a space name or a path")])
    relative = file.parent / base_name
    base_file = resolve_space(relative if relative.is_file() else base_name)
    if base_file.resolve() in seen:
        raise SpaceError(source, [("extends", f"circular: {base_name} extends this file again")])
    base = _with_base(
        _read_yaml(base_file, str(base_file)), base_file, str(base_file), (*seen, base_file.resolve())
    )
    if not isinstance(base, dict):
        raise SpaceError(source, [("extends", f"{base_file} is not a mapping")])
    return _merge(base, data)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out
