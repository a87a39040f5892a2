"""The space file's model: what a YAML document may say (parameters: :mod:`tuner.space.parameters`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tuner.objectives import Objective
from tuner.space.fields import Bundle, EnvName, FlagName, FlagValue, Scalar, Strict
from tuner.space.parameters import Parameter
from tuner.workload import Workload

#: file suffixes of spaces (and of profile files a space names)
SPACE_SUFFIXES = (".yaml", ".yml")

__all__ = ["SPACE_SUFFIXES", "Bundle", "Constraint", "Launch", "Parameter", "SpaceFile", "UnitSettings"]


class UnitSettings(Strict):
    """systemd unit settings for the rendered service (see tuner.systemd_unit)."""

    description: str | None = None
    user: str | None = None
    working_directory: str | None = None
    environment_file: str | None = None


class Launch(Strict):
    """The fixed part of every launch."""

    command: list[str] = Field(min_length=1)
    flags: dict[FlagName, FlagValue] = Field(default_factory=dict)
    env: dict[EnvName, Scalar] = Field(default_factory=dict)
    #: interpreter for rendered units: replaces command[0] when it is python/python3
    python: str | None = None
    #: pass the Hugging Face token (setting ``hf_token``) to the server as ``HF_TOKEN``
    hf_token: bool = False
    unit: UnitSettings = UnitSettings()


class Constraint(Strict):
    """A condition every configuration must meet; ``reason`` is what a violation reports."""

    expr: str
    reason: str | None = None


class SpaceFile(Strict):
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
    parameters: dict[str, Parameter] = Field(default_factory=dict)
    constraints: list[Constraint] = Field(default_factory=list)
    #: the target: what the deployment serves; a recommendation is judged on it
    workload: Workload = Workload()
    #: what trials are screened on: ``auto`` derives it from the target (its single-stream
    #: and heaviest levels, :func:`tuner.fidelity.derive_proxy`), ``none`` measures every
    #: trial on the whole target, or a workload of its own
    proxy: Literal["auto", "none"] | Workload = "auto"
    objective: Objective = Objective()
    #: configurations measured first (a warm start: e.g. the known-good settings of a hand-run
    #: campaign); a parameter left out takes the first value of its domain.
    start: list[dict[str, Any]] = Field(default_factory=list)
