"""``tuner search``: run (or resume) the study to its budget."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import budget, redact, trial_record, watchdog
from tuner import logging as tuner_logging
from tuner.annotate import TrialAnnotator, annotate_study, default_artifact_dir
from tuner.budget import StudyStopped
from tuner.commands._common import check_seed_and_noise
from tuner.deployment import DEFAULT_ENGINE
from tuner.errors import UsageError
from tuner.measurers import (
    DEFAULT_HEALTH_TIMEOUT_S,
    SIM_STARTUP_S,
    Interrupted,
    LauncherMeasurer,
    Measurer,
    SimMeasurer,
)
from tuner.metrics import tok_s_text
from tuner.objectives import Objective
from tuner.preflight import adopt_host_release
from tuner.progress import Progress
from tuner.settings import Settings
from tuner.settings import load as load_settings
from tuner.sim.serving import DEFAULT_NOISE
from tuner.space import DEFAULT_SPACE, Space, load_space, resolve_space
from tuner.statement import backend_of, server_time_text, speedup, statement_lines
from tuner.storage import STUDIES_DIR, check_study_name, default_storage_url, disk_full, redact_url
from tuner.study import Search, default_study_name
from tuner.transports.ssh import SshTransport
from tuner.trial_record import StudyInfo
from tuner.verdict import verdict
from tuner.wording import params_text


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
    p.add_argument(
        "--ttft-ms",
        type=float,
        metavar="MS",
        help="goodput objective: a request counts only if its time to first token is within MS "
        f"(default {Objective.model_fields['ttft_s'].default * 1000:.0f}, i.e. 2 s)",
    )
    p.add_argument(
        "--tpot-ms",
        type=float,
        metavar="MS",
        help="goodput objective: a request counts only if its time per output token is within MS "
        f"(default {Objective.model_fields['tpot_ms'].default:.0f})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the sampler and of the request set every trial serves (and of the simulator's noise)",
    )
    p.add_argument(
        "--backend",
        choices=("sim", "local", "ssh", "systemd"),
        default="sim",
        help="where trials run: sim (built-in simulator of the space's hardware, default), local "
        "(the space's launch command as a child process), ssh (on the hosts of --hosts), systemd (a "
        "unit per trial, locally or on the hosts of --hosts)",
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
    p.add_argument(
        "--startup-s",
        type=float,
        metavar="S",
        help="server start-up time for cost figures: the simulator's start-up and --dry-run's "
        f"estimate (default {SIM_STARTUP_S:.0f}; a real backend measures its own)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the expected server time and GPU hours of the budget, then stop (launches nothing)",
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=None,
        metavar="S",
        help="a level with requests in flight and no token for S seconds is a hung server: the trial "
        f"fails as hang (default {watchdog.DEFAULT_STALL_S:.0f}; settings: TUNER_STALL_S)",
    )
    p.add_argument(
        "--level-timeout",
        type=float,
        default=None,
        metavar="S",
        help="deadline of one sweep level (default: derived from the workload, "
        f"{watchdog.LEVEL_BASE_S:.0f} s + max_tokens x {watchdog.SLOWEST_STEP_S:g} s + its window; "
        "settings: TUNER_LEVEL_TIMEOUT_S)",
    )
    p.add_argument("--unit-dir", metavar="DIR", help="systemd backend: where trial units are written")
    p.add_argument("--noise", type=float, default=DEFAULT_NOISE, help="simulator noise (sim backend)")
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="measure every level of every trial whole (no pruning, no level cut short)",
    )
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
    for flag, key, value in (
        ("--ttft-ms", "ttft_s", None if args.ttft_ms is None else args.ttft_ms / 1000.0),
        ("--tpot-ms", "tpot_ms", args.tpot_ms),
    ):
        if value is not None:
            if value <= 0:
                raise UsageError(f"{flag} must be positive")
            data[key] = value
    return Objective(**data)


def make_measurer(space: Space, args: argparse.Namespace, study_name: str, settings: Settings) -> Measurer:
    check_seed_and_noise(args.seed, args.noise)
    if args.backend == "sim":
        if not space.engine.simulated:
            raise UsageError(
                f"{space.source}: engine {space.spec.engine!r} has no simulator; "
                "run it on a real server with --backend local|ssh|systemd"
            )
        startup = args.startup_s if args.startup_s is not None else SIM_STARTUP_S
        return SimMeasurer(space.hardware, space.model, noise=args.noise, startup_s=startup)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else settings.hosts
    if args.backend == "ssh" and not hosts:
        raise UsageError("--backend ssh needs --hosts (or TUNER_HOSTS / hosts in tuner.toml)")
    timeout = args.health_timeout if args.health_timeout is not None else settings.health_timeout_s
    if timeout <= 0:
        raise UsageError("--health-timeout must be positive")
    stall_s = args.stall_timeout if args.stall_timeout is not None else settings.stall_s
    level_s = args.level_timeout if args.level_timeout is not None else settings.level_timeout_s
    if stall_s <= 0 or (level_s is not None and level_s <= 0):
        raise UsageError("--stall-timeout and --level-timeout must be positive")
    options = {"unit_dir": args.unit_dir} if args.backend == "systemd" and args.unit_dir else {}
    pool: list = [None]
    if hosts:
        pool = [
            SshTransport(h, user=settings.ssh_user, identity_file=settings.ssh_key, port=settings.ssh_port)
            for h in hosts
        ]
    return LauncherMeasurer(
        args.backend,
        log_dir=STUDIES_DIR / study_name,
        health_timeout_s=timeout,
        hosts=pool,
        launcher_options=options,
        # The token reaches only servers whose space asks for it (launch.hf_token).
        secret_env=settings.secret_env() if space.launch.hf_token else {},
        stall_s=stall_s,
        level_timeout_s=level_s,
        python=space.launch.python,
    )


def claim_local_slot(space: Space) -> None:
    """``--backend local``: hold the port the space's servers listen on for this run, so a
    second search on this host refuses at once instead of stopping this one's servers."""
    from tuner.launchers.base import bind_address
    from tuner.launchers.local import claim_slot

    try:
        spec = space.render(space.complete({}))
    except ValueError:
        return  # the first trial's launch claims it
    claim_slot(bind_address(spec)[1])


#: Exit status of a study stopped before its budget (a setup error, a space that rejects
#: every proposal): nothing more can be learned until a person changes something.
EXIT_STOPPED = 3


def run(args: argparse.Namespace) -> int:
    if args.budget < 1:
        raise UsageError("--budget must be at least 1")
    if args.startup_s is not None and args.startup_s < 0:
        raise UsageError("--startup-s must be >= 0")
    settings = load_settings()
    tuner_logging.setup(args.log_level or settings.log_level, args.log_file)
    space = load_space(resolve_space(args.space))
    objective = make_objective(space, args)
    study_name = check_study_name(args.study or default_study_name(space, objective))
    measurer = make_measurer(space, args, study_name, settings)
    if args.backend == "local":
        claim_local_slot(space)
    release_note = adopt_host_release(space, measurer)
    if release_note:
        print(release_note, flush=True)
    workers = args.workers or settings.workers
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    storage = args.storage or settings.storage_url() or default_storage_url(study_name)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else list(settings.hosts)
    backend = backend_of(
        args.backend,
        hardware=space.hardware,
        model=space.model,
        command=space.launch.command,
        hosts=hosts if args.backend in ("ssh", "systemd") else [],
    )
    if args.dry_run:
        print(
            f"study {study_name}: space {space.name}, objective {objective.name} (dry run: nothing launched)"
        )
        for line in statement_lines(space.workload, backend, proxy=space.proxy):
            print(f"  {line}")
        for line in cost_lines(space, args.budget, args.startup_s, backend):
            print(line)
        return 0
    extra_start: list[dict] = []
    if args.warm_start == "sim" and not space.engine.simulated:
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
        measurer,
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
    search.study.set_user_attr(trial_record.STUDY_BACKEND, backend)
    print(
        f"study {study_name} ({redact_url(storage)}): space {space.name}, objective {objective.name}, "
        f"backend {measurer.backend}, {workers} worker(s), {already} of {args.budget} trials finished",
        flush=True,
    )
    for line in statement_lines(space.workload, backend, proxy=space.proxy):
        print(f"  {line}", flush=True)
    started = time.monotonic()
    progress.start(args.budget, already)
    interrupted = False
    stopped: StudyStopped | None = None
    try:
        search.run(workers=workers)
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
    except StudyStopped as exc:
        stopped = exc
    except Exception as exc:
        if not disk_full(exc):
            raise
        # The running trial could not be recorded: it stays RUNNING, and the rerun (this
        # process being dead) fails it as orphaned and queues its configuration again.
        stopped = StudyStopped(
            f"the file system holding the study or its logs is full ({exc.__class__.__name__})"
        )
    finally:
        progress.close()
    summary(
        search.study,
        objective,
        time.monotonic() - started,
        study_name,
        args.storage,
        start_not_run=search.start_not_run,
    )
    if annotator is not None:
        annotate_study(search.study, default_artifact_dir(storage, study_name))
    if stopped is not None:
        print(f"study stopped: {redact.text(str(stopped))}", file=sys.stderr)
        if stopped.log_path:
            print(f"server log: {stopped.log_path}", file=sys.stderr)
        print(
            "fix the cause and run the same command again: the failed launches are queued again",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    if interrupted:
        print(
            "interrupted: servers stopped, the running trial recorded as interrupted and queued again; "
            "run the same command to resume",
            file=sys.stderr,
        )
        return 130
    return 0


def summary(
    study: optuna.Study,
    objective: Objective,
    elapsed: float,
    study_name: str,
    storage: str | None,
    start_not_run: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> None:
    """The closing lines: trial counts by outcome, server time, the start configurations the
    budget left out, what was measured on what, the best with its confidence, and where its
    unit is."""
    info = StudyInfo.of(study.user_attrs)
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state.is_finished()]
    counts: dict[str, int] = {}
    others: dict[str, int] = {}
    for t in finished:
        o = trial_record.outcome(t)
        if o == "failed" and not budget.has_verdict(t):
            o = str(t.user_attrs.get(trial_record.FAILURE_CLASS, o))
        o = "refused before launch" if o == "infeasible" else o
        tally = counts if budget.has_verdict(t) else others
        tally[o] = tally.get(o, 0) + 1
    server_s = sum(trial_record.server_s(t) for t in finished)
    server = server_time_text(server_s, info.backend)
    aside = "; not counted: " + ", ".join(f"{v} {k}" for k, v in sorted(others.items())) if others else ""
    outcomes = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    print(f"\n{sum(counts.values())} trials ({outcomes}){aside}; {server}; this run {elapsed:.1f} s")
    refused = info.redrawn + others.get("refused before launch", 0)
    if refused:
        proposals = info.redrawn + len(finished)
        print(
            f"  rule-refused proposals: {refused} of {proposals} ({refused / proposals:.0%}); "
            "none launched a server or used the budget"
        )
    queued = sum(1 for t in trials if t.state == TrialState.WAITING)
    if queued:
        print(
            f"({queued} queued configuration(s) not run: the budget ended first; a larger --budget runs them)"
        )
    if start_not_run:
        print(
            f"{len(start_not_run)} start configuration(s) not run: the budget ended first "
            "(the same command with a larger --budget runs them):"
        )
        for label, point in start_not_run:
            print(f"  {label}: {params_text({k: v for k, v in point.items() if v is not None})}")
    for line in statement_lines(info.workload, info.backend, proxy=info.proxy):
        print(f"  {line}")
    found = verdict(study)
    if found is None:
        print("no feasible configuration yet", file=sys.stderr)
        return
    best = found.winner
    launches = (
        f" (mean of {len(best.runs)} launches: " + ", ".join(f"#{n}" for n in best.runs) + ")"
        if len(best.runs) > 1
        else ""
    )
    print(f"best: trial #{best.number}, {objective.name} = {best.mean:.1f} tok/s{launches}")
    for line in found.lines():
        print(f"  {line}")
    if best.fidelity == "proxy":
        print("  measured on the screening proxy only: not confirmed on the target workload yet")
    elif best.target_runs and len(best.target_runs) < len(best.runs):
        print(f"  {len(best.target_runs)} of its launches measured the whole target workload")
    for lv in best.levels:
        stopped = f"  (stopped after {lv['wall_s']:.0f} s, projected)" if lv.get("stopped_early") else ""
        print(f"  C={lv['concurrency']:3d}: {tok_s_text(lv):>8} tok/s{stopped}")
    print("  flags: " + " ".join(best.argv))
    if best.env:
        print("  env:   " + " ".join(f"{k}={v}" for k, v in best.env.items()))
    engine = info.engine or DEFAULT_ENGINE
    print(f"unit file: tuner best{storage_hint(study_name, storage)} > {engine}.service")


def cost_lines(space: Space, budget: int, startup_s: float | None, backend: dict) -> list[str]:
    """What a budget costs before anything runs: start-up plus one screening sweep (the
    space's proxy, :mod:`tuner.fidelity`) per trial, timed by the simulator on the space's first
    start configuration, in server hours and GPU hours. Pruned trials stop early and refused
    ones cost nothing; the finalists measured on the whole target cost more."""
    startup = SIM_STARTUP_S if startup_s is None else startup_s
    sweep_s: float | None = None
    if space.engine.simulated:
        points = space.start_points() or [space.complete({})]
        try:
            spec = space.render(points[0])
            m = SimMeasurer(space.hardware, space.model, noise=0.0, startup_s=0.0).measure(
                spec, space.proxy, Objective(), trial_label="dry-run", seed=0, on_level=lambda *a: True
            )
            sweep_s = m.server_s if m.status == "ok" else None
        except Exception:  # a start configuration the simulator refuses: no sweep estimate
            sweep_s = None
    k = speedup(backend)
    if sweep_s is not None and k:
        sweep_s /= k
    per_trial = startup + (sweep_s or 0.0)
    total = budget * per_trial
    gpus = space.gpu_count
    sweep = f"screening sweep ~{sweep_s:.0f} s (simulated)" if sweep_s is not None else "sweep time unknown"
    return [
        f"expected cost of --budget {budget}: {budget} x (start-up {startup:.0f} s + {sweep}) "
        f"= {total / 3600:.1f} h of server time = {total * gpus / 3600:.1f} GPU hours on {gpus} GPUs",
        "  (pruned trials stop early, refused and reused ones launch nothing, the finalists measured on "
        "the whole workload cost more; "
        "--startup-s S sets the start-up time)",
    ]


def storage_hint(study_name: str, storage: str | None) -> str:
    """The ``--study``/``--storage`` words of a printed command that works when copied:
    a URL with a password is never printed (not even masked); the command names the
    setting that holds it instead (``TUNER_STORAGE``, which every command reads)."""
    where = f" --study {study_name}"
    if storage is None:
        return where  # the default database, or the storage setting: read the same way
    if redact.url_password(storage):
        return where + ' --storage "$TUNER_STORAGE"  # TUNER_STORAGE: the --storage URL (has a password)'
    return where + f" --storage {shlex.quote(storage)}"
