"""NCCL's own defaults for the environment variables a space may set.

A variable set to what NCCL does without it starts the same communicators as leaving it
unset, so the two are one server (:func:`tuner.resolution.server_key`): a study never
restarts a server to measure ``NCCL_BUFFSIZE=4194304`` after measuring it unset. Only
defaults NCCL fixes, or derives from what the hardware profile records, belong here; not
those it derives from the topology at run time: ``NCCL_NTHREADS`` (512, or 256 for the
Simple protocol on rings bound by PCIe bandwidth) and the channel counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from tuner.profiles import NcclProtocol

#: NCCL_BUFFSIZE: 4 MiB (NCCL docs, "Environment Variables"; ``DEFAULT_BUFFSIZE`` in NCCL's
#: source). It sizes the Simple protocol's buffers whatever the protocol selection.
DEFAULT_BUFFSIZE = 4 * 1024 * 1024
#: NCCL's protocols, as NCCL_PROTO spells them (case-insensitive).
PROTOCOLS: tuple[NcclProtocol, ...] = ("LL", "LL128", "Simple")


class UnknownProtocol(ValueError):
    """An NCCL_PROTO entry that names no protocol (NCCL refuses it at init)."""


def allowed_protocols(value: str) -> tuple[NcclProtocol, ...]:
    """The protocols an NCCL_PROTO value lets NCCL use: the ones it lists, or with a leading
    ``^`` the ones it does not (empty when it excludes them all)."""
    exclude = value.strip().startswith("^")
    names = [p.strip() for p in value.strip().lstrip("^").split(",") if p.strip()]
    spelled = {p.lower(): p for p in PROTOCOLS}
    for name in names:
        if name.lower() not in spelled:
            raise UnknownProtocol(name)
    chosen = {spelled[name.lower()] for name in names}
    return tuple(p for p in PROTOCOLS if (p not in chosen) == exclude)


def default_protocols(ll128_by_default: bool) -> tuple[NcclProtocol, ...]:
    """The protocols NCCL uses with NCCL_PROTO unset: LL and Simple, and LL128 where NCCL
    enables it by default (GPUs of one tested architecture joined by NVLink; never over
    PCIe: the hardware profile's ``ll128_enabled_by_default``)."""
    return tuple(p for p in PROTOCOLS if p != "LL128" or ll128_by_default)


def without_defaults(env: Mapping[str, str], *, ll128_by_default: bool) -> dict[str, str]:
    """``env`` less the NCCL variables set to what NCCL does without them (the same
    server): a 4 MiB NCCL_BUFFSIZE, an NCCL_PROTO that allows the default protocols
    (``LL,Simple`` or ``^LL128`` over PCIe)."""
    out = dict(env)
    if out.get("NCCL_BUFFSIZE", "").strip() == str(DEFAULT_BUFFSIZE):
        del out["NCCL_BUFFSIZE"]
    if "NCCL_PROTO" in out:
        try:
            if allowed_protocols(out["NCCL_PROTO"]) == default_protocols(ll128_by_default):
                del out["NCCL_PROTO"]
        except UnknownProtocol:
            pass  # refused at launch; its own server key
    return out
