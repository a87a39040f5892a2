"""Where a trial's server runs and how it is measured: one interface (:class:`Measurer`),
one implementation per ``--backend`` (the simulator, or a launcher plus the load generator).

A measurer takes the rendered launch (argv + env) and the workload, starts the server,
runs the sweep level by level (asking the study after each level whether to go on),
stops the server whatever happened, and returns a :class:`Measurement`. The study
code never knows whether the numbers came from the simulator or a real host.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tuner import level_watch, redact, watchdog
from tuner.engines.base import LaunchSpec
from tuner.failures import LaunchFailure
from tuner.metrics import LevelMetrics, summarize
from tuner.objectives import Objective, goodput_tok_s
from tuner.preflight import HostPreflight, Verdict, local_runner, ssh_runner
from tuner.request_records import LevelRecords
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
    #: Where the server's log was written (real servers).
    log_path: str | None = None
    #: The launch command's interpreter on the host that ran it (real servers).
    python: str | None = None


#: Share of a level's requests that may fail before the level is no measurement of the
#: configuration: a stray failure among many requests is noise, a server that answers 500,
#: 429 or a broken stream to a tenth of them is not serving that level.
MAX_FAILED_SHARE = 0.05


def failed_requests(level: LevelRecords) -> str | None:
    """Why ``level`` is not a measurement (too many failed requests), or None."""
    errors = summarize(level).errors  # failed requests by class, as the metrics count them
    failed = sum(errors.values())
    total = len(level.records) + sum(level.errors.values())
    if total == 0 or failed <= MAX_FAILED_SHARE * total:
        return None
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(errors.items()))
    return f"{failed} of {total} requests at C={level.concurrency} failed ({kinds})"


class Interrupted(Exception):
    """The run was stopped (Ctrl-C or SIGTERM in another thread) while this trial ran."""


class Measurer(ABC):
    """Launch, measure, stop: what ``--backend`` selects."""

    #: The ``--backend`` name (sim, local, ssh, systemd), recorded on each trial.
    backend: str

    def interrupt(self) -> None:
        """Stop every server this measurer is running now (called from another thread).

        The default does nothing: a measurer without processes has nothing to stop.
        """
        return None

    def preflight(self, spec: LaunchSpec) -> Verdict | None:
        """The engine's own verdict on ``spec`` from the serving host, before a launch
        (:mod:`tuner.preflight`); None where none can be had (the default: the tuner's
        launch rules stand in)."""
        return None

    def engine_version(self, spec: LaunchSpec) -> str | None:
        """The engine release the serving host has for ``spec``'s interpreter; None when
        unknown (the default)."""
        return None

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
        levels: Sequence[int] | None = None,
        launch: int = 0,
        watch: level_watch.LevelWatch | None = None,
    ) -> Measurement:
        """Run one trial's server and sweep (``levels``: the order to measure the
        workload's levels in, default lowest first); never leaves a server running.

        ``seed`` picks the request set (prompts, their lengths, arrivals): a study passes
        the same one for every trial, so configurations are compared on the same requests
        and what differs between two launches is the server, not the draw of requests
        (common random numbers). ``launch`` numbers the launch within the study: a
        simulated server draws what varies from launch to launch (its timing noise) from
        it; a real server varies by itself.

        ``watch`` gives, as each burst level starts, the bar it must be able to reach
        (:class:`~tuner.level_watch.LevelBar`, or None: no watch); a level that cannot is
        stopped before it drains and reported as such (``LevelMetrics.stopped_early``), and
        ``on_level`` decides, as after any level, whether the sweep goes on."""


#: Log lines read back after start-up for the server's memory report: every rank's capture
#: and scheduler lines of an 8-GPU SGLang server, with room for its other start-up lines.
MEMORY_LOG_LINES = 400


def read_server_info(base_url: str, timeout_s: float = 10.0) -> dict[str, object]:
    """The settings a healthy server reports (``GET /server_info``: SGLang's resolved
    arguments); empty when it does not answer with a JSON object."""
    import httpx

    try:
        answer = httpx.get(base_url.rstrip("/") + "/server_info", timeout=timeout_s, trust_env=False)
        info = answer.json() if answer.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def record_level(
    index: int, level: LevelRecords, objective: Objective, on_level: LevelCallback, m: Measurement
) -> bool:
    """Summarise one measured level into ``m`` and ask the study whether to go on."""
    metrics = summarize(level)
    gp = goodput_tok_s(level, objective.ttft_s, objective.tpot_ms) if objective.name == "goodput" else None
    m.levels.append(metrics)
    m.goodputs.append(gp)
    m.server_s += metrics.wall_s
    if on_level(index, metrics, gp) is False:
        m.status = "stopped"
        return False
    return True


class SimMeasurer(Measurer):
    """The built-in simulator of a host: no process, no GPU, same records as a real run."""

    backend = "sim"

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
        levels: Sequence[int] | None = None,
        launch: int = 0,
        watch: level_watch.LevelWatch | None = None,
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
        sim = ServingSimulator(model, seed=launch, noise=self.noise, requests_seed=seed)
        sim.warm_up(workload)
        for i, c in enumerate(levels or workload.levels):
            level = sim.run_level(workload, c)
            bar = watch(i, c) if watch is not None and workload.kind == "burst" else None
            if bar is not None:
                # The simulator computes a level whole: replay the checks a watched server gets.
                level = level_watch.replay(level, bar)
            if not record_level(i, level, objective, on_level, m):
                break
        return m


#: Default time a real server gets to become healthy (a ~600 GB checkpoint loads in minutes).
DEFAULT_HEALTH_TIMEOUT_S = 1800.0


class LauncherMeasurer(Measurer):
    """A real server: started by a launcher (local process, ssh, systemd), measured over HTTP.

    ``hosts`` is the pool of machines (ssh destinations; ``None`` = this machine): each
    trial takes one host for its whole life, so two trials never share a host, and
    parallel workers wait for a free one. The server log of each trial goes to
    ``<log_dir>/<trial label>.log``. Whatever happens (launch failure, a server that dies
    mid-sweep, Ctrl-C), the server is stopped before :meth:`measure` returns or raises.
    """

    def __init__(
        self,
        kind: str,
        *,
        log_dir: Path,
        health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
        hosts: Sequence[str | None] = (None,),
        launcher_options: dict | None = None,
        secret_env: Mapping[str, str] | None = None,
        stall_s: float = watchdog.DEFAULT_STALL_S,
        level_timeout_s: float | None = None,
        python: str | None = None,
    ):
        """``secret_env``: variables for the server only (the Hugging Face token of a space
        that asks for it). ``stall_s`` and ``level_timeout_s``: when a level is hung (see
        :mod:`tuner.watchdog`; the level deadline defaults to one derived from the workload)."""
        self.backend = kind
        self.log_dir = log_dir
        self.stall_s = stall_s
        self.level_timeout_s = level_timeout_s
        #: The space's launch.python: the interpreter on the hosts, when the space names it.
        self.python = python
        self.health_timeout_s = health_timeout_s
        self.launcher_options = dict(launcher_options or {})
        self.secret_env = dict(secret_env or {})
        self._hosts: queue.Queue[str | None] = queue.Queue()
        for h in hosts or (None,):
            self._hosts.put(h)
        self._active: set = set()
        self._lock = threading.Lock()
        self._interrupted = threading.Event()
        first = (hosts or (None,))[0]
        self._preflight = HostPreflight(local_runner if first is None else ssh_runner(first))

    def preflight(self, spec: LaunchSpec) -> Verdict | None:
        """SGLang's verdict from the first host of the pool (all hosts serve one install)."""
        return self._preflight.verdict(spec)

    def engine_version(self, spec: LaunchSpec) -> str | None:
        python = HostPreflight.interpreter(spec)
        return None if python is None else self._preflight.version(python)

    def interrupt(self) -> None:
        self._interrupted.set()
        with self._lock:
            active = list(self._active)
        for launcher in active:
            launcher.stop()

    def measure(
        self,
        spec: LaunchSpec,
        workload: Workload,
        objective: Objective,
        *,
        trial_label: str,
        seed: int,
        on_level: LevelCallback,
        levels: Sequence[int] | None = None,
        launch: int = 0,
        watch: level_watch.LevelWatch | None = None,
    ) -> Measurement:
        host = self._hosts.get()
        try:
            return self._measure_on(
                host, spec, workload, objective, trial_label, seed, on_level, levels, watch
            )
        finally:
            self._hosts.put(host)

    def _measure_on(
        self,
        host: str | None,
        spec: LaunchSpec,
        workload: Workload,
        objective: Objective,
        trial_label: str,
        seed: int,
        on_level: LevelCallback,
        levels: Sequence[int] | None,
        watch: level_watch.LevelWatch | None,
    ) -> Measurement:
        from tuner import engines, loadgen
        from tuner.launchers import make_launcher

        if self._interrupted.is_set():
            raise Interrupted(trial_label)
        if self.secret_env:
            # Secrets (an HF token) reach the server's environment, never the trial records.
            spec = spec.model_copy(update={"env": {**spec.env, **self.secret_env}})
        engine = engines.get(spec.engine)
        launcher = make_launcher(self.backend, engine=engine, ssh=host, **self.launcher_options)
        log_path = self.log_dir / f"{trial_label}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        m = Measurement("ok")
        with self._lock:
            self._active.add(launcher)
        try:
            launcher.start(spec, log_path=log_path, trial_label=trial_label)
            m.startup_s = m.server_s = launcher.wait_healthy(self.health_timeout_s, poll_s=1.0)
            m.server_info = read_server_info(launcher.base_url())
            # What the server's log says of its memory (left after start-up, taken by CUDA
            # graphs): how close a launch came to running out, which /server_info does not say.
            m.server_info.update(engine.memory_report(launcher.log_tail(MEMORY_LOG_LINES)))
            died = False
            bad_level: str | None = None
            lost: LaunchFailure | None = None

            def on_records(level: LevelRecords) -> bool:
                nonlocal died, bad_level, lost
                if not launcher.alive():
                    died = True  # this level ran into a dying server: not a measurement
                    return False
                lost = launcher.route_lost()
                if lost is not None:
                    return False  # the host's connection dropped: no verdict on the configuration
                bad_level = failed_requests(level)
                if bad_level is not None:
                    return False  # a level of failed requests is not a measurement either
                return record_level(len(m.levels), level, objective, on_level, m)

            m.python = self.python or launcher.interpreter()
            deadline = self.level_timeout_s or watchdog.level_deadline_s(workload)
            sweep = loadgen.run_sweep(
                launcher.base_url(), workload, seed=seed, on_records=on_records, levels=levels, watch=watch
            )
            asyncio.run(watchdog.guard(sweep, stall_s=self.stall_s, deadline_s=deadline))
            if died or not launcher.alive():
                m.status = "failed"
                m.failure = launcher.classify_exit()
            elif (route := lost or launcher.route_lost()) is not None:
                m.status, m.failure = "failed", route
            elif bad_level is not None:
                m.status, m.failure = "failed", LaunchFailure("request-errors", f"{trial_label}: {bad_level}")
        except watchdog.Hang as exc:
            # The stalled level never reached on_records: it is not among m.levels.
            m.status, m.failure = "failed", LaunchFailure("hang", f"{trial_label}: {exc}")
        except LaunchFailure as exc:
            m.status, m.failure = "failed", exc
        finally:
            launcher.stop()
            with self._lock:
                self._active.discard(launcher)
            redact.file(log_path)
            m.log_tail = redact.text(launcher.log_tail(60))
            m.log_path = str(log_path)
        if self._interrupted.is_set():
            raise Interrupted(trial_label)
        return m
