"""The loaded space: sampling, validation, rendering and identity of configurations."""

from __future__ import annotations

import contextlib
import json
import keyword
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from pydantic import ValidationError

from tuner import engines, fidelity, profiles
from tuner.engines.base import Engine, LaunchSpec, format_value
from tuner.expr import FUNCTIONS, Expr, ExprError
from tuner.failures import LaunchFailure
from tuner.objectives import Objective
from tuner.space.conditions import Tunable, applicable, parse_when
from tuner.space.errors import SpaceError, validation_problems
from tuner.space.fields import Problem, kind_of
from tuner.space.parameters import Parameter, same_choice
from tuner.space.schema import SPACE_SUFFIXES, Launch, SpaceFile
from tuner.trace import TraceError
from tuner.workload import Workload


def _render_same(a: Any, b: Any) -> bool:
    """Whether two parameter values render the same (0.88 and 0.8800000000000001 do)."""
    if (
        isinstance(a, float | int)
        and isinstance(b, float | int)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return format_value(float(a)) == format_value(float(b))
    return same_choice(a, b)


def _profile_ident(ident: str, base: Path | None) -> str:
    """A profile id, or a profile file path resolved against the space file's folder."""
    if base is not None and ident.endswith(SPACE_SUFFIXES):
        candidate = base / ident
        if candidate.exists():
            return str(candidate)
    return ident


def _compile_parameters(spec: SpaceFile) -> tuple[list[Tunable], list[Problem]]:
    """The parameters whose definitions hold, with compiled conditions, and every problem:
    names expressions cannot read, domains, a flag or variable tuned twice, conditions."""
    params: list[Tunable] = []
    problems: list[Problem] = []
    names = list(spec.parameters)
    owners: dict[tuple[str, str], str] = {}
    for name, p in spec.parameters.items():
        path = f"parameters.{name}"
        if not name.isidentifier() or keyword.iskeyword(name) or name in FUNCTIONS:
            problems.append(
                (
                    path,
                    f"{name!r} cannot be a parameter name: expressions need an "
                    f"identifier that is not a keyword or {', '.join(FUNCTIONS)}",
                )
            )
        domain = p.problems(path)
        problems.extend(domain)
        flags, env_vars = p.targets()
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
        when, when_problems = parse_when(name, p.when, names) if p.when is not None else (None, [])
        problems.extend(when_problems)
        if not domain:
            params.append(Tunable(name, p, when))
    return params, problems


class Space:
    """A loaded, validated search space (see :mod:`tuner.space` for its semantics)."""

    def __init__(self, spec: SpaceFile, *, source: str = "<space>", base_dir: Path | None = None):
        self.spec = spec
        self.source = source
        self._params, problems = _compile_parameters(spec)
        names = list(spec.parameters)

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

        self.target = self.proxy = spec.workload
        base = base_dir or Path.cwd()
        try:
            self.target = spec.workload.resolved(base)
        except TraceError as exc:
            problems.append(("workload.trace", str(exc)))
        else:
            try:
                self.proxy = fidelity.proxy_of(self.target, spec.proxy, base)
            except ValueError as exc:  # a TraceError too
                problems.append(("proxy", str(exc)))

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
        self._check_start_points()
        self._check_constraints()

    def _check_constraints(self) -> None:
        """Evaluate every constraint on sample configurations (the defaults, the start
        points, each parameter's first and last values): an expression that fails on every
        one of them (``1/0 == 1``, a comparison of a string with a number) is a problem of
        the file, reported now rather than at a trial of a study that already exists. One
        that fails only on some values (an unset parameter) is reported when those come."""
        samples = [self.complete({}), *(self.complete(p) for p in self.spec.start)]
        for name, values in self.value_lists().items():
            for v in values[:1] + values[-1:]:
                with contextlib.suppress(SpaceError, ValueError):
                    samples.append(self.complete({name: v}))
        problems: list[Problem] = []
        envs = []
        for sample in samples:
            with contextlib.suppress(SpaceError, ValueError):
                active = self.effective(sample)
                envs.append({p.name: active.get(p.name) for p in self._params})
        for i, (expr, _) in enumerate(self._constraints):
            errors = []
            for env in envs:
                try:
                    expr.evaluate(env)
                except ExprError as exc:
                    errors.append(str(exc))
                else:
                    break
            if envs and len(errors) == len(envs):
                problems.append(
                    (f"constraints[{i}].expr", f"fails on every sample configuration: {errors[0]}")
                )
        if problems:
            raise SpaceError(self.source, problems)

    def _check_start_points(self) -> None:
        """Refuse the file if a ``start`` configuration names an unknown parameter or a value
        outside a domain (fields as ``start[i].name``)."""
        problems: list[Problem] = []
        for i, point in enumerate(self.spec.start):
            unknown = sorted(set(point) - set(self._by_name))
            problems += [(f"start[{i}].{n}", "no such parameter in this space") for n in unknown]
            if unknown:
                continue
            try:
                self.effective(self.complete(point))
            except SpaceError as exc:
                problems += [
                    (f"start[{i}]" + (f".{f.split('.', 1)[1]}" if f else ""), m) for f, m in exc.problems
                ]
        if problems:
            raise SpaceError(self.source, problems)

    # ---- construction

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<space>", base_dir: Path | None = None) -> Space:
        """Validate a parsed document (the YAML's top-level mapping)."""
        if not isinstance(data, dict):
            raise SpaceError(source, [(None, f"a space file must be a mapping, not {kind_of(data)}")])
        try:
            spec = SpaceFile.model_validate(data)
        except ValidationError as exc:
            raise SpaceError(source, validation_problems(exc)) from None
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
        """The target workload: what the deployment serves (trace paths resolved)."""
        return self.target

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

    def _applicable(self, env: dict[str, Any], start: int = 0) -> Iterator[tuple[int, Tunable]]:
        return applicable(self._params, env, source=self.source, start=start)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample a configuration from ``trial`` (define-by-run, in file order).

        A parameter whose ``when`` is false is not sampled and is absent from the result.
        """
        params: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for _, p in self._applicable(env):
            params[p.name] = env[p.name] = p.spec.suggest(trial, p.name)
        return params

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with every applicable parameter that is missing set to the first value of
        its domain (for categoricals listing ``null`` first: the engine's default)."""
        out: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for _, p in self._applicable(env):
            out[p.name] = env[p.name] = params[p.name] if p.name in params else p.spec.default()
        return out

    def start_points(self) -> list[dict[str, Any]]:
        """The file's ``start`` configurations, completed and validated."""
        return [self.effective(self.complete(point)) for point in self.spec.start]

    def value_lists(self) -> dict[str, list[Any]]:
        """Every value of every gridable parameter, by name (for exhaustive or local search)."""
        return {p.name: p.spec.values() for p in self._params if p.spec.gridable}

    def capacity_parameters(self) -> frozenset[str]:
        """Parameters that set one of the engine's capacity flags
        (:attr:`~tuner.engines.base.Engine.capacity_flags`)."""
        flags = self.engine.capacity_flags
        return frozenset(name for name, p in self.parameters.items() if getattr(p, "flag", None) in flags)

    def memory_fraction_parameter(self) -> str | None:
        """The parameter that sets the engine's memory fraction
        (:attr:`~tuner.engines.base.Engine.memory_fraction_flag`); None without one."""
        flag = self.engine.memory_fraction_flag
        named = (n for n, p in self.parameters.items() if flag and getattr(p, "flag", None) == flag)
        return next(named, None)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Optuna distribution of every parameter (regardless of ``when``), by name."""
        return {p.name: p.spec.distribution() for p in self._params}

    def effective(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters that apply to ``params`` (``when`` true), validated, in file order.

        Values of parameters whose ``when`` is false are dropped. Raises
        :class:`SpaceError` for unknown names, missing values or values outside a domain.
        """
        unknown = sorted(set(params) - set(self._by_name))
        problems: list[Problem] = [(f"parameters.{n}", "no such parameter in this space") for n in unknown]
        active: dict[str, Any] = {}
        env: dict[str, Any] = {}
        for _, p in self._applicable(env):
            if p.name not in params:
                problems.append((f"parameters.{p.name}", "no value given"))
                continue
            value = params[p.name]
            problem = p.spec.problem(value)
            if problem:
                problems.append((f"parameters.{p.name}", problem))
            active[p.name] = env[p.name] = value
        if problems:
            raise SpaceError(self.source, problems)
        return active

    def coerce(self, assignments: Mapping[str, str]) -> dict[str, Any]:
        """Turn ``{name: text}`` (command-line ``name=value`` pairs) into typed values."""
        out: dict[str, Any] = {}
        problems: list[Problem] = []
        for name, text in assignments.items():
            p = self._by_name.get(name)
            if p is None:
                problems.append((f"parameters.{name}", "no such parameter in this space"))
                continue
            try:
                out[name] = p.spec.coerce(text)
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
                p.spec.apply(active[p.name], flags, env)
        return flags, env

    def render(self, params: Mapping[str, Any]) -> LaunchSpec:
        """The launch for ``params``: fixed command and flags, tunables overriding them."""
        flags, env = self._resolve(params)
        return self.engine.render(self.spec.launch.command, flags, env)

    def key(self, params: Mapping[str, Any]) -> str:
        """Canonical identity of a configuration: the engine's rendering of it with the flags
        in sorted order, and its environment sorted. Two parameter sets that launch the same
        server have the same key (a ``when``-skipped parameter, or 0.88 versus
        0.8800000000000001)."""
        flags, env = self._resolve(params)
        spec = self.engine.render(self.spec.launch.command, dict(sorted(flags.items())), env)
        return json.dumps({"argv": spec.argv, "env": sorted(spec.env.items())}, separators=(",", ":"))

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
        return all(p.spec.gridable for p in self._params)

    def _require_grid(self) -> None:
        continuous = [p.name for p in self._params if not p.spec.gridable]
        if continuous:
            raise ValueError(f"not a finite grid: float parameter(s) without step: {', '.join(continuous)}")

    def grid_size(self) -> int:
        """Number of configurations :meth:`all_configs` yields, counted without listing them."""
        self._require_grid()

        def count(start: int, env: dict[str, Any]) -> int:
            step = next(self._applicable(env, start), None)
            if step is None:
                return 1
            i, p = step
            if p.name not in self._referenced:
                return p.spec.size() * count(i + 1, env)
            total = 0
            for value in p.spec.values():
                env[p.name] = value
                total += count(i + 1, env)
            return total

        return count(0, {})

    def all_configs(self) -> Iterator[dict[str, Any]]:
        """Every configuration of the grid (``when`` honoured), as parameter dicts.

        Check :meth:`grid_size` first: a space of a dozen parameters easily has millions.
        """
        self._require_grid()
        domains = [p.spec.values() for p in self._params]

        def walk(start: int, current: dict[str, Any], env: dict[str, Any]) -> Iterator[dict[str, Any]]:
            step = next(self._applicable(env, start), None)
            if step is None:
                yield dict(current)
                return
            i, p = step
            for value in domains[i]:
                current[p.name] = env[p.name] = value
                yield from walk(i + 1, current, env)
            del current[p.name]

        return walk(0, {}, {})

    # ---- output forms

    def unit(
        self,
        params: Mapping[str, Any],
        *,
        header: Iterable[str] = (),
        description: str | None = None,
    ) -> str:
        """The systemd unit of ``params``, with the space's ``launch.unit`` settings."""
        from tuner.systemd_unit import render_systemd_unit

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
        from tuner.systemd_unit import render_shell

        return render_shell(self.render(params))

    def __repr__(self) -> str:
        return f"Space({self.name!r}, {len(self._params)} parameters, source={self.source!r})"
