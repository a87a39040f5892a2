"""Trials per minute and storage overhead per trial: 1, 2 and 4 workers, SQLite vs PostgreSQL.

    python benchmarks/scale.py [--budget 24]

Each configuration runs one study of ``--budget`` trials on the simulator (threads in
one process, as `tuner search --workers N` does). Storage overhead per trial = wall time
minus the time spent inside the simulated servers, divided by the trials, per worker.
PostgreSQL is a private server started by this script (Debian's postgresql package).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))

from _common import reference_space

from tests.postgres import pg_bin, postgres_server
from tuner.measurers import SimMeasurer
from tuner.objectives import Objective
from tuner.study import Search


class TimedSim(SimMeasurer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.spent = 0.0

    def measure(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().measure(*args, **kwargs)
        finally:
            self.spent += time.perf_counter() - t0


def run(storage: str, workers: int, budget: int, name: str) -> tuple[float, float]:
    space = reference_space()
    backend = TimedSim(space.hardware, space.model)
    search = Search(
        space, backend, study_name=name, storage=storage, objective=Objective(), seed=0, budget=budget
    )
    t0 = time.perf_counter()
    search.run(workers=workers)
    wall = time.perf_counter() - t0
    n = len(search.study.get_trials())
    per_trial_overhead = (wall * workers - backend.spent) / n
    return n / wall * 60, per_trial_overhead


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=int, default=24)
    args = ap.parse_args()
    print(f"{'storage':10s} {'workers':>7s} {'trials/min':>10s} {'overhead/trial':>14s}")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stores = {"sqlite": lambda n: f"sqlite:///{tmp}/{n}.db"}
        if pg_bin() is not None:
            url = stack.enter_context(postgres_server())
            stores["postgresql"] = lambda n: url
        for kind, make in stores.items():
            for workers in (1, 2, 4):
                name = f"{kind}-{workers}"
                rate, overhead = run(make(name), workers, args.budget, name)
                print(f"{kind:10s} {workers:7d} {rate:10.0f} {overhead * 1e3:11.0f} ms")


if __name__ == "__main__":
    main()
