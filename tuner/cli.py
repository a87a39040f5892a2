"""The ``tuner`` command: dispatch to the subcommand modules in :mod:`tuner.commands`."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from tuner import __version__, redact
from tuner.commands import COMMAND_MODULES
from tuner.errors import UsageError

#: Exit code for bad usage or bad input files (argparse uses it too).
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tuner",
        description="Configuration autotuner for LLM serving: searches SGLang/vLLM launch settings "
        "with an Optuna study, one server restart per trial, on a real host or the built-in simulator.",
    )
    parser.add_argument("--version", action="version", version=f"tuner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"tuner.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tuner.commands.{name}":
                continue  # command not shipped in this build
            raise
        module.register(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM takes Ctrl-C's path: servers stopped, the running trial recorded."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except UsageError as exc:
        print(redact.text(f"tuner {args.command}: error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``tuner trials | head``): no traceback; stdout is pointed at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
