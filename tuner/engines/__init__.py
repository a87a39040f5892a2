"""Serving-engine adapters: flag names, launch rules and rendering per engine.

:func:`get` returns the adapter a search-space file names in its ``engine`` field.
Each engine module defines ``ENGINE``, an instance of a subclass of
:class:`tuner.engines.base.Engine` (the interface callers use); adding an engine is a
module and a line in :data:`ENGINES`.
"""

from __future__ import annotations

import importlib

from tuner.engines.base import Engine

#: engine name -> module that defines ``ENGINE``
ENGINES: dict[str, str] = {
    "sglang": "tuner.engines.sglang",
    "vllm": "tuner.engines.vllm",
}


def available() -> list[str]:
    """Names of the engines this build knows."""
    return sorted(ENGINES)


def get(name: str) -> Engine:
    """The adapter of engine ``name``; KeyError naming the known engines otherwise."""
    try:
        module = ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(available())}") from None
    return importlib.import_module(module).ENGINE


def for_version(engine: Engine, version: str) -> Engine:
    """``engine``'s adapter for release ``version`` (its flag spellings and rules); KeyError
    when the adapter knows no such release or does not tell releases apart."""
    return engine.for_version(version)
