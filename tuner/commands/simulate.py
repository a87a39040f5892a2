"""``tuner simulate``: one launch and sweep on the simulated host."""

from __future__ import annotations

import argparse

from tuner import profiles
from tuner.commands._common import (
    add_workload_args,
    check_seed_and_noise,
    parse_env_pairs,
    server_flags,
    workload_from_args,
)
from tuner.errors import UsageError
from tuner.failures import LaunchFailure
from tuner.metrics import summarize
from tuner.output import failure_json, format_levels_table, levels_json
from tuner.sim.model import PerfModel
from tuner.sim.serving import DEFAULT_NOISE, simulate_sweep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a sweep on the simulated host for one set of SGLang flags",
        description="Simulate one SGLang launch and concurrency sweep. Flags after `--` are SGLang's "
        "own (or a full `python3 -m sglang.launch_server ...` command line). A launch that fails "
        "(invalid args, OOM) is a result: exit 0 with status failed.",
    )
    p.add_argument(
        "--hardware",
        default="rtx-pro-6000-pcie-x8",
        help=f"hardware profile ({', '.join(profiles.available('hardware'))})",
    )
    p.add_argument(
        "--model", default="kimi-k2.6", help=f"model profile ({', '.join(profiles.available('models'))})"
    )
    add_workload_args(p)
    p.add_argument(
        "--noise",
        type=float,
        default=DEFAULT_NOISE,
        help=f"per-launch and per-step relative noise (default {DEFAULT_NOISE}; 0 = deterministic)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment (NCCL_*), repeatable")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="-- then SGLang launch flags")
    p.set_defaults(handler=run)


#: Exit status when the simulated launch fails (the reason is printed).
EXIT_LAUNCH_FAILED = 1


def run(args: argparse.Namespace) -> int:
    flags = server_flags(args.flags)
    check_seed_and_noise(args.seed, args.noise)
    workload = workload_from_args(args)
    env = parse_env_pairs(args.env)
    try:
        profiles.hardware(args.hardware)
        profiles.model(args.model)
    except profiles.ProfileError as exc:
        raise UsageError(str(exc)) from exc
    try:
        model = PerfModel.build(args.hardware, args.model, flags, env)
    except LaunchFailure as exc:
        if args.json:
            print(failure_json(exc.reason, exc.message))
        else:
            print(f"launch failed ({exc.reason}): {exc.message}")
        return EXIT_LAUNCH_FAILED
    levels = [summarize(lv) for lv in simulate_sweep(model, workload, seed=args.seed, noise=args.noise)]
    if args.json:
        print(levels_json(levels, model.server_info()))
    else:
        print(format_levels_table(model.args.label(), levels))
    return 0
