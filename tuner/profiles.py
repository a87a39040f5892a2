"""Hardware and model profiles: typed views of the data files in ``tuner/data``.

Profiles are data, not code, so a new host or model is a YAML file. Every number in
them carries its source in a comment beside it.
"""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: NCCL's protocols (NCCL_PROTO values), as the hardware profile's latency table names them.
NcclProtocol = Literal["LL", "LL128", "Simple"]


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
    latency_us: dict[NcclProtocol, float]
    default_small_protocol: NcclProtocol
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
    """Multi-head latent attention (DeepSeek-V2/V3 family): a compressed KV latent per token."""

    kind: Literal["mla"]
    heads: int
    #: 0 when queries are projected directly (no low-rank query path, as in DeepSeek-V2-Lite).
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def params(self, hidden: int) -> int:
        """Projection parameters of one layer (q, kv latent, out)."""
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk
        else:
            q = hidden * self.heads * qk
        kv = hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.heads * (
            self.qk_nope_head_dim + self.v_head_dim
        )
        return q + kv + self.heads * self.v_head_dim * hidden

    def kv_elements(self, attn_tp: int) -> int:
        """Cached elements per token and layer on one GPU: the latent plus the rope key,
        replicated on every attention-TP rank."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class GroupedAttention(_Strict):
    """Multi-head (``mha``: one KV head per query head) or grouped-query attention (``gqa``)."""

    kind: Literal["gqa", "mha"]
    heads: int
    kv_heads: int
    head_dim: int
    #: Biases on the q/k/v projections (Qwen2, GLM-4.5, gpt-oss).
    qkv_bias: bool = False
    #: Tokens a sliding-window layer attends to, and how many layers use it (gpt-oss: every
    #: other layer). Informational: the KV pool is sized for full attention, as SGLang's is
    #: unless its hybrid SWA pool is enabled.
    sliding_window: int | None = None
    sliding_window_layers: int = 0

    def params(self, hidden: int) -> int:
        q = hidden * self.heads * self.head_dim
        kv = 2 * hidden * self.kv_heads * self.head_dim
        out = self.heads * self.head_dim * hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + out + bias

    def kv_elements(self, attn_tp: int) -> int:
        """K and V of this GPU's share of the KV heads; with more ranks than KV heads each
        rank keeps one (replicated) head, as SGLang and vLLM do."""
        return 2 * max(1, math.ceil(self.kv_heads / attn_tp)) * self.head_dim


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
    #: Bytes per parameter of the embedding and LM head when they differ from the other
    #: weights (FP8 checkpoints keep them BF16); ``None``: the same as ``other``.
    embedding_bytes_per_param: float | None = None
    #: The checkpoint's weight format as ``tuner profile model`` read it (bf16, fp8-block,
    #: fp8-tensor, int4-w4a16, awq, gptq, mxfp4); informational.
    weight_format: str | None = None

    @property
    def embedding_bytes(self) -> float:
        """Bytes per parameter of the embedding and LM head."""
        if self.embedding_bytes_per_param is None:
            return self.other_bytes_per_param
        return self.embedding_bytes_per_param


class ModelProfile(_Strict):
    id: str
    name: str
    layers: int
    first_dense_layers: int
    hidden_size: int
    vocab_size: int
    #: FFN width of the dense layers (all layers of a dense model, the leading ones of a MoE).
    dense_intermediate_size: int
    attention: Attention | GroupedAttention = Field(discriminator="kind")
    #: ``None`` for a dense model (then ``first_dense_layers == layers``).
    moe: MoE | None = None
    precision: Precision
    #: The LM head shares the embedding matrix (small models).
    tied_embeddings: bool = False
    #: Multi-token-prediction layers shipped in the checkpoint but not loaded for plain
    #: decoding (DeepSeek-V3, GLM-4.5: one each); they count in the checkpoint's bytes only.
    mtp_layers: int = 0

    @model_validator(mode="after")
    def _dense_without_experts(self) -> ModelProfile:
        if self.moe is None and self.first_dense_layers != self.layers:
            raise ValueError(
                "a model without moe has only dense layers: first_dense_layers must equal layers"
            )
        if not 0 <= self.first_dense_layers <= self.layers:
            raise ValueError("first_dense_layers must be between 0 and layers")
        return self

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers

    @property
    def expert_params(self) -> int:
        """Parameters of one expert FFN (gate, up and down projections); 0 without experts."""
        return 3 * self.hidden_size * self.moe.expert_intermediate_size if self.moe else 0

    @property
    def attention_params_per_layer(self) -> int:
        return self.attention.params(self.hidden_size)

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token and layer on one GPU without attention TP (MLA: the
        latent plus the rope key; GQA/MHA: K and V of every KV head)."""
        return self.attention.kv_elements(1)

    def kv_elements_per_gpu(self, attn_tp: int) -> int:
        """Cached elements per token and layer on one GPU of an attention-TP group of
        ``attn_tp`` ranks (MLA replicates the latent; GQA/MHA shard the KV heads)."""
        return self.attention.kv_elements(attn_tp)

    @property
    def embedding_params(self) -> int:
        return (1 if self.tied_embeddings else 2) * self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> float:
        """Parameters served (without MTP layers), norms and routers aside (<0.05%)."""
        dense = self.first_dense_layers * 3 * self.hidden_size * self.dense_intermediate_size
        routed = self.moe_layers * (self.moe.routed_experts if self.moe else 0) * self.expert_params
        shared = self.moe_layers * (self.moe.shared_experts if self.moe else 0) * self.expert_params
        attn = self.layers * self.attention_params_per_layer
        return dense + routed + shared + attn + self.embedding_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of the served weights under the profile's precision (MTP layers aside)."""
        pr = self.precision
        routed = self.moe_layers * (self.moe.routed_experts if self.moe else 0) * self.expert_params
        rest = self.total_params - routed - self.embedding_params
        return (
            routed * pr.routed_expert_bytes_per_param
            + rest * pr.other_bytes_per_param
            + self.embedding_params * pr.embedding_bytes
        )

    @property
    def active_params(self) -> float:
        dense = self.first_dense_layers * 3 * self.hidden_size * self.dense_intermediate_size
        routed = self.moe_layers * (self.moe.experts_per_token if self.moe else 0) * self.expert_params
        shared = self.moe_layers * (self.moe.shared_experts if self.moe else 0) * self.expert_params
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
