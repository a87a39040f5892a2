"""Hardware and model profiles: typed views of the data files in ``tuner/data``.

Profiles are data, not code, so a new host or model is a YAML file. Every number in
them carries its source in a comment beside it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GPU(_Strict):
    name: str
    memory_gib: float
    memory_bandwidth_gbs: float
    dense_tflops: dict[str, float]
    runtime_reserved_gib: float


class Interconnect(_Strict):
    kind: Literal["pcie", "nvlink"]
    busbw_per_channel_gbs: float
    busbw_max_gbs: float
    default_channels: int
    latency_us: dict[Literal["LL", "LL128", "Simple"], float]
    default_small_protocol: Literal["LL", "LL128", "Simple"]
    ll128_enabled_by_default: bool
    p2p_gbs: float
    no_p2p_bandwidth_factor: float
    no_p2p_extra_latency_us: float
    topology_path: Literal["NVL", "PIX", "PXB", "PHB", "SYS"]
    deepep_penalty: float


class KernelPath(_Strict):
    """Step costs of one kernel path on one GPU: a routed-expert weight format (``int4``,
    ``fp8``, ``bf16``) run with one attention backend. Fitted figures; sources in the file."""

    #: Kernel-boundary time per layer of a decode step replayed from a CUDA graph.
    graph_overhead_us_per_layer: float
    #: Serial decode-attention time per cached token per layer of one sequence: what one
    #: sequence's attention costs when the kernel cannot spread it over the whole GPU
    #: (small batches, long context). Large batches are bound by KV bandwidth instead.
    attention_ns_per_token_per_layer: float = 0.0


class HardwareProfile(_Strict):
    id: str
    name: str
    gpu_count: int
    gpu: GPU
    interconnect: Interconnect
    #: SGLang's default attention backend for MLA models on this GPU.
    attention_backend: str = "default"
    #: Step costs per kernel path, keyed ``<weight format>/<attention backend>``.
    kernel_paths: dict[str, KernelPath] = {}


class Attention(_Strict):
    kind: Literal["mla"]
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class MoE(_Strict):
    routed_experts: int
    shared_experts: int
    experts_per_token: int
    expert_intermediate_size: int


class Precision(_Strict):
    routed_expert_bytes_per_param: float
    other_bytes_per_param: float
    kv_cache_bytes_per_element: float
    compute: str


class ModelProfile(_Strict):
    id: str
    name: str
    layers: int
    first_dense_layers: int
    hidden_size: int
    vocab_size: int
    dense_intermediate_size: int
    attention: Attention
    moe: MoE
    precision: Precision

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers

    @property
    def expert_params(self) -> int:
        """Parameters of one expert FFN (gate, up and down projections)."""
        return 3 * self.hidden_size * self.moe.expert_intermediate_size

    @property
    def attention_params_per_layer(self) -> int:
        a, h = self.attention, self.hidden_size
        q = h * a.q_lora_rank + a.q_lora_rank * a.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * a.heads * (
            a.qk_nope_head_dim + a.v_head_dim
        )
        out = a.heads * a.v_head_dim * h
        return q + kv + out

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """MLA caches the compressed latent plus the rope key: kv_lora_rank + rope dim."""
        return self.attention.kv_lora_rank + self.attention.qk_rope_head_dim

    @property
    def total_params(self) -> float:
        dense = self.first_dense_layers * 3 * self.hidden_size * self.dense_intermediate_size
        routed = self.moe_layers * self.moe.routed_experts * self.expert_params
        shared = self.moe_layers * self.moe.shared_experts * self.expert_params
        attn = self.layers * self.attention_params_per_layer
        return dense + routed + shared + attn + 2 * self.vocab_size * self.hidden_size

    @property
    def active_params(self) -> float:
        dense = self.first_dense_layers * 3 * self.hidden_size * self.dense_intermediate_size
        routed = self.moe_layers * self.moe.experts_per_token * self.expert_params
        shared = self.moe_layers * self.moe.shared_experts * self.expert_params
        attn = self.layers * self.attention_params_per_layer
        return dense + routed + shared + attn + self.vocab_size * self.hidden_size


class ProfileError(ValueError):
    """A profile id that does not exist, or a profile file that does not validate."""


def _data_dir(kind: str) -> Path:
    return Path(str(resources.files("tuner") / "data" / kind))


def available(kind: Literal["hardware", "models"]) -> list[str]:
    return sorted(p.stem for p in _data_dir(kind).glob("*.yaml"))


def _load(kind: Literal["hardware", "models"], ident: str) -> dict:
    path = Path(ident)
    if not (path.suffix in {".yaml", ".yml"} and path.exists()):
        path = _data_dir(kind) / f"{ident}.yaml"
    if not path.exists():
        raise ProfileError(f"unknown {kind} profile {ident!r}; known: {', '.join(available(kind))}")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a mapping")
    return data


@cache
def hardware(ident: str) -> HardwareProfile:
    """Load a hardware profile by id (or a path to a YAML file)."""
    try:
        return HardwareProfile.model_validate(_load("hardware", ident))
    except ValidationError as exc:
        raise ProfileError(f"hardware profile {ident!r}: {exc}") from exc


@cache
def model(ident: str) -> ModelProfile:
    """Load a model profile by id (or a path to a YAML file)."""
    try:
        return ModelProfile.model_validate(_load("models", ident))
    except ValidationError as exc:
        raise ProfileError(f"model profile {ident!r}: {exc}") from exc
