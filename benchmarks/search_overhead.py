"""Wall time of a 40-trial study on the simulator, and the tuner's own overhead per trial.

    python benchmarks/search_overhead.py

Overhead = wall time minus the time spent inside the simulated server (backend.measure).
"""

from __future__ import annotations

import tempfile
import time

from tuner.measurers import SimMeasurer
from tuner.objectives import Objective
from tuner.space import DEFAULT_SPACE, load_space, resolve_space
from tuner.study import Search


class TimedSim(SimMeasurer):
    spent = 0.0

    def measure(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().measure(*args, **kwargs)
        finally:
            TimedSim.spent += time.perf_counter() - t0


def main() -> None:
    space = load_space(resolve_space(DEFAULT_SPACE))
    with tempfile.TemporaryDirectory() as tmp:
        search = Search(
            space,
            TimedSim(space.hardware, space.model),
            study_name="bench",
            storage=f"sqlite:///{tmp}/bench.db",
            objective=Objective(),
            seed=0,
            budget=40,
        )
        t0 = time.perf_counter()
        search.run()
        wall = time.perf_counter() - t0
    n = len(search.study.get_trials())
    print(
        f"40-trial study: {wall:.1f} s wall ({n} trials); simulated servers {TimedSim.spent:.1f} s; "
        f"tuner overhead {(wall - TimedSim.spent) / n * 1e3:.0f} ms/trial"
    )


if __name__ == "__main__":
    main()
