"""Where a trial's server runs and how it is measured: one interface, several backends.

A backend takes the rendered launch (argv + env) and the workload, starts the server,
runs the sweep level by level (asking the study after each level whether to go on),
stops the server whatever happened, and returns a :class:`Measurement`. The study
code never knows whether the numbers came from the simulator or a real host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tuner.engines.base import LaunchSpec
from tuner.failures import LaunchFailure
from tuner.metrics import LevelMetrics, summarize
from tuner.objectives import Objective, goodput_tok_s
from tuner.records import LevelRecords
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, ServingSimulator
from tuner.workload import Workload

#: Called after each level with (level index, metrics, goodput); False stops the sweep.
LevelCallback = Callable[[int, LevelMetrics, float | None], bool]

#: Simulated start-up time of a server on the reference host: loading a ~600 GB checkpoint
#: from local NVMe at ~3 GB/s, plus CUDA-graph capture and warm-up (estimate; "restart
#: takes minutes" in the reference campaign).
SIM_STARTUP_S = 240.0


@dataclass
class Measurement:
    """What one launch and sweep gave."""

    status: Literal["ok", "stopped", "failed"]
    levels: list[LevelMetrics] = field(default_factory=list)
    goodputs: list[float | None] = field(default_factory=list)
    failure: LaunchFailure | None = None
    startup_s: float = 0.0
    server_s: float = 0.0
    log_tail: str = ""
    server_info: dict[str, object] = field(default_factory=dict)


class Backend(ABC):
    """Launch, measure, stop."""

    name: str

    @abstractmethod
    def measure(
        self,
        spec: LaunchSpec,
        workload: Workload,
        objective: Objective,
        *,
        trial_label: str,
        seed: int,
        on_level: LevelCallback,
    ) -> Measurement:
        """Run one trial's server and sweep; never leaves a server running."""


def sweep_levels(levels_iter, objective: Objective, on_level: LevelCallback, m: Measurement) -> None:
    """Drive a level iterator, summarising each level and stopping when the study says so."""
    for i, level in enumerate(levels_iter):
        level: LevelRecords
        metrics = summarize(level)
        gp = (
            goodput_tok_s(level, objective.ttft_s, objective.tpot_ms) if objective.name == "goodput" else None
        )
        m.levels.append(metrics)
        m.goodputs.append(gp)
        m.server_s += metrics.wall_s
        if on_level(i, metrics, gp) is False:
            m.status = "stopped"
            return


class SimBackend(Backend):
    """The built-in simulator of a host: no process, no GPU, same records as a real run."""

    name = "sim"

    def __init__(
        self, hardware: str, model: str, *, noise: float = DEFAULT_NOISE, startup_s: float = SIM_STARTUP_S
    ):
        self.hardware = hardware
        self.model = model
        self.noise = noise
        self.startup_s = startup_s

    def measure(
        self,
        spec: LaunchSpec,
        workload: Workload,
        objective: Objective,
        *,
        trial_label: str,
        seed: int,
        on_level: LevelCallback,
    ) -> Measurement:
        try:
            model = PerfModel.build(self.hardware, self.model, spec.argv, spec.env)
        except LaunchFailure as exc:
            # A failed start still costs the load time up to the failure (weights load first).
            return Measurement(
                "failed", failure=exc, startup_s=self.startup_s, server_s=self.startup_s, log_tail=exc.message
            )
        m = Measurement(
            "ok", startup_s=self.startup_s, server_s=self.startup_s, server_info=model.server_info()
        )
        sim = ServingSimulator(model, seed=seed, noise=self.noise)
        sim.warm_up(workload)
        sweep_levels((sim.run_level(workload, c) for c in workload.levels), objective, on_level, m)
        return m
