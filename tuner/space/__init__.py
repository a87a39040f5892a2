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

Modules: :mod:`~tuner.space.schema` (the file model, one class per parameter kind),
:mod:`~tuner.space.loader` (files, ``extends``, packaged spaces),
:mod:`~tuner.space.conditions` (the ``when`` walk), :mod:`~tuner.space.runtime`
(:class:`Space`), :mod:`~tuner.space.errors` (:class:`SpaceError`).
"""

from tuner.space.errors import SpaceError
from tuner.space.loader import DEFAULT_SPACE, load_space, packaged_spaces, resolve_space
from tuner.space.runtime import Space
from tuner.space.schema import (
    SPACE_SUFFIXES,
    Bundle,
    Constraint,
    Launch,
    Parameter,
    SpaceFile,
    UnitSettings,
)

__all__ = [
    "DEFAULT_SPACE",
    "SPACE_SUFFIXES",
    "Bundle",
    "Constraint",
    "Launch",
    "Parameter",
    "Space",
    "SpaceError",
    "SpaceFile",
    "UnitSettings",
    "load_space",
    "packaged_spaces",
    "resolve_space",
]
