"""Subcommands of the ``tuner`` CLI, one module each.

Each module defines ``register(subparsers) -> None``, which adds its parser and sets
``handler`` (a callable taking the parsed namespace and returning the exit code) with
``parser.set_defaults(handler=...)``.
"""

#: Modules in the order ``tuner --help`` lists them.
COMMAND_MODULES = (
    "init",
    "profile",
    "search",
    "best",
    "trials",
    "space",
    "simulate",
    "calibration",
    "bench",
    "emulate",
    "dashboard",
    "report",
)
