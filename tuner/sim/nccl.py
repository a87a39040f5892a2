"""NCCL all-reduce cost under the NCCL environment variables.

The model is the textbook ring all-reduce, ``latency + 2(n-1)/n * bytes / busbw``, with
the protocol, channel count, thread count, buffer size, algorithm and P2P transport
chosen the way NCCL 2.2x-2.30 chooses them from its environment. Figures come from the
hardware profile (measured on the reference host where available).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.engines import nccl as nccl_env
from tuner.failures import LaunchFailure
from tuner.profiles import Interconnect, NcclProtocol

#: NCCL_P2P_LEVEL path types, nearest first (NCCL docs: LOC, NVL, PIX, PXB, PHB, SYS).
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
#: NCCL_P2P_LEVEL's legacy integer form (NCCL docs, "NCCL_P2P_LEVEL"): LOC=0, PIX=1, PXB=2,
#: PHB=3, SYS=4; NVL has no integer. NCCL clamps larger integers to SYS.
P2P_LEVEL_NUMBERS = ("LOC", "PIX", "PXB", "PHB", "SYS")
#: Algorithms NCCL offers; NVLS and CollNet need NVLink SHARP / a SHARP network.
ALGORITHMS = ("Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain", "PAT")
_NEEDS_NVLINK = {"NVLS", "NVLSTree"}
_NEEDS_COLLNET = {"CollNetDirect", "CollNetChain"}

#: LL moves 8 bytes of data per 16-byte line (half the line is flags) and is thread-bound;
#: its bus bandwidth is a fraction of Simple's on PCIe: "roughly 1/4" by the reference notes,
#: 1/3 here, calibrated to the TP8 peak (~1291 tok/s with PROTO=LL forced).
LL_BANDWIDTH_FRACTION = 0.33
#: LL128 keeps 120 of 128 bytes as data; ~90% of Simple where it is enabled (NCCL tuning tables).
LL128_BANDWIDTH_FRACTION = 0.9
#: NCCL's default NCCL_NTHREADS for all protocols on recent GPUs.
DEFAULT_NTHREADS = 512
#: Simple protocol pipelining: per-step chunk = BUFFSIZE / NCCL_STEPS(8); larger chunks hide
#: the per-step handshake. Half-efficiency buffer size of that effect (estimate).
BUFFSIZE_HALF_BYTES = 256 * 1024
#: Intra-node Tree on PCIe degenerates to a chain: ~55% of Ring's bus bandwidth for large
#: messages and ~10% lower latency for small ones (nccl-tests on PCIe boxes, estimate).
TREE_BANDWIDTH_FACTOR = 0.55
TREE_LATENCY_FACTOR = 0.9
#: Below this size NCCL's tuner uses its latency-bound choice (the profile's default small
#: protocol); above it, the bandwidth-optimal protocol among the allowed ones.
SMALL_MESSAGE_BYTES = 64 * 1024
#: NCCL_BUFFSIZE x channels x (send + recv) x ring peers (2) per communicator, and SGLang
#: keeps about this many communicators per GPU (TP group, world, and the MoE group).
COMMUNICATORS_PER_GPU = 2


@dataclass(frozen=True, slots=True)
class NcclConfig:
    """NCCL settings as NCCL resolves them from the environment on one host."""

    allowed_protocols: tuple[NcclProtocol, ...]
    algorithm: str
    channels: int
    nthreads: int
    buffsize: int
    p2p: bool

    def buffers_gib(self) -> float:
        """Device memory NCCL keeps for its channel buffers."""
        return self.buffsize * self.channels * 2 * 2 * COMMUNICATORS_PER_GPU / 2**30


def _int_env(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        # NCCL reads integers with strtoll; garbage reads as 0 and is then ignored with a warning.
        return default
    return max(low, min(high, value))


def resolve(env: Mapping[str, str], link: Interconnect) -> NcclConfig:
    """Resolve the NCCL_* variables of ``env`` for this interconnect.

    Raises :class:`LaunchFailure` (``crash``) for settings that make NCCL abort at init,
    as a real server would when its first collective is set up.
    """
    allowed = list(nccl_env.default_protocols(link.ll128_enabled_by_default))
    proto = env.get("NCCL_PROTO", "").strip()
    if proto:
        try:
            allowed = list(nccl_env.allowed_protocols(proto))
        except nccl_env.UnknownProtocol as exc:
            raise LaunchFailure(
                "crash",
                f"NCCL WARN Invalid NCCL_PROTO value {proto!r}: unknown "
                f"protocol {exc.args[0]!r}\nncclInvalidUsage: invalid usage",
            ) from None
        if not allowed:
            raise LaunchFailure(
                "crash",
                f"NCCL WARN No protocol left after NCCL_PROTO={proto}\nncclInvalidUsage: invalid usage",
            )
    algo = env.get("NCCL_ALGO", "").strip() or "Ring"
    first = algo.lstrip("^").split(",")[0].strip()
    if first not in ALGORITHMS:
        raise LaunchFailure(
            "crash", f"NCCL WARN Invalid NCCL_ALGO value {algo!r}\nncclInvalidUsage: invalid usage"
        )
    if algo.startswith("^"):
        first = "Ring" if first != "Ring" else "Tree"
    if (first in _NEEDS_NVLINK and link.kind != "nvlink") or first in _NEEDS_COLLNET:
        raise LaunchFailure(
            "crash",
            f"NCCL WARN Error : no algorithm/protocol available for "
            f"NCCL_ALGO={algo}\nncclInvalidUsage: invalid usage",
        )
    if first not in ("Ring", "Tree"):
        first = "Ring"
    min_ch = _int_env(env, "NCCL_MIN_NCHANNELS", 1, 1, 64)
    max_ch = _int_env(env, "NCCL_MAX_NCHANNELS", 64, 1, 64)
    channels = min(max(link.default_channels, min_ch), max_ch)
    nthreads = _int_env(env, "NCCL_NTHREADS", DEFAULT_NTHREADS, 64, 512)
    nthreads = max(64, nthreads - nthreads % 32)
    buffsize = _int_env(env, "NCCL_BUFFSIZE", nccl_env.DEFAULT_BUFFSIZE, 64 * 1024, 1 << 30)
    p2p = env.get("NCCL_P2P_DISABLE", "0").strip() not in ("1", "true", "True")
    level = env.get("NCCL_P2P_LEVEL", "").strip().upper()
    if p2p and level:
        if level.isdigit():
            level = P2P_LEVEL_NUMBERS[min(int(level), len(P2P_LEVEL_NUMBERS) - 1)]
        if level in P2P_LEVELS:
            p2p = P2P_LEVELS.index(link.topology_path) <= P2P_LEVELS.index(level)
    return NcclConfig(tuple(allowed), first, channels, nthreads, buffsize, p2p)


class AllReduceModel:
    """Time of one all-reduce of ``nbytes`` across ``ranks`` GPUs of one host."""

    def __init__(self, cfg: NcclConfig, link: Interconnect):
        self.cfg = cfg
        self.link = link
        simple = min(link.busbw_max_gbs, link.busbw_per_channel_gbs * cfg.channels)
        if not cfg.p2p:
            simple *= link.no_p2p_bandwidth_factor
        if cfg.algorithm == "Tree":
            simple *= TREE_BANDWIDTH_FACTOR
        buf = cfg.buffsize / (cfg.buffsize + BUFFSIZE_HALF_BYTES)
        buf_default = nccl_env.DEFAULT_BUFFSIZE / (nccl_env.DEFAULT_BUFFSIZE + BUFFSIZE_HALF_BYTES)
        thread_ll = cfg.nthreads / DEFAULT_NTHREADS
        thread_simple = min(1.0, cfg.nthreads / 256)
        self._busbw: dict[NcclProtocol, float] = {
            "Simple": simple * thread_simple * buf / buf_default * 1e9,
            "LL": simple * LL_BANDWIDTH_FRACTION * thread_ll * 1e9,
            "LL128": simple * LL128_BANDWIDTH_FRACTION * thread_ll * 1e9,
        }
        extra = 0.0 if cfg.p2p else link.no_p2p_extra_latency_us
        lat_factor = TREE_LATENCY_FACTOR if cfg.algorithm == "Tree" else 1.0
        self._latency = {p: (link.latency_us[p] * lat_factor + extra) * 1e-6 for p in nccl_env.PROTOCOLS}

    def protocol_for(self, nbytes: float) -> NcclProtocol:
        """The protocol NCCL uses for a message of this size (its tuner's pick)."""
        allowed = self.cfg.allowed_protocols
        if nbytes <= SMALL_MESSAGE_BYTES and self.link.default_small_protocol in allowed:
            return self.link.default_small_protocol
        return min(allowed, key=lambda p: self._time(p, nbytes, 8))

    def _time(self, proto: NcclProtocol, nbytes: float, ranks: int) -> float:
        return self._latency[proto] + 2 * (ranks - 1) / ranks * nbytes / self._busbw[proto]

    def seconds(self, nbytes: float, ranks: int) -> float:
        if ranks <= 1:
            return 0.0
        return self._time(self.protocol_for(nbytes), nbytes, ranks)
