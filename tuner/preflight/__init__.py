"""SGLang's own verdict on a launch, before the launch: the pre-flight.

The tuner's launch rules (:mod:`tuner.engines.sglang`) are a copy of SGLang's; the copy
can lag a release. Where the serving interpreter is reachable, :func:`probe` runs
SGLang's own parser, ``ServerArgs`` resolution and ``check_server_args`` on the rendered
command lines (``sglang_probe.py`` beside this file, sent as ``python -c``; seconds of CPU,
no GPU work) and returns, per command line, a :class:`Verdict`: refused with SGLang's own
message, or accepted with the settings SGLang resolved (the ep it forces, the graph
limits it picks). :func:`probe_command` builds the command for any transport (a local
process, ssh); :func:`probe` runs it locally; :class:`HostPreflight` asks the serving host
before each launch of a study.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.engines.base import LaunchSpec
from tuner.engines.sglang import SGLangEngine, strip_launch_prefix

if TYPE_CHECKING:
    from tuner.space import Space

#: The probe script; it imports nothing of the tuner, so it runs with the serving interpreter.
PROBE_SCRIPT = Path(__file__).with_name("sglang_probe.py")


class ProbeError(RuntimeError):
    """The probe itself could not run (no sglang in that interpreter, a broken install)."""


@dataclass(frozen=True)
class Verdict:
    """SGLang's answer for one command line."""

    ok: bool
    #: SGLang's own error line when it refuses (``sglang serve: error: ...``, ``ValueError: ...``)
    message: str | None = None
    #: the settings it resolved when it accepts (see ``RESOLVED_FIELDS`` in the probe)
    resolved: Mapping[str, Any] = field(default_factory=dict)


def probe_command(python: str, *, fake_host: bool = False, model_config: str | None = None) -> list[str]:
    """The argv that runs the probe with interpreter ``python`` (the script inline, so
    nothing needs copying to a remote host first)."""
    argv = [python, "-c", PROBE_SCRIPT.read_text(), "--"]
    if fake_host:
        argv.append("--fake-host")
    if model_config is not None:
        argv += ["--model-config", model_config]
    return argv


def request_lines(argvs: Sequence[Sequence[str]]) -> str:
    """The probe's standard input: one JSON object per command line (server flags only)."""
    return "".join(json.dumps({"argv": strip_launch_prefix(a)}) + "\n" for a in argvs)


def parse_answers(stdout: str, expected: int) -> list[Verdict]:
    """The probe's standard output, one :class:`Verdict` per command line asked."""
    verdicts = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        answer = json.loads(line)
        verdicts.append(Verdict(bool(answer["ok"]), answer.get("message"), answer.get("resolved") or {}))
    if len(verdicts) != expected:
        raise ProbeError(f"the SGLang probe answered {len(verdicts)} of {expected} command lines")
    return verdicts


def probe(
    python: str,
    argvs: Sequence[Sequence[str]],
    *,
    fake_host: bool = False,
    model_config: str | None = None,
    timeout: float = 600.0,
) -> list[Verdict]:
    """Run the probe locally with interpreter ``python`` over ``argvs`` (full command lines
    or flags only). Raises :class:`ProbeError` when the probe cannot run."""
    cmd = probe_command(python, fake_host=fake_host, model_config=model_config)
    code, out, err = local_runner(cmd, request_lines(argvs), timeout)
    if code != 0:
        tail = err.strip().splitlines()[-1:] or ["no output"]
        raise ProbeError(f"the SGLang probe failed with {python} (exit {code}): {tail[0]}")
    return parse_answers(out, len(argvs))


#: A refusal that says the probing environment cannot judge, not that the command line is
#: wrong: no accelerator visible to the probe, an import or file missing on the host.
ENVIRONMENT_FAILURE = re.compile(
    r"(?:ModuleNotFoundError|ImportError|OSError|FileNotFoundError|PermissionError)\b"
    r"|RuntimeError: No accelerator"
)

#: Runs an argv on the serving host with ``stdin`` text: (exit status, stdout, stderr).
Runner = Callable[[list[str], str, float], tuple[int, str, str]]


def local_runner(argv: list[str], stdin: str, timeout_s: float) -> tuple[int, str, str]:
    """Run on this machine (the local and systemd launchers' host)."""
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def ssh_runner(transport: Any) -> Runner:
    """Run on an ssh host, through its :class:`tuner.launchers.ssh.SshTransport`."""

    def run(argv: list[str], stdin: str, timeout_s: float) -> tuple[int, str, str]:
        try:
            done = transport.run_argv(argv, input=stdin.encode(), timeout_s=timeout_s)
        except Exception as exc:  # unreachable host: the launch will say so itself
            return 255, "", str(exc)
        return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")

    return run


class HostPreflight:
    """SGLang's verdict on the GPU host, per command line, before its launch.

    It applies to a launch of ``<python> -m sglang.launch_server``: the probe runs with
    that interpreter. Where it cannot run (no sglang there: the emulator, a test host) it
    answers None once and is not tried again, and the tuner's rules stand in. Verdicts
    are cached by command line: one probe per distinct launch.
    """

    def __init__(
        self,
        runner: Runner = local_runner,
        *,
        timeout_s: float = 180.0,
        fake_host: bool = False,
        model_config: str | None = None,
    ) -> None:
        """``fake_host`` and ``model_config`` are the probe's stand-ins for a host without
        GPUs or weights (CI); a real host needs neither."""
        self.runner = runner
        self.timeout_s = timeout_s
        self.fake_host = fake_host
        self.model_config = model_config
        self._verdicts: dict[tuple[str, ...], Verdict] = {}
        self._unavailable: dict[str, str] = {}
        self._versions: dict[str, str | None] = {}

    @staticmethod
    def interpreter(spec: LaunchSpec) -> str | None:
        """The interpreter of an SGLang launch (``python3`` of ``python3 -m sglang.launch_server``),
        None for any other command (the emulator, a wrapper script)."""
        argv = spec.argv
        if spec.engine != "sglang" or len(argv) < 3 or not Path(argv[0]).name.startswith("python"):
            return None
        return argv[0] if argv[1] == "-m" and argv[2] == "sglang.launch_server" else None

    def version(self, python: str) -> str | None:
        """The sglang release installed for ``python`` on the host; None if there is none."""
        if python not in self._versions:
            code, out, _err = self.runner([python, "-c", PROBE_SCRIPT.read_text(), "--version"], "", 60.0)
            self._versions[python] = (out.strip() or None) if code == 0 else None
        return self._versions[python]

    def unavailable(self, python: str) -> str | None:
        """Why the probe cannot run with ``python`` (None while it can, or was not tried)."""
        return self._unavailable.get(python)

    def verdict(self, spec: LaunchSpec) -> Verdict | None:
        """SGLang's verdict on ``spec``; None when no SGLang can judge it here."""
        python = self.interpreter(spec)
        if python is None or python in self._unavailable:
            return None
        key = tuple(spec.argv)
        if key not in self._verdicts:
            cmd = probe_command(python, fake_host=self.fake_host, model_config=self.model_config)
            code, out, err = self.runner(cmd, request_lines([spec.argv]), self.timeout_s)
            try:
                if code != 0:
                    tail = err.strip().splitlines()[-1:] or [f"exit status {code}"]
                    raise ProbeError(tail[0])
                (verdict,) = parse_answers(out, 1)
            except (ProbeError, ValueError) as exc:
                self._unavailable[python] = str(exc)
                return None
            if not verdict.ok and ENVIRONMENT_FAILURE.match(verdict.message or ""):
                # the host cannot judge (no GPU visible, model files missing): not the config's fault
                self._unavailable[python] = verdict.message or ""
                return None
            self._verdicts[key] = verdict
        return self._verdicts[key]


def adopt_host_release(space: Space, backend: Any) -> str | None:
    """Ask the serving host which SGLang release it runs (through the backend's launcher
    transport) and judge the space by that release's flags: a space without
    ``engine_version`` takes the host's (the nearest release with a flag table); one that
    names another release is kept and the mismatch returned in words for the user.
    Returns a line to show, or None when nothing was learnt or all agrees."""
    ask = getattr(backend, "engine_version", None)
    pick = getattr(space.engine, "for_host_version", None)
    if ask is None or pick is None:
        return None
    version = ask(space.render(space.complete({})))
    if version is None:
        return None
    wanted = space.spec.engine_version
    if wanted is None:
        engine: SGLangEngine = pick(version)  # only SGLang's adapter has for_host_version
        space.engine = engine
        return f"the host runs SGLang {version}: judging launches by the flags of {engine.version}"
    if wanted != version:
        return (
            f"{space.source}: engine_version is {wanted} but the host runs SGLang {version}; "
            "the pre-flight judges each launch with the host's own SGLang"
        )
    return None
