"""NCCL's own defaults for the environment variables a space may set.

A variable set to NCCL's default starts the same communicators as leaving it unset, so the
two are one server (:func:`tuner.resolution.server_key`): a study never restarts a server
to measure ``NCCL_BUFFSIZE=4194304`` after measuring it unset. Only defaults NCCL documents
as fixed belong here; those it derives from the topology do not: ``NCCL_NTHREADS``
(512, or 256 for the Simple protocol on rings bound by PCIe bandwidth), the channel
counts and ``NCCL_PROTO`` (chosen per message size).
"""

from __future__ import annotations

from collections.abc import Mapping

#: NCCL_BUFFSIZE: 4 MiB (NCCL docs, "Environment Variables"; ``DEFAULT_BUFFSIZE`` in NCCL's
#: source). It sizes the Simple protocol's buffers whatever the protocol selection.
DEFAULT_BUFFSIZE = 4 * 1024 * 1024

#: Variables whose default is a fixed value, as the rendered environment spells it.
FIXED_DEFAULTS: dict[str, str] = {"NCCL_BUFFSIZE": str(DEFAULT_BUFFSIZE)}


def without_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less the NCCL variables set to NCCL's fixed default (the same server)."""
    return {name: value for name, value in env.items() if FIXED_DEFAULTS.get(name) != value.strip()}
