"""Argument helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import math
import shlex

from tuner.errors import UsageError
from tuner.workload import Workload, parse_levels


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """The sweep options of ``tuner simulate`` and ``tuner bench``."""
    g = p.add_argument_group("workload")
    g.add_argument(
        "--levels",
        default="1,32,64,128,192,256",
        help="concurrency levels, comma-separated (default: the reference sweep)",
    )
    g.add_argument("--max-tokens", type=int, default=2048, help="max tokens per request (default 2048)")
    g.add_argument(
        "--single-max-tokens", type=int, default=512, help="max tokens of the C=1 level (default 512)"
    )
    g.add_argument(
        "--prompt-tokens",
        type=int,
        default=None,
        help="prompt length in tokens (default: short chat prompts)",
    )
    g.add_argument(
        "--ignore-eos",
        action="store_true",
        help="every request generates exactly max tokens, as benchmark clients do",
    )
    g.add_argument(
        "--workload",
        choices=("burst", "closed-loop", "poisson"),
        default="burst",
        help="burst: C at once (default); closed-loop: C in flight for --duration; "
        "poisson: open loop at --rate x C requests/s",
    )
    g.add_argument("--duration", type=float, default=60.0, help="closed-loop/poisson window, seconds")
    g.add_argument("--rate", type=float, default=0.05, help="poisson: requests/s per unit of level")


def workload_from_args(args: argparse.Namespace) -> Workload:
    try:
        levels = parse_levels(args.levels)
        return Workload(
            kind=args.workload,
            levels=levels,
            max_tokens=args.max_tokens,
            single_max_tokens=args.single_max_tokens,
            prompt_tokens=args.prompt_tokens,
            ignore_eos=args.ignore_eos,
            duration_s=args.duration,
            rate=args.rate,
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise UsageError(str(exc)) from exc


def parse_env_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` to a dict; a pair without ``=`` is a usage error."""
    env: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def server_flags(words: list[str]) -> list[str]:
    """The server flags given after ``--`` (or as one quoted command line)."""
    flags = list(words)
    if flags and flags[0] == "--":
        flags = flags[1:]
    if len(flags) == 1 and " " in flags[0]:
        flags = shlex.split(flags[0])
    return flags


def add_study_args(p: argparse.ArgumentParser) -> None:
    """``--study`` and ``--storage`` of the commands that read an existing study."""
    p.add_argument("--study", help="study name (default: the newest study in ./studies)")
    p.add_argument(
        "--storage",
        help="Optuna storage URL (default: the storage setting: TUNER_STORAGE, .env or tuner.toml; "
        "else the study's database in ./studies)",
    )


def study_storage(args: argparse.Namespace) -> str | None:
    """The storage a command reads, exactly as ``tuner search`` finds it: ``--storage``,
    else the ``storage`` setting (``TUNER_STORAGE``, ``.env``, ``tuner.toml``), else None
    (the study's database under ./studies)."""
    from tuner.settings import load as load_settings

    return args.storage or load_settings().storage_url()


#: Largest simulator noise accepted: a relative standard deviation of 100%.
MAX_NOISE = 1.0
#: Seeds are numpy seeds: 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1


def check_seed_and_noise(seed: int | None, noise: float) -> None:
    """Refuse a seed numpy cannot take and a noise that is not a relative deviation."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be 0..{MAX_SEED}, not {seed}")
    if not (math.isfinite(noise) and 0 <= noise <= MAX_NOISE):
        raise UsageError(f"--noise must be between 0 and {MAX_NOISE:g} (a relative deviation), not {noise:g}")
