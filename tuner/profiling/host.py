"""A hardware profile from ``nvidia-smi`` on the GPU host (``tuner profile host``).

Two read-only commands describe what the simulator needs to know about a host:

* ``nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id --format=csv``: how many
  GPUs, which model, how much memory CUDA sees;
* ``nvidia-smi topo -m``: how each pair of GPUs connects. ``NV#`` between every pair is
  an NVLink/NVSwitch host; otherwise the farthest PCIe path (``PIX`` < ``PXB`` < ``PHB``
  < ``NODE`` < ``SYS``) is what decides whether NCCL uses peer-to-peer copies by default
  and what ``NCCL_P2P_LEVEL`` must allow.

Figures ``nvidia-smi`` does not print (bandwidth, tensor rates, link speeds) come from
the datasheet table in :mod:`tuner.profiling.gpus`. The commands run locally or, with
``--host``, over the project's ssh transport; saved outputs can be read instead.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tuner.errors import UsageError
from tuner.profiles import HardwareProfile
from tuner.profiling import gpus

QUERY_FIELDS = ("index", "name", "memory.total", "pci.bus_id")
#: The two commands, as argv tails after the nvidia-smi binary.
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
TOPO_ARGS = ("topo", "-m")

#: Path types of ``nvidia-smi topo -m`` between two GPUs, nearest first (``SOC`` is the
#: pre-2017 spelling of ``SYS``).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: NCCL's P2P levels have no ``NODE``: a path across host bridges of one NUMA node is
#: NCCL's ``PHB`` (NCCL docs, NCCL_P2P_LEVEL).
NCCL_PATH = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
#: CUDA runtime, allocator slack and workspace outside the engine's static pool (the estimate
#: of the packaged profiles, GiB).
RUNTIME_RESERVED_GIB = 1.6

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HostError(UsageError):
    """nvidia-smi output this module cannot read, or a GPU it does not know."""


@dataclass(frozen=True, slots=True)
class GpuRow:
    index: int
    name: str
    memory_mib: int
    bus_id: str


@dataclass(frozen=True, slots=True)
class Topology:
    """The GPU-to-GPU part of ``nvidia-smi topo -m``."""

    gpus: int
    #: Every GPU pair is connected by NVLink (directly or through NVSwitch).
    all_nvlink: bool
    #: The farthest PCIe path between two GPUs not linked by NVLink (None: all NVLink).
    worst_pcie: str | None
    nvlinks: int


def parse_query(text: str) -> list[GpuRow]:
    """Rows of ``nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id --format=csv``."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines or not lines[0].lower().startswith("index"):
        raise HostError(
            "nvidia-smi --query-gpu output: expected a CSV header starting with 'index' "
            f"(run: nvidia-smi {' '.join(QUERY_ARGS)})"
        )
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY_FIELDS):
            raise HostError(f"nvidia-smi --query-gpu output: cannot read the line {line!r}")
        index, name, memory, bus = cells
        m = re.fullmatch(r"(\d+)\s*MiB", memory)
        if not (index.isdigit() and m):
            raise HostError(f"nvidia-smi --query-gpu output: cannot read the line {line!r}")
        rows.append(GpuRow(int(index), name, int(m.group(1)), bus))
    if not rows:
        raise HostError("nvidia-smi --query-gpu output lists no GPU")
    return rows


def parse_topology(text: str) -> Topology:
    """The GPU rows of ``nvidia-smi topo -m`` (NIC rows and the legend are ignored)."""
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header = next((ln for ln in lines if ln.startswith("\t") and "GPU0" in ln), None)
    if header is None:
        raise HostError("nvidia-smi topo -m output: no matrix header (a tab, then GPU0 GPU1 ...)")
    columns = [c.strip() for c in header.split("\t")[1:]]
    gpu_cols = [i for i, c in enumerate(columns) if re.fullmatch(r"GPU\d+", c)]
    rows = [ln for ln in lines if re.match(r"GPU\d+\t", ln)]
    if len(rows) != len(gpu_cols):
        raise HostError(f"nvidia-smi topo -m output: {len(gpu_cols)} GPU columns but {len(rows)} GPU rows")
    worst, all_nv, nvlinks = -1, True, 0
    for r, line in enumerate(rows):
        cells = [c.strip() for c in line.split("\t")[1:]]
        for c in gpu_cols:
            if c == r:
                continue
            cell = "SYS" if cells[c] == "SOC" else cells[c]
            nv = re.fullmatch(r"NV(\d+)", cell)
            if nv:
                nvlinks = max(nvlinks, int(nv.group(1)))
                continue
            if cell not in PCIE_PATHS:
                raise HostError(f"nvidia-smi topo -m output: unknown path type {cell!r} in row GPU{r}")
            all_nv = False
            worst = max(worst, PCIE_PATHS.index(cell))
    return Topology(len(rows), all_nv and len(rows) > 1, PCIE_PATHS[worst] if worst >= 0 else None, nvlinks)


@dataclass(frozen=True, slots=True)
class HostReading:
    profile: HardwareProfile
    gpu: gpus.KnownGPU
    topology: Topology
    memory_mib: int

    def yaml_text(self) -> str:
        p, t = self.profile, self.topology
        link = (
            f"NVLink between every pair (NV{t.nvlinks})"
            if t.all_nvlink
            else f"PCIe, farthest GPU pair {t.worst_pcie} (NCCL path {p.interconnect.topology_path})"
        )
        head = [
            f"# {p.name}: hardware profile written by `tuner profile host` from nvidia-smi.",
            f"# {p.gpu_count}x {self.gpu.name}, {self.memory_mib} MiB each as CUDA reports it; {link}.",
            f"# Datasheet figures: {self.gpu.source}.",
            "# Interconnect figures: "
            + (
                "NVLink hosts' NCCL measurements (H100/H200 profiles), scaled by NVLink generation."
                if p.interconnect.kind == "nvlink"
                else "the reference PCIe Gen5 host's NCCL measurements"
                + (", halved per PCIe generation below 5." if self.gpu.pcie_gen < 5 else ".")
            ),
        ]
        return "\n".join(head) + "\n" + yaml.safe_dump(p.model_dump(), sort_keys=False)


def read_host(query_text: str, topo_text: str, *, ident: str | None = None) -> HostReading:
    """A hardware profile from the two nvidia-smi outputs."""
    rows = parse_query(query_text)
    names = sorted({r.name for r in rows})
    if len(names) > 1:
        raise HostError(f"the host mixes GPU models ({', '.join(names)}); profile one model per host")
    known = gpus.lookup(names[0])
    if known is None:
        raise HostError(gpus.unknown_gpu_message(names[0]))
    topo = parse_topology(topo_text)
    if topo.gpus != len(rows):
        raise HostError(f"nvidia-smi lists {len(rows)} GPUs but topo -m shows {topo.gpus}")
    nvlink = topo.all_nvlink and known.nvlink is not None
    path = "NVL" if nvlink else NCCL_PATH[topo.worst_pcie or "PIX"]
    memory_mib = min(r.memory_mib for r in rows)
    link_word = "NVLink" if nvlink else "PCIe"
    data: dict[str, Any] = {
        "id": ident or f"{known.key}-{'nvlink' if nvlink else 'pcie'}-x{len(rows)}",
        "name": f"{len(rows)}x {known.name} ({link_word})",
        "gpu_count": len(rows),
        "gpu": {
            "name": known.name,
            "memory_gib": round(memory_mib / 1024, 2),
            "memory_bandwidth_gbs": known.memory_bandwidth_gbs,
            "dense_tflops": {"bf16": known.bf16_tflops, "fp8": known.fp8_tflops},
            "runtime_reserved_gib": RUNTIME_RESERVED_GIB,
        },
        "interconnect": gpus.interconnect(known, nvlink, path),
    }
    return HostReading(HardwareProfile.model_validate(data), known, topo, memory_mib)


def run_nvidia_smi(
    args: Sequence[str], *, host: str | None, nvidia_smi: str = "nvidia-smi", transport: Any = None
) -> str:
    """Output of ``nvidia-smi ARGS`` on this machine (``host`` None) or on ``host`` over ssh
    (``transport``: an ssh transport to use instead of one built from the settings)."""
    argv = [nvidia_smi, *args]
    if host is None:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        except FileNotFoundError:
            raise HostError(f"{nvidia_smi}: not found (run on the GPU host, or give --host)") from None
        except subprocess.TimeoutExpired:
            raise HostError(f"{' '.join(argv)}: no answer within 60 s") from None
    else:
        done = _ssh_run(host, argv, 60, transport)
    if done.returncode != 0:
        err = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        where = f" on {host}" if host else ""
        raise HostError(f"{' '.join(argv)}{where} failed (exit {done.returncode}): {err[-1] if err else ''}")
    return done.stdout.decode(errors="replace")


def _ssh_run(
    host: str, argv: Sequence[str], timeout_s: float, transport: Any = None
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` on ``host`` over the project's ssh transport, configured from the user's
    settings (one seam, so the transport can move modules without touching this one)."""
    from tuner.failures import LaunchFailure
    from tuner.launchers.ssh import SshTransport
    from tuner.settings import load as load_settings

    if transport is None:
        settings = load_settings()
        transport = SshTransport(
            host, user=settings.ssh_user, identity_file=settings.ssh_key, port=settings.ssh_port
        )
    try:
        return transport.run_argv(argv, timeout_s=timeout_s)
    except LaunchFailure as exc:
        raise HostError(exc.message) from exc
