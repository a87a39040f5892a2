"""Logging for the ``tuner`` commands: loguru to the console and, optionally, to a file.

Why a module of its own: a long search draws a live status line on the terminal
(:mod:`tuner.progress`). A log message written straight to stderr would land in the
middle of that line, so console messages go through a small hook: while a status line
is shown, its owner clears it, the message is written, and the line is drawn again.
Optuna's own log records and Python warnings are routed into loguru for the same
reason, and so that ``--log-file`` holds everything that happened during a run.

The file gets every record (DEBUG and up, with date and source line); the console
gets ``level`` and up, short.
"""

from __future__ import annotations

import inspect
import logging as std_logging
import sys
import threading
from pathlib import Path
from typing import Any, Protocol, TextIO

from loguru import logger

from tuner import redact

CONSOLE_FORMAT = "<dim>{time:HH:mm:ss}</dim> <level>{level: <7}</level> {message}"
FILE_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {name}:{line} | {message}"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: ``extra`` key of records whose text is already on stdout (trial lines): file only.
SHOWN = "shown_on_stdout"


class Console(Protocol):
    """Something that owns a status line and can print a message above it."""

    def write_above(self, text: str, stream: TextIO) -> None:
        """Write ``text`` (ending in a newline) to ``stream`` without breaking the status line."""


_console: Console | None = None
_console_lock = threading.Lock()
_configured = False


def set_console(console: Console | None) -> None:
    """Route console log messages through ``console`` (None: straight to the stream again)."""
    global _console
    with _console_lock:
        _console = console


class _ConsoleSink:
    """A loguru sink writing to ``stream`` (None: whatever ``sys.stderr`` is at the time of
    writing), through the status-line owner when there is one."""

    def __init__(self, stream: TextIO | None):
        self.stream = stream

    def __call__(self, message: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        with _console_lock:
            console = _console
        if console is not None:
            console.write_above(str(message), stream)
        else:
            stream.write(str(message))
            stream.flush()


class _InterceptHandler(std_logging.Handler):
    """Hands standard-library log records (Optuna's, warnings) to loguru."""

    def emit(self, record: std_logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        # Report the caller of the logging call, not the logging module's own frames.
        frame, depth = inspect.currentframe(), 0
        while frame is not None and (depth == 0 or frame.f_code.co_filename == std_logging.__file__):
            frame = frame.f_back
            depth += 1
        logger.opt(depth=depth, exception=record.exc_info).log(
            level, "{}: {}", record.name, record.getMessage()
        )


def setup(
    level: str = "WARNING",
    log_file: Path | str | None = None,
    *,
    stream: TextIO | None = None,
    route_standard_logging: bool = True,
) -> None:
    """Configure loguru for a command: console (``stream``, default stderr) at ``level``
    and up, ``log_file`` (appended) at DEBUG; Optuna's log records and Python warnings
    are routed into loguru unless ``route_standard_logging`` is false.

    Safe to call more than once: each call replaces the previous configuration.
    """
    global _configured
    level = level.upper()
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    logger.remove()
    # Every record passes the redaction step: a message quoting a log line or an error
    # never prints or writes a known secret (tuner.redact).
    logger.configure(patcher=_redact_record)
    tty = bool(getattr(stream if stream is not None else sys.stderr, "isatty", lambda: False)())
    logger.add(
        _ConsoleSink(stream),
        level=level,
        format=CONSOLE_FORMAT,
        colorize=tty,
        filter=lambda record: not record["extra"].get(SHOWN),
    )
    if log_file is not None:
        path = Path(log_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        logger.add(
            str(path),
            level="DEBUG",
            format=FILE_FORMAT,
            encoding="utf-8",
            mode="a",
            backtrace=False,
            diagnose=False,
        )
    if route_standard_logging:
        _route_standard_logging()
    _configured = True


def _redact_record(record: Any) -> None:
    record["message"] = redact.text(record["message"])


def ensure_setup() -> None:
    """Unless :func:`setup` has run: loguru's console at WARNING, nothing else changed.

    Loguru's own default handler prints everything down to DEBUG; code that never
    called :func:`setup` (a library user, a test) would otherwise show every progress
    record. Standard logging is left alone here: that is the command's decision.
    """
    if not _configured:
        setup(route_standard_logging=False)


def _route_standard_logging() -> None:
    import optuna

    handler = _InterceptHandler()
    # Optuna writes to stderr through its own handler; ours takes its place.
    optuna.logging.disable_default_handler()
    optuna_logger = std_logging.getLogger("optuna")
    for h in list(optuna_logger.handlers):
        if isinstance(h, _InterceptHandler):
            optuna_logger.removeHandler(h)
    optuna_logger.addHandler(handler)
    optuna_logger.propagate = False
    std_logging.captureWarnings(True)
    warnings_logger = std_logging.getLogger("py.warnings")
    for h in list(warnings_logger.handlers):
        if isinstance(h, _InterceptHandler):
            warnings_logger.removeHandler(h)
    warnings_logger.addHandler(handler)
    warnings_logger.propagate = False
