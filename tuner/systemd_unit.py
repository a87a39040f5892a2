"""The forms a winning configuration is handed back in: a systemd unit and a shell command.

Both are rendered from a :class:`~tuner.engines.base.LaunchSpec`, so they launch
exactly what was measured. Each form quotes by its own consumer's rules: the unit by
systemd's (double quotes with C escapes, ``%%`` for a literal ``%`` because of
specifiers, ``$$`` for a literal ``$`` because of variable expansion), the shell
command by POSIX shell's (:func:`shlex.quote`).

Secrets never land in a unit file, which is usually world-readable: environment
variables and flag values whose names look like secrets (``HF_TOKEN``,
``--api-key``) are taken from the ``EnvironmentFile=`` instead.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterable, Sequence

from tuner.engines.base import LaunchSpec

#: systemd's start timeout: loading a ~600 GB checkpoint and capturing CUDA graphs takes
#: many minutes; an hour leaves room for a cold page cache.
TIMEOUT_START_S = 3600
RESTART_SEC = 30
LIMIT_NOFILE = 65535

#: Name parts that mark a variable or flag as a secret (``HF_TOKEN``, ``--api-key``).
SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "KEY",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
    }
)

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def is_python(argv0: str) -> bool:
    """``argv0`` names a Python interpreter (``python``, ``python3``, ``/opt/venv/bin/python3.11``)."""
    return bool(_PYTHON.match(argv0.rsplit("/", 1)[-1]))


_ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_C_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\v": "\\v",
}


def looks_secret(name: str) -> bool:
    """Whether an env variable or flag name looks like it holds a secret.

    Whole name parts count (``HF_TOKEN``, ``OPENAI_API_KEY``, ``--ssl-keyfile-password``),
    so ``TOKENIZERS_PARALLELISM`` or ``--max-total-tokens`` are not secrets.
    """
    parts = re.split(r"[-_]+", name.strip("-").upper())
    return any(part in SECRET_WORDS for part in parts)


def _secret_env_name(flag: str) -> str:
    """Variable that carries a secret flag's value (``--api-key`` -> ``API_KEY``)."""
    return re.sub(r"[^A-Z0-9]+", "_", flag.strip("-").upper()).strip("_")


def _c_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def systemd_quote(arg: str, *, expand: bool = False) -> str:
    """One ExecStart= argument, quoted so systemd passes exactly ``arg``.

    ``%`` becomes ``%%`` (specifiers) and ``$`` becomes ``$$`` (variable expansion)
    unless ``expand`` is true (the argument is a ``${VAR}`` reference on purpose). Words
    with whitespace, quotes, backslashes or control characters, empty words and a lone
    ``;`` (a command separator) are double-quoted with C escapes.
    """
    text = arg.replace("%", "%%")
    if not expand:
        text = text.replace("$", "$$")
    plain = (
        text and text != ";" and not any(ch.isspace() or ch in "\"'\\" or not ch.isprintable() for ch in text)
    )
    return text if plain else f'"{_c_escape(text)}"'


def _environment_line(name: str, value: str) -> str:
    # Environment= unquotes and C-unescapes like ExecStart= and expands specifiers,
    # but does not expand variables: "$" stays as it is.
    return f'Environment="{_c_escape(f"{name}={value}".replace("%", "%%"))}"'


def _single_line(text: str) -> str:
    return " ".join(text.split())


def _executable(argv0: str, python: str | None) -> list[str]:
    """The program words of ``ExecStart=``: the interpreter (``python``, which may be a
    command such as ``/usr/bin/env python3``) for a Python ``argv0``, else ``argv0``."""
    if python is not None and is_python(argv0):
        exe, *lead = python.split()
        _check_executable(exe)
        return [exe, *lead]
    if argv0.startswith("/"):
        exe = argv0
    else:
        exe = shutil.which(argv0) or ""
        if not exe:
            raise ValueError(
                f"systemd needs an absolute path to {argv0!r}, which is not on PATH here: "
                "give an absolute command (or the python interpreter for the unit)"
            )
    _check_executable(exe)
    return [exe]


def _check_executable(exe: str) -> None:
    if not exe.startswith("/"):
        raise ValueError(f"systemd needs an absolute path to the executable, not {exe!r}")
    if "%" in exe or "$" in exe:
        raise ValueError(f"systemd does not expand or unescape '%'/'$' in the executable path: {exe!r}")


def _hide_secret_flags(argv: Sequence[str]) -> tuple[list[tuple[str, bool]], list[str]]:
    """argv words with a flag for "this word is a ``${VAR}`` reference", and the notes
    for the unit's comments about each secret taken from the environment."""
    words: list[tuple[str, bool]] = []
    notes: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        flag, eq, _value = word.partition("=")
        if word.startswith("--") and looks_secret(flag):
            var = _secret_env_name(flag)
            if eq:
                words.append((f"{flag}=${{{var}}}", True))
                notes.append(f"{flag}: value read from ${var}, which the EnvironmentFile= must define")
                i += 1
                continue
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                words += [(word, False), (f"${{{var}}}", True)]
                notes.append(f"{flag}: value read from ${var}, which the EnvironmentFile= must define")
                i += 2
                continue
        words.append((word, False))
        i += 1
    return words, notes


def _group_words(words: list[str]) -> list[str]:
    """Lines of a long command: the program with its leading words (``python3 -m
    sglang.launch_server``), then each ``--flag`` with the values that follow it."""
    lines: list[str] = []
    for word in words:
        if lines and not word.startswith("--"):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def render_systemd_unit(
    spec: LaunchSpec,
    *,
    description: str,
    header: Iterable[str] = (),
    python: str | None = None,
    user: str | None = None,
    working_directory: str | None = None,
    environment_file: str | None = None,
    restart: str = "on-failure",
) -> str:
    """A complete systemd service unit that runs ``spec``.

    ``header`` lines become comments at the top (measured numbers, study, trial).
    ``python`` replaces ``argv[0]`` when that is ``python``/``python3``; any other
    relative program is resolved on this machine's PATH, since systemd needs an absolute
    path. ``environment_file`` (``EnvironmentFile=``, prefix ``-`` to make it optional)
    is where secrets go: variables and flag values that look like secrets are never
    written into the unit.
    """
    if not spec.argv:
        raise ValueError("empty command line")
    if working_directory is not None and not working_directory.startswith("/"):
        raise ValueError(f"WorkingDirectory= must be an absolute path, not {working_directory!r}")
    if user is not None and (not user or any(ch.isspace() for ch in user)):
        raise ValueError(f"not a user name: {user!r}")

    exe, *lead = _executable(spec.argv[0], python)
    words, secret_notes = _hide_secret_flags(spec.argv[1:])
    quoted = [systemd_quote(w, expand=is_ref) for w, is_ref in words]

    lines = [f"# {_single_line(h)}" if h.strip() else "#" for h in header]
    lines += [
        "[Unit]",
        f"Description={_single_line(description).replace('%', '%%')}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
    ]
    if user:
        lines.append(f"User={user}")
    if working_directory:
        # a path setting: taken verbatim (no quotes, no escapes), specifiers expanded
        lines.append(f"WorkingDirectory={working_directory.replace('%', '%%')}")
    if environment_file:
        lines.append(f"EnvironmentFile={environment_file.replace('%', '%%')}")
    where = f"in {environment_file.lstrip('-')}" if environment_file else "in an EnvironmentFile="
    for name, value in spec.env.items():
        if looks_secret(name):
            lines.append(f"# {name} looks like a secret: not written here; set it {where}")
        else:
            lines.append(_environment_line(name, value))
    lines += [f"# {note}" for note in secret_notes]
    command = _group_words([systemd_quote(exe), *(systemd_quote(w) for w in lead), *quoted])
    lines.append("ExecStart=" + " \\\n    ".join(command))
    lines += [
        f"Restart={restart}",
        f"RestartSec={RESTART_SEC}",
        f"TimeoutStartSec={TIMEOUT_START_S}",
        "KillMode=control-group",
        f"LimitNOFILE={LIMIT_NOFILE}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def render_shell(spec: LaunchSpec) -> str:
    """A copy-pasteable shell command: ``VAR=value \\`` lines, then the command with one
    launch option per line. Values are kept as they are (it is the user's own shell);
    :func:`parse_shell` reads it back to the same argv and environment."""
    lines = [f"{name}={shlex.quote(value)}" for name, value in spec.env.items()]
    command = _group_words([shlex.quote(word) for word in spec.argv])
    lines += [command[0], *("  " + line for line in command[1:])]
    return " \\\n".join(lines) + "\n"


def _join_continuations(text: str) -> str:
    """Remove backslash-newline outside single quotes, as a POSIX shell does."""
    out: list[str] = []
    i, n = 0, len(text)
    in_single = in_double = False
    while i < n:
        ch = text[i]
        if in_single:
            in_single = ch != "'"
            out.append(ch)
            i += 1
        elif ch == "\\" and i + 1 < n:
            if text[i + 1] != "\n":
                out.append(text[i : i + 2])
            i += 2
        else:
            if ch == "'" and not in_double:
                in_single = True
            elif ch == '"':
                in_double = not in_double
            out.append(ch)
            i += 1
    return "".join(out)


def parse_shell(text: str) -> tuple[list[str], dict[str, str]]:
    """Read a shell command as :func:`render_shell` writes it (or as a person pastes
    one): leading ``VAR=value`` words become the environment, the rest the argv."""
    words = shlex.split(_join_continuations(text))
    env: dict[str, str] = {}
    while words:
        match = _ENV_ASSIGNMENT.match(words[0])
        if not match:
            break
        env[match.group(1)] = match.group(2)
        words.pop(0)
    return words, env
