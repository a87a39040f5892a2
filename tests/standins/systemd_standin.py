"""STAND-IN for ``systemctl`` and ``journalctl``, for tests on machines where systemd
is not running (containers, CI). It is not systemd and does not try to be.

It implements just what :class:`tuner.launchers.systemd.SystemdLauncher` uses, for
units whose files are in ``$TUNER_STANDIN_UNIT_DIR``; its state (pid, exit status,
output) lives in ``$TUNER_STANDIN_STATE_DIR``:

* ``systemctl daemon-reload``: no-op;
* ``systemctl restart U``: stop U, then read ``[Service]`` from the unit file
  (``ExecStart=``, ``Environment=``, ``WorkingDirectory=``) and start ExecStart under a
  detached supervisor in a new session, output to ``U.log``; the supervisor records the
  exit status;
* ``systemctl stop U``: SIGTERM the server's process group, wait, SIGKILL;
* ``systemctl reset-failed U``, ``systemctl is-active U``,
  ``systemctl show U --property=P ... [--value]`` (ActiveState, SubState, Result,
  ExecMainCode, ExecMainStatus, MainPID);
* ``journalctl -u U [--no-pager] [-n N] [--since ...] [-o ...]``: the last N lines of
  ``U.log`` (``--since`` and ``-o`` are accepted and ignored: the log holds only the
  current run).

Run as ``python systemd_standin.py systemctl ARGS...`` or ``... journalctl ARGS...``
(tests put small ``systemctl``/``journalctl`` wrapper scripts on ``PATH``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_GRACE_S = 10.0


def _dirs() -> tuple[Path, Path]:
    unit_dir = Path(os.environ["TUNER_STANDIN_UNIT_DIR"])
    state_dir = Path(os.environ["TUNER_STANDIN_STATE_DIR"])
    state_dir.mkdir(parents=True, exist_ok=True)
    return unit_dir, state_dir


def _unit(name: str) -> str:
    return name if "." in name else f"{name}.service"


def _state_file(unit: str, kind: str) -> Path:
    return _dirs()[1] / f"{unit}.{kind}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not running
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse_unit(path: Path) -> dict[str, list[str]]:
    """``[Service]`` keys of a unit file (continuation lines joined, comments dropped)."""
    section = ""
    out: dict[str, list[str]] = {}
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section == "Service" and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def _unescape(word: str, env: dict[str, str]) -> str:
    """systemd's ``%%`` and ``$$`` escapes, and ``${VAR}``/``$VAR`` from Environment=."""
    word = word.replace("%%", "\0pct\0")
    word = re.sub(r"\$\$", "\0dollar\0", word)
    word = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), word)
    return word.replace("\0pct\0", "%").replace("\0dollar\0", "$")


def _status(unit: str) -> dict[str, str]:
    pid_text = _read(_state_file(unit, "pid"))
    status = _read(_state_file(unit, "status"))
    stopped = _state_file(unit, "stopped").exists()
    pid = int(pid_text) if pid_text and pid_text.isdigit() else 0
    if pid and status is None and _pid_alive(pid):
        return {
            "ActiveState": "active",
            "SubState": "running",
            "Result": "success",
            "ExecMainCode": "0",
            "ExecMainStatus": "0",
            "MainPID": str(pid),
        }
    code, value = (status or "0 0").split()
    failed = not stopped and status is not None and not (code == "1" and value == "0")
    result = "success" if not failed else ("exit-code" if code == "1" else "signal")
    return {
        "ActiveState": "failed" if failed else "inactive",
        "SubState": "failed" if failed else "dead",
        "Result": result,
        "ExecMainCode": code,
        "ExecMainStatus": value,
        "MainPID": "0",
    }


def _stop(unit: str) -> None:
    pid_text = _read(_state_file(unit, "pid"))
    if not pid_text or not pid_text.isdigit():
        return
    pgid = int(pid_text)
    if _read(_state_file(unit, "status")) is None and _group_alive(pgid):
        _state_file(unit, "stopped").touch()
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
    # the supervisor records the status once it has reaped the server
    deadline = time.monotonic() + 5
    while _read(_state_file(unit, "status")) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _restart(unit: str) -> int:
    unit_dir, _ = _dirs()
    path = unit_dir / unit
    if not path.exists():
        print(f"Failed to restart {unit}: Unit {unit} not found.", file=sys.stderr)
        return 5
    _stop(unit)
    for kind in ("pid", "status", "stopped"):
        _state_file(unit, kind).unlink(missing_ok=True)
    subprocess.Popen(
        [sys.executable, __file__, "_supervise", unit],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _read(_state_file(unit, "pid")) or _read(_state_file(unit, "status")):
            return 0
        time.sleep(0.02)
    print(f"Job for {unit} failed.", file=sys.stderr)
    return 1


def _supervise(unit: str) -> int:
    unit_dir, _ = _dirs()
    keys = _parse_unit(unit_dir / unit)
    env = dict(os.environ)
    for line in keys.get("Environment", []):
        for assignment in shlex.split(line):
            name, _, value = assignment.partition("=")
            env[name] = value
    exec_start = keys["ExecStart"][-1].lstrip("-@+!:")
    argv = [_unescape(word, env) for word in shlex.split(exec_start)]
    cwd = keys.get("WorkingDirectory", [None])[-1]
    with open(_state_file(unit, "log"), "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            log.write(f"Failed to execute {argv[0]}: {exc.strerror}\n".encode())
            _state_file(unit, "status").write_text("1 203\n")
            return 0
    _state_file(unit, "pid").write_text(f"{proc.pid}\n")
    returncode = proc.wait()
    code, value = ("1", returncode) if returncode >= 0 else ("2", -returncode)
    _state_file(unit, "status").write_text(f"{code} {value}\n")
    return 0


def systemctl(args: list[str]) -> int:
    words = [a for a in args if not a.startswith("-")]
    options = [a for a in args if a.startswith("-")]
    if not words:
        print("systemctl stand-in: no command", file=sys.stderr)
        return 1
    command, units = words[0], [_unit(w) for w in words[1:]]
    if command == "daemon-reload":
        return 0
    if command == "restart":
        return _restart(units[0])
    if command == "stop":
        _stop(units[0])
        return 0
    if command == "reset-failed":
        state = _status(units[0])
        if state["ActiveState"] == "failed":
            _state_file(units[0], "stopped").touch()
        return 0
    if command == "is-active":
        state = _status(units[0])["ActiveState"]
        print(state)
        return 0 if state == "active" else 3
    if command == "show":
        state = _status(units[0])
        wanted = [o.split("=", 1)[1] for o in options if o.startswith("--property=")]
        for i, arg in enumerate(args):
            if arg == "-p" and i + 1 < len(args):
                wanted.append(args[i + 1])
        wanted = [w for item in wanted for w in item.split(",")] or list(state)
        for name in wanted:
            print(state.get(name, "") if "--value" in options else f"{name}={state.get(name, '')}")
        return 0
    print(f"systemctl stand-in: unsupported command {command!r}", file=sys.stderr)
    return 1


def journalctl(args: list[str]) -> int:
    unit, lines = None, None
    i = 0
    while i < len(args):
        if args[i] in ("-u", "--unit") and i + 1 < len(args):
            unit, i = _unit(args[i + 1]), i + 2
        elif args[i] in ("-n", "--lines") and i + 1 < len(args):
            lines, i = int(args[i + 1]), i + 2
        elif args[i] in ("--since", "-S", "-o", "--output") and i + 1 < len(args):
            i += 2
        else:
            i += 1
    if unit is None:
        print("journalctl stand-in: only -u UNIT is supported", file=sys.stderr)
        return 1
    try:
        text = _state_file(unit, "log").read_bytes()
    except OSError:
        return 0
    out = text.splitlines(keepends=True)
    sys.stdout.buffer.write(b"".join(out[-lines:] if lines else out))
    return 0


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    if tool == "_supervise":
        return _supervise(_unit(args[0]))
    if tool == "systemctl":
        return systemctl(args)
    if tool == "journalctl":
        return journalctl(args)
    print(f"stand-in: unknown tool {tool!r}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
