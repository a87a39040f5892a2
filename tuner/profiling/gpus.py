"""Datasheet figures of the GPUs ``tuner profile host`` recognises, and of their links.

``nvidia-smi`` tells the GPU's name, its memory and how the GPUs connect; it does not tell
the memory bandwidth, the tensor-core rates or what the link achieves under NCCL. Those
come from this table, each figure with its source. A GPU missing here is an error that
lists the fields to fill in (:func:`unknown_gpu_message`), never a guess.

Link figures: NVLink hosts take the measured NCCL figures of the H100/H200 profiles
(``tuner/data/hardware``), scaled by the NVLink generation's per-GPU bandwidth; PCIe hosts
take the reference host's measured PCIe Gen5 figures, halved for Gen4 (half the lane rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner import profiles


@dataclass(frozen=True, slots=True)
class KnownGPU:
    """One GPU model: what the datasheet says and where it says it."""

    key: str
    #: Substrings of ``nvidia-smi --query-gpu=name`` that identify the model (lower case).
    match: tuple[str, ...]
    name: str
    memory_bandwidth_gbs: float
    #: Dense (not sparse) tensor TFLOP/s. GPUs without FP8 tensor cores list their BF16 rate
    #: for fp8: FP8 checkpoints then run as weight-only FP8 at the BF16 rate.
    bf16_tflops: float
    fp8_tflops: float
    #: NVLink generation of the SXM/HGX part (None: PCIe only).
    nvlink: int | None
    pcie_gen: int
    source: str


#: Known GPUs, most specific match first (``H100 NVL`` before ``H100``).
GPUS: tuple[KnownGPU, ...] = (
    KnownGPU(
        "b200",
        ("b200",),
        "B200",
        8000,
        2250,
        4500,
        5,
        6,
        "NVIDIA DGX B200 / HGX B200 datasheet: 8 TB/s HBM3e, 2.25 PF dense BF16, 4.5 PF dense FP8, NVLink 5",
    ),
    KnownGPU(
        "h200",
        ("h200",),
        "H200 SXM",
        4800,
        989,
        1979,
        4,
        5,
        "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s, 989 TF dense BF16, 1,979 TF dense FP8, NVLink 4",
    ),
    KnownGPU(
        "h100-pcie",
        ("h100 pcie",),
        "H100 PCIe",
        2000,
        756,
        1513,
        None,
        5,
        "NVIDIA H100 datasheet (PCIe): 80 GB HBM2e at 2.0 TB/s, 756 TF dense BF16, 1,513 TF dense FP8",
    ),
    KnownGPU(
        "h100",
        ("h100 80gb hbm3", "h100 sxm", "h100"),
        "H100 SXM",
        3350,
        989,
        1979,
        4,
        5,
        "NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 989 TF dense BF16, 1,979 TF dense FP8, NVLink 4",
    ),
    KnownGPU(
        "rtx-pro-6000",
        ("rtx pro 6000",),
        "RTX PRO 6000 Blackwell",
        1792,
        500,
        1000,
        None,
        5,
        "NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7 at 1,792 GB/s, ~1 PF dense FP8, PCIe Gen5 x16",
    ),
    KnownGPU(
        "l40s",
        ("l40s",),
        "L40S",
        864,
        362,
        733,
        None,
        4,
        "NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s, 362 TF BF16 and 733 TF FP8 dense, PCIe Gen4 x16",
    ),
    KnownGPU(
        "a100",
        ("a100",),
        "A100 SXM",
        2039,
        312,
        312,
        3,
        4,
        "NVIDIA A100 datasheet (80 GB SXM): 2,039 GB/s HBM2e, 312 TF dense BF16, no FP8, NVLink 3",
    ),
)

#: Per-GPU NVLink bandwidth (both directions, GB/s) by generation: NVLink 3 600, 4 900, 5 1,800
#: (NVIDIA NVLink product page).
NVLINK_GBS = {3: 600.0, 4: 900.0, 5: 1800.0}

#: The measured hosts whose interconnect figures stand for their kind of fabric: an 8-GPU
#: NVSwitch host with NVLink 4 (nccl-tests all-reduce bus bandwidth ~360-480 GB/s, small
#: all-reduce ~8-12 us) and a PCIe Gen5 x16 host (the reference host's measurements). Read
#: from their profiles, so a refit of either carries over to every profiled host.
NVLINK4_HOST = "h100-sxm-x8"
PCIE5_HOST = "rtx-pro-6000-pcie-x8"


def _measured_link(host: str) -> dict[str, Any]:
    return profiles.hardware(host).interconnect.model_dump()


def interconnect(gpu: KnownGPU, nvlink: bool, topology_path: str) -> dict[str, Any]:
    """Interconnect figures of a host of ``gpu`` with the measured path type."""
    if nvlink and gpu.nvlink:
        scale = NVLINK_GBS[gpu.nvlink] / NVLINK_GBS[4]
        link = _measured_link(NVLINK4_HOST)
        for key in ("busbw_per_channel_gbs", "busbw_max_gbs", "p2p_gbs"):
            link[key] = round(link[key] * scale, 1)
        return link
    link = {**_measured_link(PCIE5_HOST), "topology_path": topology_path}
    if gpu.pcie_gen < 5:
        scale = 0.5 ** (5 - gpu.pcie_gen)
        for key in ("busbw_per_channel_gbs", "busbw_max_gbs", "p2p_gbs"):
            link[key] = round(link[key] * scale, 2)
    return link


def lookup(name: str) -> KnownGPU | None:
    """The table entry whose pattern occurs in ``name`` (nvidia-smi's GPU name), if any."""
    low = name.lower()
    for gpu in GPUS:
        if any(m in low for m in gpu.match):
            return gpu
    return None


def unknown_gpu_message(name: str) -> str:
    return (
        f"GPU {name!r} is not in the table of known GPUs "
        f"({', '.join(g.name for g in GPUS)}). Write the hardware profile by hand from its "
        "datasheet: gpu.memory_bandwidth_gbs, gpu.dense_tflops.bf16, gpu.dense_tflops.fp8 and the "
        "interconnect fields (kind, busbw_per_channel_gbs, busbw_max_gbs, latency_us, p2p_gbs, "
        "topology_path); start from a file in tuner/data/hardware with the same kind of link"
    )
