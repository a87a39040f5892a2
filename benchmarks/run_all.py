"""Run every benchmark of the tuner and rewrite the results section of the README.

    python benchmarks/run_all.py [--seeds 20] [--budget 40] [--jobs 2] [--skip-best] [--no-readme]

In order: the best of the reference space (space_best.py; ``--skip-best`` keeps the
stored one), the model-guided start's priors (warm_start.py), then every study of
search_efficiency.py, server_time.py and warm_start.py in one pool of ``--jobs`` worker
processes (the tuner's default studies are shared by all three), then sweep_fidelity.py.
Each writes its JSON to benchmarks/results/; the Markdown block written between
``<!-- results:start -->`` and ``<!-- results:end -->`` in README.md (and to
benchmarks/results/results.md) carries the date, the machine and the command. On two
cores the whole run takes about half an hour.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import search_efficiency
import server_time
import space_best
import sweep_fidelity
import warm_start
from _common import RESULTS, load_best, machine, reference_space, write_result
from _tables import format_targets, markdown_table

from studies import ARG_CHECK_S, GRID_TIERS, HANDPICKED, run_jobs
from tuner.measurers import SIM_STARTUP_S
from tuner.sim.serving import DEFAULT_NOISE

README = Path(__file__).parent.parent / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
#: Line width of the README's prose.
WIDTH = 90


def _tiers() -> str:
    def show(d: dict[str, Any]) -> str:
        return " ".join(f"{k}={v}" for k, v in d.items() if k != "enable_eplb")

    return "; ".join(f"{name}: " + " | ".join(show(v) for v in values) for name, values in GRID_TIERS)


def _wrap(text: str, bullet: bool = False) -> str:
    """A paragraph (or a ``- `` bullet) wrapped like the rest of the README."""
    return textwrap.fill(text, width=WIDTH, subsequent_indent="  " if bullet else "", break_on_hyphens=False)


def markdown(
    eff: dict[str, Any], st: dict[str, Any], fid: dict[str, Any], ws: dict[str, Any], meta: dict[str, Any]
) -> str:
    """The README's results block (``meta``: date, machine, minutes, command, seeds of the run)."""
    seeds = meta["seeds"]
    targets = [*eff["targets"], *st["targets"]]
    intro = (
        f"Measured {meta['date']} on {meta['machine']} by `{meta['command']}` ({meta['minutes']:.0f} min). "
        "All on the simulated "
        f"reference space (Kimi K2.6 on 8x RTX PRO 6000 PCIe) with the simulator's noise on "
        f"({DEFAULT_NOISE:.0%} per launch and per step), {seeds} seeds per strategy, budget "
        f"{eff['budget']} trials. A study's recommendation (the configuration `tuner best` "
        f"picks: best estimate, its launches pooled with the study's by the additive model, less "
        f"one standard error) is scored by its noise-free "
        f"value against the best of the space, "
        f"{eff['best']:.0f} tok/s (`benchmarks/space_best.py`). Server time = simulated start-ups "
        f"({SIM_STARTUP_S:.0f} s each) + measured levels. JSON: `benchmarks/results/`. A study "
        "is chaotic in its inputs: the same code and seeds on another machine (another BLAS "
        "build's rounding) run other studies, so a share of seeds is one binomial draw and the "
        "targets give its 95% interval."
    )
    strategies = [
        "- tuner default: `Search` as `tuner search` builds it (the space's start points, the "
        "incumbent-local sampler, rule check, pruning, reuse, the additive model's pick and the "
        "leaders launched again in the last trials).",
        "- random search: Optuna's RandomSampler in the same trial logic, no start points; run to "
        f"{eff['random_budget']} trials to measure (or bound) its median trials, its budget-"
        f"{eff['budget']} figures are those studies' first {eff['budget']} trials.",
        f"- tiered grid: {_tiers()}; 2 x 2 x 2 = 8 candidates, other flags at SGLang's defaults, "
        "no NCCL variables.",
        "- plain TPE: `TPESampler()` with its defaults, no start points, pruning, reuse or rule "
        "check; an impossible combination is launched and fails (an Optuna FAIL, which TPE "
        f"ignores; {ARG_CHECK_S:.0f} s of server time when SGLang refuses the arguments).",
        "- hand-picked: " + ", ".join(HANDPICKED) + ", with the reference flags of "
        "`tuner/sim/calibration.py` (mem-fraction 0.88, 256 running requests, 8 decode steps).",
    ]
    return "\n".join(
        [
            _wrap(intro),
            "",
            "**Targets**",
            "",
            format_targets(targets, markdown=True),
            "",
            _wrap(
                "**Search efficiency** (`benchmarks/search_efficiency.py`). The tuner screens trials "
                "on the space's proxy (C=1 and C=256 of the target) and measures its finalists on "
                "the target; the peers measure every trial on the target. Trials are Optuna trials "
                "(a rejected or reused one costs no server time)."
            ),
            "",
            markdown_table(search_efficiency.HEADER, search_efficiency.table_rows(eff)),
            "",
            *(_wrap(n) for n in search_efficiency.notes(eff)),
            "",
            *(_wrap(b, bullet=True) for b in strategies),
            "",
            _wrap(
                "**Server time per study** (`benchmarks/server_time.py`): the default studies with "
                "each saving switched off in turn, and all three together."
            ),
            "",
            markdown_table(server_time.HEADER, server_time.table_rows(st)),
            "",
            *(_wrap(n) + "\n" for n in server_time.notes(st)),
            _wrap(
                f"**Sweep fidelity** (`benchmarks/sweep_fidelity.py`): the default proxy "
                f"(C={sweep_fidelity.describe(reference_space().proxy)}) against the full reference "
                "sweep (C=1@512, 32..256@2048, "
                f"noise off) over {fid['configs']} random launchable configurations."
            ),
            "",
            markdown_table(sweep_fidelity.HEADER, sweep_fidelity.table_rows(fid)),
            "",
            _wrap(
                "**Model-guided start** (`benchmarks/warm_start.py`, `tuner/warmstart.py`): the 5 "
                "configurations the simulator ranks best with a deliberately wrong hardware profile, "
                "measured after the space's start points; the studies run on the true profile."
            ),
            "",
            markdown_table(warm_start.HEADER, warm_start.table_rows(ws)),
            "",
            *(_wrap(n) for n in warm_start.notes(ws)),
        ]
    )


def rewrite_readme(block: str, path: Path = README) -> None:
    """Replace what lies between the results markers (the markers stay)."""
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path}: markers {START} / {END} not found")
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    path.write_text(pattern.sub(lambda _: f"{START}\n{block}\n{END}", text, count=1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--random-budget", type=int, default=120)
    ap.add_argument("--configs", type=int, default=200, help="configurations of the sweep-fidelity test")
    ap.add_argument("--trials", type=int, default=300, help="predictions per warm-start prior")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--skip-best", action="store_true", help="keep benchmarks/results/space_best.json")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite README.md")
    ap.add_argument(
        "--render", action="store_true", help="run nothing: rewrite the README from the stored results"
    )
    args = ap.parse_args(argv)
    if args.render:
        render(args.no_readme)
        return
    t0 = time.perf_counter()

    if not args.skip_best:
        print("== best of the space", flush=True)
        space_best.main([])
    best = load_best()["value"]

    print("== model-guided start: priors", flush=True)
    prior = warm_start.priors(args.trials, args.jobs)

    print("== studies", flush=True)
    jobs = {
        "eff": search_efficiency.jobs(args.seeds, args.budget, args.random_budget),
        "st": server_time.jobs(args.seeds, args.budget),
        "ws": warm_start.jobs(args.seeds, args.budget, prior),
    }
    results = run_jobs([j for js in jobs.values() for j in js], args.jobs)
    by_key = {r.job.key: r for r in results}
    eff = search_efficiency.analyse(
        [by_key[j.key] for j in jobs["eff"]], best, args.budget, args.random_budget
    )
    st = server_time.analyse([by_key[j.key] for j in jobs["st"]], best, args.budget)
    ws = warm_start.analyse([by_key[j.key] for j in jobs["ws"]], best, args.budget, prior)
    for name, summary in (("search_efficiency", eff), ("server_time", st), ("warm_start", ws)):
        write_result(name, summary)

    print("== sweep fidelity", flush=True)
    fid = sweep_fidelity.run(args.configs, 0.0, args.jobs)
    write_result("sweep_fidelity", fid)

    defaults = ap.parse_args([])
    changed = [
        f"--{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f" {v}")
        for k, v in vars(args).items()
        if v != getattr(defaults, k)
    ]
    meta = {
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "minutes": (time.perf_counter() - t0) / 60,
        "command": " ".join(["python benchmarks/run_all.py", *changed]),
        "seeds": args.seeds,
    }
    write_result("run_all", meta)
    for text in (
        search_efficiency.text(eff),
        server_time.text(st),
        sweep_fidelity.text(fid),
        warm_start.text(ws),
    ):
        print("\n" + text)
    publish(markdown(eff, st, fid, ws, meta), args.no_readme)


def publish(block: str, no_readme: bool) -> None:
    """Write the block to benchmarks/results/results.md and (unless told not to) the README."""
    (RESULTS / "results.md").write_text(block + "\n")
    if not no_readme:
        rewrite_readme(block)
        print("\nREADME.md results section rewritten")


def render(no_readme: bool) -> None:
    """Rebuild the results block from the stored JSON of the last full run."""
    stored = {
        name: json.loads((RESULTS / f"{name}.json").read_text())
        for name in ("search_efficiency", "server_time", "sweep_fidelity", "warm_start", "run_all")
    }
    block = markdown(
        stored["search_efficiency"],
        stored["server_time"],
        stored["sweep_fidelity"],
        stored["warm_start"],
        stored["run_all"],
    )
    print(block)
    publish(block, no_readme)


if __name__ == "__main__":
    main()
