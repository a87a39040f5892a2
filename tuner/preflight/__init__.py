"""SGLang's own verdict on a launch, before the launch: the pre-flight.

The tuner's launch rules (:mod:`tuner.engines.sglang`) are a copy of SGLang's; the copy
can lag a release. Where the serving interpreter is reachable, :func:`probe` runs
SGLang's own parser, ``ServerArgs`` resolution and ``check_server_args`` on the rendered
command lines (``sglang_probe.py`` beside this file, sent as ``python -c``; seconds of CPU,
no GPU work) and returns, per command line, a :class:`Verdict`: refused with SGLang's own
message, or accepted with the settings SGLang resolved (the ep it forces, the graph
limits it picks). :func:`probe_command` builds the command for any transport (a local
process, ssh); :func:`probe` runs it locally.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.engines.sglang import strip_launch_prefix

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
    try:
        done = subprocess.run(
            cmd, input=request_lines(argvs), capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"cannot run the SGLang probe with {python}: {exc}") from exc
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ProbeError(f"the SGLang probe failed with {python} (exit {done.returncode}): {tail[0]}")
    return parse_answers(done.stdout, len(argvs))
