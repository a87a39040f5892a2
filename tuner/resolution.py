"""The server a configuration really starts, as opposed to the flags it renders.

An engine rewrites some settings silently (SGLang sets ep_size = tp_size under DeepEP and
the other all-to-all backends), so several rendered command lines can start one server.
Here live the three uses of that fact:

* :func:`server_key`: the identity that reuse and dedupe key on, so that a server is
  measured once however many spellings of it the sampler proposes (settings that start
  the same server are spelled one way: the engine's in its ``same_server``, NCCL's
  defaults in :mod:`tuner.engines.nccl`);
* :func:`rewrites`: what the engine changed from what the configuration asked, shown on
  the trial;
* :func:`readback_differences`: after a healthy launch, the settings the server reports
  (``/server_info``) against the ones intended.

The resolution comes from SGLang itself when the pre-flight ran (:mod:`tuner.preflight`),
else from the engine adapter's launch rules; an engine without resolution (no
``server_identity``) keys on its rendered flags, as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tuner.engines import nccl
from tuner.engines.base import render_env

if TYPE_CHECKING:
    from tuner.space import Space

#: Settings compared between the intended server and ``/server_info``: name in the
#: identity -> path in SGLang's ``/server_info`` (0.5.23 nests the graph limits).
READBACK_FIELDS: dict[str, tuple[str, ...]] = {
    "tp_size": ("tp_size",),
    "ep_size": ("ep_size",),
    "pp_size": ("pp_size",),
    "dp_size": ("dp_size",),
    "moe_a2a_backend": ("moe_a2a_backend",),
    "moe_dense_tp_size": ("moe_dense_tp_size",),
    "enable_eplb": ("enable_eplb",),
    "num_continuous_decode_steps": ("num_continuous_decode_steps",),
    "max_running_requests": ("max_running_requests",),
    "mem_fraction_static": ("mem_fraction_static",),
    "chunked_prefill_size": ("chunked_prefill_size",),
    "kv_cache_dtype": ("kv_cache_dtype",),
    "cuda_graph_max_bs": ("cuda_graph_config", "decode", "max_bs"),
    "cuda_graph_decode_max_bs": ("cuda_graph_config", "decode", "max_bs"),
}


def identity(
    space: Space, params: Mapping[str, Any], resolved: Mapping[str, Any] | None = None
) -> dict | None:
    """The resolved server of ``params`` (see :meth:`SGLangEngine.server_identity`), or
    None when the engine does not resolve launches."""
    resolve = getattr(space.engine, "server_identity", None)
    if resolve is None:
        return None
    return resolve(space.render(params).argv, space.gpu_count, resolved)


def server_key(space: Space, params: Mapping[str, Any], resolved: Mapping[str, Any] | None = None) -> str:
    """Canonical identity of the server ``params`` starts: its program, resolved settings
    and environment. Falls back to the rendered key (:meth:`Space.key`) for an engine
    without resolution or a command line it cannot parse."""
    try:
        server = identity(space, params, resolved)
    except Exception:  # a launch the rules refuse has no server; its rendered key stands in
        server = None
    if server is None:
        return space.key(params)
    link = space.hardware_profile.interconnect
    same_server = getattr(space.engine, "same_server", None)
    if same_server is not None:
        server = same_server(server, space.hardware_profile.gpu.memory_gib)
    spec = space.render(params)
    data = {
        "command": list(space.launch.command),
        "server": server,
        "env": sorted(
            nccl.without_defaults(
                render_env(spec.env), ll128_by_default=link.ll128_enabled_by_default
            ).items()
        ),
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True, default=str)


def rewrites(space: Space, params: Mapping[str, Any], resolved: Mapping[str, Any] | None = None) -> dict:
    """Settings the engine changes from what ``params`` asks: ``{name: [asked, resolved]}``
    for every setting the command line sets explicitly whose resolved value differs."""
    asked_of = getattr(space.engine, "asked", None)
    server = identity(space, params, resolved)
    if server is None or asked_of is None:
        return {}
    out = {}
    for name, want in asked_of(space.render(params).argv).items():
        for key in (name, *_SGLANG_NAMES.get(name, ())):
            if key in server and server[key] is not None and server[key] != want:
                out[name] = [want, server[key]]
    return out


#: The tuner's typed name -> SGLang's own name in its resolved settings, where they differ.
_SGLANG_NAMES = {"cuda_graph_max_bs": ("cuda_graph_decode_max_bs",)}


def _dig(info: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = info
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


_MISSING = object()


def readback_differences(intended: Mapping[str, Any], server_info: Mapping[str, Any]) -> dict:
    """Settings the running server reports differently from the intended (resolved) ones:
    ``{name: [intended, reported]}``. A setting the server does not report, or one left
    to the engine's default (None), is not compared."""
    out = {}
    for name, path in READBACK_FIELDS.items():
        want = intended.get(name)
        if want is None:
            continue
        got = _dig(server_info, path)
        if got is _MISSING or got is None:
            continue
        if isinstance(want, float) or isinstance(got, float):
            same = abs(float(want) - float(got)) < 1e-9
        else:
            same = want == got
        if not same:
            out[name] = [want, got]
    return out
