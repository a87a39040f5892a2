"""Launch and run failures, classified the same way for every backend."""

from __future__ import annotations

from typing import Literal

FailureClass = Literal[
    "invalid-args", "oom", "cuda-graph-oom", "crash", "timeout", "port-busy", "unreachable", "interrupted"
]

FAILURE_CLASSES: tuple[str, ...] = (
    "invalid-args",
    "oom",
    "cuda-graph-oom",
    "crash",
    "timeout",
    "port-busy",
    "unreachable",
    "interrupted",
)


class LaunchFailure(Exception):
    """A server that did not start (or died), with its failure class and message."""

    def __init__(self, reason: FailureClass | str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"
