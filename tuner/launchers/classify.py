"""Failure classification: why did a server not start, or why did it die?

One function, :func:`classify_failure`, turns what every backend can observe about a
dead server (its exit status and the text of its log) into a :class:`LaunchFailure`
with one of the classes in :data:`tuner.failures.FAILURE_CLASSES`. The study learns
from the class (an ``invalid-args`` or ``oom`` config will never run; a ``crash``
might be bad luck), so the rules are explicit and ordered:

1. Log patterns, in priority order: the engine's ``failure_patterns`` first (they know
   the engine's own wording, e.g. SGLang's "Not enough memory. Please try to increase
   --mem-fraction-static"), then :data:`GENERIC_FAILURE_PATTERNS` (CUDA, NCCL, socket
   and Python wording shared by every engine). The first pattern, in that order, that
   matches the end of the log wins; the line it matched becomes the message. Catch-all
   rules (a Python traceback header) go after all others, whichever list they are in,
   and their message is the exception line that ends the traceback.
2. Patterns win over the exit status on purpose: an engine that fails during startup
   often dies by a signal (SGLang's launcher kills its process tree with SIGKILL when a
   scheduler child raises), yet its log says exactly why.
3. ``invalid-args`` only describes a server that never became ready: if the engine's
   ready line is in the log, only the text after it is searched, and an
   ``invalid-args`` match there counts as a ``crash``.
4. Nothing matched: the server crashed (signal or not).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence

from tuner.failures import LaunchFailure

#: One failure rule: a regular expression (text or compiled) and the class it means;
#: an engine's ``failure_patterns`` are a sequence of these.
PatternRule = tuple["str | re.Pattern[str]", str]

#: Engine-independent wording, searched after the engine's own patterns. Ordered from
#: the most specific to the most general: "Traceback" matches nearly every failure and
#: must come last.
GENERIC_FAILURE_PATTERNS: tuple[PatternRule, ...] = (
    (r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", "oom"),
    (r"Address already in use|EADDRINUSE", "port-busy"),
    (r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidUsage", "crash"),
    (r"Segmentation fault|core dumped|Fatal Python error", "crash"),
    # The host is not set up: the same failure whatever the parameters (SETUP_CLASSES); after
    # the GPU failures above, which say more when a log has both.
    (
        r"No module named |ModuleNotFoundError|No such file or directory|FileNotFoundError"
        r"|CUDA driver version is insufficient|cudaErrorInsufficientDriver|found no NVIDIA driver"
        r"|CUDA driver initialization failed|Permission denied|PermissionError",
        "setup",
    ),
    (r"Traceback \(most recent call last\)", "crash"),
)

#: How much of the end of a log is searched. A dead server's reason is at the end; an
#: old, harmless warning from an hour earlier must not decide the class.
SEARCH_TAIL_CHARS = 64 * 1024

_MESSAGE_MAX = 400


def describe_exit(returncode: int | None) -> str:
    """Human wording of an exit status: negative values are signals (``subprocess``'s
    convention), ``None`` means the status is unknown or the process still runs."""
    if returncode is None:
        return "exit status unknown"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit status {returncode}"


def _compiled(patterns: Iterable[PatternRule]) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for pattern, reason in patterns:
        out.append((pattern if isinstance(pattern, re.Pattern) else re.compile(pattern), reason))
    return out


def _is_catch_all(regex: re.Pattern[str]) -> bool:
    """A rule that matches (nearly) every failure: a Python traceback header."""
    return "Traceback" in regex.pattern


def _ordered(rules: list[tuple[re.Pattern[str], str]]) -> list[tuple[re.Pattern[str], str]]:
    """Priority order, except that catch-all rules go last, so that a specific rule of
    the generic list (an NCCL error) is not shadowed by an engine's "Traceback"."""
    return [r for r in rules if not _is_catch_all(r[0])] + [r for r in rules if _is_catch_all(r[0])]


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*$", re.MULTILINE)


def _exception_line(text: str, pos: int) -> str | None:
    """The exception line that ends the traceback starting at ``pos`` (the most useful
    line of a traceback), if there is one."""
    match = _EXCEPTION_LINE.search(text, pos)
    if match is None:
        return None
    line = match.group(0).strip()
    return line if len(line) <= _MESSAGE_MAX else line[: _MESSAGE_MAX - 3] + "..."


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start : end if end >= 0 else len(text)].strip()
    return line if len(line) <= _MESSAGE_MAX else line[: _MESSAGE_MAX - 3] + "..."


def _last_match(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in regex.finditer(text):  # noqa: B007 - we want the last one
        pass
    return last


def classify_failure(
    *,
    returncode: int | None,
    log_text: str,
    patterns: Sequence[PatternRule] = (),
    ready_pattern: str | re.Pattern[str] | None = None,
    default: str = "crash",
    what: str = "server",
) -> LaunchFailure:
    """Classify a dead (or failed-to-start) server from its exit status and log.

    ``returncode`` follows ``subprocess``: negative for a signal, ``None`` when unknown.
    ``patterns`` are the engine's ``failure_patterns``; :data:`GENERIC_FAILURE_PATTERNS`
    are always appended. ``ready_pattern`` is the engine's ready line (see rule 3 in the
    module docstring). ``default`` is the class when no pattern matches.
    """
    text = log_text[-SEARCH_TAIL_CHARS:]
    started = False
    if ready_pattern is not None:
        ready = ready_pattern if isinstance(ready_pattern, re.Pattern) else re.compile(ready_pattern)
        match = _last_match(ready, text)
        if match is not None:
            started = True
            text = text[match.end() :]
    exit_words = describe_exit(returncode)
    for regex, reason in _ordered(_compiled([*patterns, *GENERIC_FAILURE_PATTERNS])):
        match = _last_match(regex, text)
        if match is None:
            continue
        if started and reason == "invalid-args":
            reason = "crash"
        line = _exception_line(text, match.end()) if _is_catch_all(regex) else None
        return LaunchFailure(reason, f"{line or _line_at(text, match.start())} ({what} {exit_words})")
    if returncode is not None and returncode < 0:
        return LaunchFailure(default, f"{what} {exit_words}")
    phase = "after it became ready" if started else "before it became healthy"
    return LaunchFailure(default, f"{what} ended {phase} ({exit_words}); no known failure in its log")


def signal_from_shell_status(status: int) -> int:
    """Map a POSIX shell's ``$?`` to ``subprocess``'s convention: a shell reports a child
    killed by signal N as 128+N; return -N for those, the status otherwise."""
    if 128 < status < 128 + 65:
        return -(status - 128)
    return status
