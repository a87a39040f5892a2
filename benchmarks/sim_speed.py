"""CPU time to simulate the whole six-level reference sweep (goal: under 1 s on 2 cores).

python benchmarks/sim_speed.py
"""

from __future__ import annotations

import time

from tuner.metrics import summarize
from tuner.sim.calibration import REFERENCE_FLAGS, REFERENCE_NCCL, REFERENCE_WORKLOAD
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep


def main() -> None:
    for layout in ("--tp-size 8", "--tp-size 8 --ep-size 8", "--pp-size 8"):
        model = PerfModel.build(
            "rtx-pro-6000-pcie-x8", "kimi-k2.6", f"{REFERENCE_FLAGS} {layout}", REFERENCE_NCCL
        )
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            levels = simulate_sweep(model, REFERENCE_WORKLOAD, seed=1)
            best = min(best, time.process_time() - t0)
        tokens = sum(summarize(lv).output_tokens for lv in levels)
        print(f"{layout:28s} {tokens:>9,d} tokens  {best:.3f} s CPU  ({tokens / best / 1e6:.1f} M tok/s)")


if __name__ == "__main__":
    main()
