"""``tuner search``: run (or resume) the study to its budget."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from tuner import logging as tuner_logging
from tuner.annotate import TrialAnnotator, default_artifact_dir
from tuner.backends import DEFAULT_HEALTH_TIMEOUT_S, Backend, Interrupted, LauncherBackend, SimBackend
from tuner.errors import UsageError
from tuner.launchers.ssh import SshTransport
from tuner.objectives import Objective
from tuner.preflight import adopt_host_release
from tuner.progress import Progress
from tuner.settings import Settings
from tuner.settings import load as load_settings
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space
from tuner.study import STUDIES_DIR, Search, best_record, default_storage_url, default_study_name, redact_url


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="run the study: one server launch per trial, to a budget of finished trials",
        description="Search the launch settings of a search space with an Optuna study. Each trial "
        "launches the server, sweeps the workload's concurrency levels (lowest first, pruning weak "
        "configurations early) and stores the result. Running the same command again resumes the "
        "study; --budget N ends it with N finished trials. Without --backend, the built-in simulator "
        "of the space's hardware runs the trials.",
    )
    p.add_argument(
        "--space",
        default=DEFAULT_SPACE,
        help=f"search-space file or packaged space name (default {DEFAULT_SPACE})",
    )
    p.add_argument("--budget", type=int, default=40, help="finished trials in the whole study (default 40)")
    p.add_argument("--study", help="study name (default: derived from the space and objective)")
    p.add_argument("--storage", help="Optuna storage URL (default sqlite:///studies/<study>.db)")
    p.add_argument(
        "--objective",
        choices=("peak", "single", "goodput", "pareto"),
        help="what to maximise (default: the space's objective, usually peak)",
    )
    p.add_argument(
        "--min-single-stream",
        type=float,
        metavar="TOK_S",
        help="configurations below this single-stream tok/s are infeasible",
    )
    p.add_argument("--seed", type=int, default=None, help="sampler (and simulator) seed")
    p.add_argument(
        "--backend",
        choices=("sim", "local", "ssh", "systemd"),
        default="sim",
        help="where trials run: sim (built-in simulator of the space's hardware, default), local "
        "(the space's launch command as a child process), ssh (on --ssh-host), systemd (a unit "
        "per trial, locally or on --ssh-host)",
    )
    p.add_argument(
        "--hosts",
        metavar="A,B,...",
        help="host pool for --backend ssh/systemd: ssh destinations, comma-separated (settings: TUNER_HOSTS)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="trials run at once by this process (default 1; at most one per host)",
    )
    p.add_argument(
        "--health-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds a server gets to become healthy (default {DEFAULT_HEALTH_TIMEOUT_S:.0f})",
    )
    p.add_argument("--unit-dir", metavar="DIR", help="systemd backend: where trial units are written")
    p.add_argument("--noise", type=float, default=DEFAULT_NOISE, help="simulator noise (sim backend)")
    p.add_argument("--no-prune", action="store_true", help="measure every level of every trial")
    p.add_argument("--no-reuse", action="store_true", help="re-measure configurations already measured")
    p.add_argument(
        "--no-start", action="store_true", help="do not measure the space's start configurations first"
    )
    p.add_argument(
        "--warm-start",
        choices=("sim",),
        help="sim: measure first the configurations the simulator predicts best for the space's "
        "hardware profile (or --warm-start-hardware)",
    )
    p.add_argument(
        "--warm-start-hardware",
        metavar="ID|FILE",
        help="hardware profile for --warm-start sim (default: the space's)",
    )
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    p.add_argument(
        "--log-file", type=Path, metavar="PATH", help="append a detailed log (DEBUG, timestamps) to PATH"
    )
    p.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default=None,
        help="console log level (default WARNING; settings: TUNER_LOG_LEVEL)",
    )
    p.add_argument("--no-annotate", action="store_true", help="write no dashboard notes or artifacts")
    p.set_defaults(handler=run)


def make_objective(space: Space, args: argparse.Namespace) -> Objective:
    data = {k: v for k, v in space.objective.model_dump().items() if v is not None}
    if args.objective:
        data["name"] = args.objective
    if args.min_single_stream is not None:
        data["min_single_stream"] = args.min_single_stream
    return Objective(**data)


def make_backend(space: Space, args: argparse.Namespace, study_name: str, settings: Settings) -> Backend:
    if args.noise < 0:
        raise UsageError("--noise must be >= 0")
    if args.backend == "sim":
        if not getattr(space.engine, "simulated", True):
            raise UsageError(
                f"{space.source}: engine {space.spec.engine!r} has no simulator; "
                "run it on a real server with --backend local|ssh|systemd"
            )
        return SimBackend(space.hardware, space.model, noise=args.noise)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else settings.hosts
    if args.backend == "ssh" and not hosts:
        raise UsageError("--backend ssh needs --hosts (or TUNER_HOSTS / hosts in tuner.toml)")
    timeout = args.health_timeout if args.health_timeout is not None else settings.health_timeout_s
    if timeout <= 0:
        raise UsageError("--health-timeout must be positive")
    options = {"unit_dir": args.unit_dir} if args.backend == "systemd" and args.unit_dir else {}
    pool: list = [None]
    if hosts:
        pool = [
            SshTransport(h, user=settings.ssh_user, identity_file=settings.ssh_key, port=settings.ssh_port)
            for h in hosts
        ]
    return LauncherBackend(
        args.backend,
        log_dir=STUDIES_DIR / study_name,
        health_timeout_s=timeout,
        hosts=pool,
        launcher_options=options,
        secret_env=settings.secret_env(),
    )


def run(args: argparse.Namespace) -> int:
    if args.budget < 1:
        raise UsageError("--budget must be at least 1")
    settings = load_settings()
    tuner_logging.setup(args.log_level or settings.log_level, args.log_file)
    space = load_space(resolve_space(args.space))
    objective = make_objective(space, args)
    study_name = args.study or default_study_name(space, objective)
    backend = make_backend(space, args, study_name, settings)
    release_note = adopt_host_release(space, backend)
    if release_note:
        print(release_note, flush=True)
    workers = args.workers or settings.workers
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    storage = args.storage or settings.storage_url() or default_storage_url(study_name)
    extra_start: list[dict] = []
    if args.warm_start == "sim" and not getattr(space.engine, "simulated", True):
        raise UsageError(f"--warm-start sim: engine {space.spec.engine!r} has no simulator")
    if args.warm_start == "sim":
        from tuner.profiles import ProfileError
        from tuner.warmstart import predicted_top

        try:
            extra_start = predicted_top(space, hardware_profile=args.warm_start_hardware, seed=args.seed or 0)
        except ProfileError as exc:
            raise UsageError(str(exc)) from exc
    progress = Progress(space, quiet=args.quiet)
    annotator = None if args.no_annotate else TrialAnnotator(default_artifact_dir(storage, study_name))

    def on_trial(study: optuna.Study, t: FrozenTrial) -> None:
        if annotator is not None:
            annotator(study, t)
        progress.trial_done(study, t)

    search = Search(
        space,
        backend,
        study_name=study_name,
        storage=storage,
        objective=objective,
        seed=args.seed,
        budget=args.budget,
        reuse=not args.no_reuse,
        prune=not args.no_prune,
        warm_start=not args.no_start,
        extra_start=extra_start,
        on_trial=on_trial,
        on_level=progress.level_done,
        on_start=progress.trial_started,
    )
    already = search.finished()
    print(
        f"study {study_name} ({redact_url(storage)}): space {space.name}, objective {objective.name}, "
        f"backend {backend.name}, {workers} worker(s), {already} of {args.budget} trials finished",
        flush=True,
    )
    started = time.monotonic()
    progress.start(args.budget, already)
    interrupted = False
    try:
        search.run(workers=workers)
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
    finally:
        progress.close()
    summary(search.study, objective, time.monotonic() - started, study_name, args.storage)
    if interrupted:
        print(
            "interrupted: servers stopped, the running trial recorded as interrupted and queued again; "
            "run the same command to resume",
            file=sys.stderr,
        )
        return 130
    return 0


def summary(
    study: optuna.Study, objective: Objective, elapsed: float, study_name: str, storage: str | None
) -> None:
    """The closing lines: trial counts by outcome, server time, the best and where its unit is."""
    best = best_record(study)
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        o = t.user_attrs.get("outcome", t.state.name.lower())
        counts[o] = counts.get(o, 0) + 1
    server_s = sum(float(t.user_attrs.get("server_s", 0.0)) for t in trials)
    print(
        f"\n{len(trials)} trials ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); "
        f"server time {server_s / 3600:.1f} h; this run {elapsed:.1f} s"
    )
    if best is None:
        print("no feasible configuration yet", file=sys.stderr)
        return
    launches = (
        f" (mean of {len(best.runs)} launches: " + ", ".join(f"#{n}" for n in best.runs) + ")"
        if len(best.runs) > 1
        else ""
    )
    print(f"best: trial #{best.number}, {objective.name} = {best.mean:.1f} tok/s{launches}")
    for lv in best.attrs.get("levels", []):
        print(f"  C={lv['concurrency']:3d}: {lv['output_tok_s']:8.1f} tok/s")
    print("  flags: " + " ".join(best.attrs.get("flags", [])))
    if best.attrs.get("env"):
        print("  env:   " + " ".join(f"{k}={v}" for k, v in best.attrs["env"].items()))
    where = f" --study {study_name}" + (f" --storage '{redact_url(storage)}'" if storage else "")
    engine = study.user_attrs.get("engine", "sglang")
    print(f"unit file: tuner best{where} > {engine}.service")
