"""Launch and run failures, classified the same way for every backend."""

from __future__ import annotations

from typing import Literal, get_args

FailureClass = Literal[
    "invalid-args",
    "oom",
    "cuda-graph-oom",
    "crash",
    "timeout",
    "hang",
    "request-errors",
    "port-busy",
    "unreachable",
    "setup",
    "interrupted",
    "orphaned",
]

FAILURE_CLASSES: tuple[str, ...] = get_args(FailureClass)
#: Classes that blame the host, not the configuration: the same failure whatever the
#: parameters (a missing module or model path, a CUDA driver error, a port held by
#: another service, a host that stopped answering ssh). Their configurations are queued
#: again; launches failing this way in a row stop the study.
SETUP_CLASSES = frozenset({"setup", "port-busy", "unreachable"})
#: Classes of a launch that ran out of GPU memory: the configuration asked for more than the
#: GPUs hold (a smaller memory fraction may make room for it).
MEMORY_CLASSES = frozenset({"oom", "cuda-graph-oom"})


class LaunchFailure(Exception):
    """A server that did not start (or died), with its failure class and message."""

    def __init__(self, reason: FailureClass | str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"
