"""An additive model of what each parameter value does to the objective, learnt from every launch.

A launch measures all of a configuration's values at once, with a few percent of run-to-run
noise, while the knobs that separate the best configurations often matter by 1-2%: less
than one launch can resolve. Pooling resolves it: a value's effect is seen in every
configuration that has it. A walk around the best configuration changes one knob at a
time, so by the end of a study a knob that costs 1.4% (one decode step per scheduler round
instead of 16, on the reference space) has been measured in many configurations that are
otherwise alike.

The model: log(objective) = intercept + one effect per (parameter, value) + one deviation
per configuration + noise. The effects carry the pooled evidence; the per-configuration
deviation (prior :data:`CONFIGURATION_PRIOR`) is what the sum of effects misses (the
interactions: a memory fraction that only fits with a smaller batch cap), learnt from that
configuration's own launches. Every term has a normal prior and the noise is the study's
run-to-run noise (see :func:`tuner.estimates.noise`), so the posterior is exact (Bayesian
linear regression): a configuration's value is its own launches' evidence, shrunk towards
what its parameter values did elsewhere, with a standard deviation that says how sure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Prior standard deviation of one parameter value's effect on log(objective): +-15% before
#: any evidence. On the reference space the one-change effects around good configurations
#: span 0 (most NCCL knobs) to -0.7 (EPLB), with most under 0.02 in size
#: (benchmarks/space_best.py's neighbourhood).
EFFECT_PRIOR = 0.15
#: Prior standard deviation of a configuration's deviation from the sum of its values'
#: effects (the interactions), in log(objective): a little above one launch's noise (2%), so
#: a configuration's single launch counts about twice as much as the pooled prediction. Over
#: 60 seeds of the reference study (benchmarks/search_efficiency.py's setting), 0.01, 0.02
#: and 0.03 reach within 2% of the space's best in 49, 52 and 52 seeds (incumbent margin 2%);
#: with the 1% margin, 0.02 and 0.03 in 51 and 55.
CONFIGURATION_PRIOR = 0.03
#: Prior standard deviation of the intercept: effectively free.
INTERCEPT_PRIOR = 100.0

_INTERCEPT = ("", "")
_CONFIGURATION = "\x00configuration"


@dataclass(frozen=True)
class Observation:
    """One launch: the configuration's parameters, its identity, and the objective it
    measured (> 0)."""

    params: Mapping[str, Any]
    key: str
    value: float


class Effects:
    """The model's posterior: mean and covariance over the intercept, the effect of every
    parameter value seen and the deviation of every configuration measured."""

    def __init__(
        self,
        columns: dict[tuple[str, str], int],
        values: dict[tuple[str, str], Any],
        mean: np.ndarray,
        cov: np.ndarray,
    ):
        self._columns = columns
        self._values = values
        self._mean = mean
        self._cov = cov

    def values(self, name: str) -> list[Any]:
        """The values of a parameter that the observations measured."""
        return [v for (n, _), v in self._values.items() if n == name]

    def effect(self, name: str, value: Any) -> float:
        """Posterior mean of a measured value's effect on log(objective)."""
        return float(self._mean[self._columns[(name, repr(value))]])

    def spread_sum_of_squares(self, name: str) -> tuple[float, int]:
        """Posterior expectation of the sum of squared deviations of a parameter's measured
        effects from their mean, and how many values it sums over. The expectation adds the
        effects' posterior covariance to the spread of their means: a knob measured only in
        distant configurations has its means shrunk towards 0, which says "not known", not
        "flat"."""
        cols = [self._columns[key] for key in self._values if key[0] == name]
        n = len(cols)
        if n == 0:
            return 0.0, 0
        means = self._mean[cols]
        centred = np.eye(n) - 1.0 / n
        cov = self._cov[np.ix_(cols, cols)]
        ss = float(np.sum((means - means.mean()) ** 2)) + float(np.trace(centred @ cov @ centred))
        return ss, n

    def gain(self, name: str, current: Any, other: Any) -> tuple[float, float]:
        """Posterior mean and standard deviation of the change in log(objective) when
        parameter ``name`` goes from ``current`` to ``other`` (a measured value); a value no
        launch measured adds :data:`EFFECT_PRIOR` to the uncertainty."""
        mean, sd, unmeasured = self.change({name: current}, {name: other})
        return mean, math.sqrt(sd**2 + len(unmeasured) * EFFECT_PRIOR**2)

    def change(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[float, float, list[str]]:
        """Posterior mean and standard deviation of the change in log(objective) from the
        values ``before`` to the values ``after`` of the same parameters, where a parameter
        missing on one side does not apply there (its effect is 0: the EPLB setting that
        vanishes with expert parallelism takes its effect along), and the names of the
        parameters with a value on either side that no launch measured (their uncertainty
        is the caller's)."""
        a = np.zeros(len(self._mean))
        unmeasured: list[str] = []
        for name in set(before) | set(after):
            if name in after:
                col = self._columns.get((name, repr(after[name])))
                if col is None:
                    unmeasured.append(name)
                else:
                    a[col] += 1.0
            if name in before:
                col = self._columns.get((name, repr(before[name])))
                if col is None:
                    unmeasured.append(name)
                else:
                    a[col] -= 1.0
        return float(a @ self._mean), math.sqrt(max(float(a @ self._cov @ a), 0.0)), sorted(set(unmeasured))

    def predict(self, params: Mapping[str, Any], key: str | None = None) -> tuple[float, float]:
        """Posterior mean and standard deviation of log(objective) of a configuration."""
        a = np.zeros(len(self._mean))
        a[self._columns[_INTERCEPT]] = 1.0
        prior_var = 0.0
        for name, value in params.items():
            col = self._columns.get((name, repr(value)))
            if col is None:
                prior_var += EFFECT_PRIOR**2
            else:
                a[col] = 1.0
        col = self._columns.get((_CONFIGURATION, key)) if key is not None else None
        if col is None:
            prior_var += CONFIGURATION_PRIOR**2
        else:
            a[col] = 1.0
        return float(a @ self._mean), math.sqrt(float(a @ self._cov @ a) + prior_var)


def fit(observations: Sequence[Observation], noise: float, weights: Sequence[float] | None = None) -> Effects:
    """The posterior of the model given ``observations`` and the relative run-to-run
    ``noise`` (the standard deviation of log(objective) of one launch). ``weights`` (0..1 per
    observation) count an observation as that share of a launch: a local fit around one
    configuration weighs distant launches less, since their effects may differ there."""
    columns: dict[tuple[str, str], int] = {_INTERCEPT: 0}
    values: dict[tuple[str, str], Any] = {}
    prior = [INTERCEPT_PRIOR]
    for o in observations:
        for name, value in o.params.items():
            if (name, repr(value)) not in columns:
                columns[(name, repr(value))] = len(columns)
                values[(name, repr(value))] = value
                prior.append(EFFECT_PRIOR)
        if (_CONFIGURATION, o.key) not in columns:
            columns[(_CONFIGURATION, o.key)] = len(columns)
            prior.append(CONFIGURATION_PRIOR)
    x = np.zeros((len(observations), len(columns)))
    x[:, 0] = 1.0
    for i, o in enumerate(observations):
        for name, value in o.params.items():
            x[i, columns[(name, repr(value))]] = 1.0
        x[i, columns[(_CONFIGURATION, o.key)]] = 1.0
    y = np.log([o.value for o in observations])
    w = np.ones(len(observations)) if weights is None else np.asarray(weights, dtype=float)
    noise_precision = max(noise, 1e-6) ** -2
    xw = x.T * (noise_precision * w)
    precision = xw @ x + np.diag(np.asarray(prior) ** -2.0)
    cov = np.linalg.inv(precision)
    mean = cov @ (xw @ y)
    return Effects(columns, values, mean, cov)
