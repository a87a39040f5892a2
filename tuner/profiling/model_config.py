"""A model profile from a checkpoint's ``config.json`` (``tuner profile model``).

The Hugging Face ``config.json`` of a checkpoint names everything the simulator's memory
plan and decode model need: layers, widths, the attention kind (MHA, GQA with its KV
heads, MLA with its ranks), the experts, and the weight format in
``quantization_config``. Families spell the same quantity differently (``n_routed_experts``,
``num_experts``, ``num_local_experts``), so each quantity is looked up under its known
spellings, and a missing one is an error that names the field, never a guess.

Parameter counts follow from the shapes (the formulas live on
:class:`~tuner.profiles.ModelProfile`); weight bytes follow from the counts and the
format, and are checked against ``model.safetensors.index.json``'s ``metadata.total_size``
when the directory has one. Nothing is fetched: the model is on disk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner.errors import UsageError
from tuner.profiles import ModelProfile

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"

#: Relative gap between derived weight bytes and the index's total above which the profile
#: carries a warning (norms, routers, biases and quantization scales make up the rest).
INDEX_TOLERANCE = 0.03

#: Bytes of one element per ``torch_dtype``.
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "float8_e4m3fn": 1.0}

#: KV cache element size in the engines' default (the activation dtype, BF16).
KV_CACHE_BYTES = 2.0

#: Known ``quant_method`` values, for the error on any other.
QUANT_METHODS = ("fp8", "compressed-tensors", "awq", "gptq", "mxfp4")


class ConfigError(UsageError):
    """A config.json that cannot be read into a profile: the file and the field are named."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path = str(path)
        self.field = field
        super().__init__(f"{path}: {field}: {message}")


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How the checkpoint stores its weights, in bytes per parameter of each class."""

    name: str
    #: Routed-expert weights (all linear weights of a dense model use ``other``).
    expert_bytes: float
    #: Attention, dense MLP, shared experts.
    other_bytes: float
    #: Embedding and LM head (quantization leaves them in the activation dtype).
    embedding_bytes: float
    #: Tensor-core precision of the GEMMs (weight-only formats compute in BF16).
    compute: str
    note: str


@dataclass(frozen=True, slots=True)
class ModelReading:
    """A profile read from a checkpoint, with the figures behind it."""

    profile: ModelProfile
    config_path: Path
    weight_format: WeightFormat
    #: Derived bytes of the checkpoint (served weights plus MTP layers).
    checkpoint_bytes: float
    #: ``metadata.total_size`` of the safetensors index, when present.
    index_bytes: int | None
    #: Parameters of the MTP layers (in the checkpoint, not served).
    mtp_params: float

    @property
    def index_error(self) -> float | None:
        """Relative gap between derived and indexed checkpoint bytes (None without an index)."""
        if not self.index_bytes:
            return None
        return self.checkpoint_bytes / self.index_bytes - 1.0

    def yaml_text(self) -> str:
        """The profile as a commented YAML file (the format of ``tuner/data/models``)."""
        p, wf = self.profile, self.weight_format
        lines = [
            f"# {p.name}: model profile written by `tuner profile model` from {self.config_path.name}.",
            f"# Parameters derived from the shapes: {p.total_params / 1e9:.1f}B total, "
            f"{p.active_params / 1e9:.1f}B active per token"
            + (f" (+{self.mtp_params / 1e9:.1f}B in MTP layers, not served)." if self.mtp_params else "."),
            f"# Weight format: {wf.name} ({wf.note}).",
            f"# Checkpoint bytes derived: {self.checkpoint_bytes / 1e9:.1f} GB"
            + (
                f"; index total_size {self.index_bytes / 1e9:.1f} GB ({self.index_error:+.1%})."
                if self.index_bytes
                else " (no safetensors index beside the config to check against)."
            ),
        ]
        err = self.index_error
        if err is not None and abs(err) > INDEX_TOLERANCE:
            lines.append(
                f"# WARNING: derived bytes differ from the index by {err:+.1%}: check the weight "
                "format and expert counts below."
            )
        body = yaml.safe_dump(p.model_dump(exclude_defaults=False), sort_keys=False, default_flow_style=False)
        return "\n".join(lines) + "\n" + body


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "model"


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(path, what, f"cannot read: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(path, what, f"not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise ConfigError(path, what, "must be a JSON object")
    return data


class _Fields:
    """Look-ups in one config mapping that name the file and field when a value is missing."""

    def __init__(self, data: dict[str, Any], path: Path):
        self.data, self.path = data, path

    def first(self, *names: str) -> Any:
        for n in names:
            if self.data.get(n) is not None:
                return self.data[n]
        return None

    def int(self, *names: str, why: str, default: int | None = None) -> int:
        value = self.first(*names)
        if value is None:
            if default is not None:
                return default
            spelled = " or ".join(repr(n) for n in names)
            raise ConfigError(self.path, names[0], f"missing (needed for {why}; looked for {spelled})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(self.path, names[0], f"must be a non-negative integer, not {value!r}")
        return value


def _text_config(data: dict[str, Any]) -> dict[str, Any]:
    """Multimodal checkpoints (Kimi K2.5, Qwen-VL) nest the language model in ``text_config``;
    its quantization may sit at the top level."""
    inner = data.get("text_config")
    if isinstance(inner, dict) and "hidden_size" not in data:
        merged = dict(inner)
        for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
            if key not in merged and key in data:
                merged[key] = data[key]
        return merged
    return data


def _dtype_bytes(f: _Fields) -> float:
    dtype = f.first("torch_dtype", "dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f.path, "torch_dtype", f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def _group_bytes(bits: int, group: int | None, scale_bytes: float, zero: bool) -> float:
    """Bytes per parameter of ``bits``-bit weights with one scale (and zero point) per group."""
    per_group = scale_bytes + (bits / 8 if zero else 0.0)
    return bits / 8 + (per_group / group if group and group > 0 else 0.0)


def weight_format(f: _Fields, has_experts: bool) -> WeightFormat:
    """The checkpoint's weight format from ``quantization_config`` (or ``torch_dtype``)."""
    base = _dtype_bytes(f)
    qc = f.data.get("quantization_config")
    if not qc:
        name = {2.0: "bf16", 4.0: "fp32", 1.0: "fp8"}[base]
        return WeightFormat(name, base, base, base, "bf16", "unquantized")
    if not isinstance(qc, dict):
        raise ConfigError(f.path, "quantization_config", "must be a mapping")
    method = qc.get("quant_method")
    if method == "fp8":
        block = qc.get("weight_block_size")
        if block:
            # One FP32 scale per block (DeepSeek-V3's weight_scale_inv).
            b = 1.0 + 4.0 / (block[0] * block[1])
            return WeightFormat(
                "fp8-block", b, b, base, "fp8", f"FP8 e4m3, {block[0]}x{block[1]} block scales"
            )
        return WeightFormat("fp8-tensor", 1.0, 1.0, base, "fp8", "FP8 e4m3, per-tensor scales")
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict)), None)
        if not isinstance(weights, dict) or "num_bits" not in weights:
            raise ConfigError(
                f.path, "quantization_config.config_groups", "no group with weights.num_bits to read"
            )
        bits, kind = int(weights["num_bits"]), weights.get("type", "int")
        group = weights.get("group_size")
        ignore = " ".join(str(x) for x in qc.get("ignore") or [])
        experts_only = has_experts and "attn" in ignore
        q = _group_bytes(bits, group, 2.0, not weights.get("symmetric", True))
        acts = None
        for g in groups.values():
            if isinstance(g, dict) and g.get("input_activations"):
                acts = g["input_activations"]
        compute = "fp8" if kind == "float" and bits == 8 and acts else "bf16"
        name = f"{kind}{bits}-w{bits}a{8 if compute == 'fp8' else 16}"
        note = f"compressed-tensors {kind}{bits}" + (f", group {group}" if group else "")
        note += ", routed experts only" if experts_only else ""
        return WeightFormat(name, q, base if experts_only else q, base, compute, note)
    if method in ("awq", "gptq"):
        bits = int(qc.get("bits") or qc.get("w_bit") or 4)
        group = qc.get("group_size") or qc.get("q_group_size") or 128
        q = _group_bytes(bits, group, 2.0, True)
        return WeightFormat(method, q, q, base, "bf16", f"{method.upper()} int{bits}, group {group}")
    if method == "mxfp4":
        # OCP MX: 4-bit E2M1 elements with one shared 8-bit E8M0 scale per 32 (gpt-oss model card:
        # MoE weights in MXFP4, attention and the rest in BF16).
        q = 0.5 + 1.0 / 32
        skip = " ".join(str(x) for x in qc.get("modules_to_not_convert") or [])
        experts_only = has_experts and "attn" in skip
        return WeightFormat(
            "mxfp4",
            q,
            base if experts_only else q,
            base,
            "bf16",
            "MXFP4 (E2M1 + E8M0 scale per 32)" + (", experts only" if experts_only else ""),
        )
    raise ConfigError(
        f.path,
        "quantization_config.quant_method",
        f"{method!r} is not a known weight format; known: {', '.join(QUANT_METHODS)}",
    )


def _attention(f: _Fields, hidden: int) -> dict[str, Any]:
    heads = f.int("num_attention_heads", "n_heads", why="attention")
    if f.first("kv_lora_rank") is not None:
        return {
            "kind": "mla",
            "heads": heads,
            "q_lora_rank": f.int("q_lora_rank", why="MLA queries", default=0),
            "kv_lora_rank": f.int("kv_lora_rank", why="MLA"),
            "qk_nope_head_dim": f.int("qk_nope_head_dim", why="MLA keys"),
            "qk_rope_head_dim": f.int("qk_rope_head_dim", why="MLA rotary keys"),
            "v_head_dim": f.int("v_head_dim", why="MLA values"),
        }
    kv = f.int("num_key_value_heads", "num_kv_heads", why="the KV cache", default=heads)
    head_dim = f.first("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f.path, "head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads}"
            )
        head_dim = hidden // heads
    layer_types = f.data.get("layer_types") or []
    sliding = sum(1 for t in layer_types if t == "sliding_attention")
    bias = f.first("attention_bias")
    if bias is None:
        bias = f.data.get("model_type") in ("qwen2", "qwen2_moe")  # Qwen2 has q/k/v biases
    return {
        "kind": "mha" if kv == heads else "gqa",
        "heads": heads,
        "kv_heads": kv,
        "head_dim": int(head_dim),
        "qkv_bias": bool(bias),
        "sliding_window": f.first("sliding_window") if sliding else None,
        "sliding_window_layers": sliding,
    }


#: Fields whose presence means an architecture whose layers this profile cannot describe.
_UNSUPPORTED = {
    "linear_attention": "linear-attention (hybrid) layers",
    "mamba": "state-space (Mamba) layers",
    "ssm_state_size": "state-space (Mamba) layers",
}


def _check_supported(f: _Fields) -> None:
    for t in f.data.get("layer_types") or []:
        if t not in ("full_attention", "sliding_attention"):
            raise ConfigError(
                f.path, "layer_types", f"layer type {t!r} is not supported (full and sliding attention only)"
            )
    for key, what in _UNSUPPORTED.items():
        if key in f.data:
            raise ConfigError(f.path, key, f"{what} are not supported")
    freq = f.first("moe_layer_freq", "decoder_sparse_step")
    if isinstance(freq, int) and freq > 1:
        raise ConfigError(f.path, "moe_layer_freq", f"MoE every {freq} layers (interleaved) is not supported")


def read_config(
    data: dict[str, Any], path: Path, *, ident: str, name: str
) -> tuple[ModelProfile, WeightFormat]:
    """The profile described by one parsed ``config.json``."""
    f = _Fields(_text_config(data), path)
    _check_supported(f)
    hidden = f.int("hidden_size", "d_model", "dim", why="every weight shape")
    layers = f.int("num_hidden_layers", "n_layers", "num_layers", why="the layer count")
    vocab = f.int("vocab_size", why="the embedding and LM head")
    attention = _attention(f, hidden)
    experts = f.int("n_routed_experts", "num_experts", "num_local_experts", why="MoE", default=0)
    moe: dict[str, int] | None = None
    if experts:
        width = f.first("moe_intermediate_size")
        if width is None:
            width = f.int("intermediate_size", why="the expert width (moe_intermediate_size)")
        moe = {
            "routed_experts": experts,
            "shared_experts": f.int(
                "n_shared_experts", "num_shared_experts", why="shared experts", default=0
            ),
            "experts_per_token": f.int(
                "num_experts_per_tok", "experts_per_token", "moe_topk", why="experts per token"
            ),
            "expert_intermediate_size": int(width),
        }
        first_dense = f.int("first_k_dense_replace", why="dense leading layers", default=0)
        mlp_only = f.data.get("mlp_only_layers") or []
        if mlp_only and not first_dense:
            if list(mlp_only) != list(range(len(mlp_only))):
                raise ConfigError(path, "mlp_only_layers", "dense layers must lead (they are counted from 0)")
            first_dense = len(mlp_only)
        dense_width = f.int("intermediate_size", why="dense layers", default=int(width))
    else:
        first_dense = layers
        dense_width = f.int("intermediate_size", "ffn_dim", why="the MLP width")
    wf = weight_format(f, has_experts=bool(experts))
    data_out = {
        "id": ident,
        "name": name,
        "layers": layers,
        "first_dense_layers": first_dense,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "dense_intermediate_size": dense_width,
        "attention": attention,
        "moe": moe,
        "precision": {
            "routed_expert_bytes_per_param": wf.expert_bytes,
            "other_bytes_per_param": wf.other_bytes,
            "kv_cache_bytes_per_element": KV_CACHE_BYTES,
            "compute": wf.compute,
            "embedding_bytes_per_param": wf.embedding_bytes,
            "weight_format": wf.name,
        },
        "tied_embeddings": bool(f.first("tie_word_embeddings") or False),
        "mtp_layers": f.int("num_nextn_predict_layers", why="MTP layers", default=0),
    }
    try:
        return ModelProfile.model_validate(data_out), wf
    except ValidationError as exc:  # a value of the wrong kind that the look-ups let through
        raise ConfigError(path, "config", str(exc)) from exc


def checkpoint_bytes(p: ModelProfile) -> tuple[float, float]:
    """(bytes of the checkpoint's weights, parameters of its MTP layers) under the profile's
    format. An MTP layer is one more decoder layer plus its projection of two hidden states
    and its own copy of the embedding and head (DeepSeek-V3's checkpoint layout)."""
    pr = p.precision
    total = p.weight_bytes
    mtp_params = 0.0
    if p.mtp_layers:
        per_layer_routed = (p.moe.routed_experts if p.moe else 0) * p.expert_params
        shared = (p.moe.shared_experts if p.moe else 0) * p.expert_params
        dense = 0 if p.moe else 3 * p.hidden_size * p.dense_intermediate_size
        per_layer_other = p.attention_params_per_layer + shared + dense + 2 * p.hidden_size**2
        embed = 2 * p.vocab_size * p.hidden_size
        mtp_params = p.mtp_layers * (per_layer_routed + per_layer_other + embed)
        total += p.mtp_layers * (
            per_layer_routed * pr.routed_expert_bytes_per_param
            + per_layer_other * pr.other_bytes_per_param
            + embed * pr.embedding_bytes
        )
    return total, mtp_params


def read_model(path: str | Path, *, ident: str | None = None) -> ModelReading:
    """Read a model directory (or its ``config.json``) into a profile."""
    target = Path(path)
    config_path = target / CONFIG_NAME if target.is_dir() else target
    if not config_path.exists():
        raise ConfigError(target, CONFIG_NAME, "not found (give a model directory or its config.json)")
    data = _load_json(config_path, CONFIG_NAME)
    folder = config_path.parent
    name = folder.name if folder.name not in ("", ".") else config_path.stem
    profile, wf = read_config(data, config_path, ident=ident or _slug(name), name=name)
    index_bytes = None
    index_path = folder / INDEX_NAME
    if index_path.exists():
        meta = _load_json(index_path, INDEX_NAME).get("metadata") or {}
        total = meta.get("total_size")
        if not isinstance(total, int) or total <= 0:
            raise ConfigError(index_path, "metadata.total_size", f"must be a positive integer, not {total!r}")
        index_bytes = total
    total_bytes, mtp = checkpoint_bytes(profile)
    return ModelReading(profile, config_path, wf, total_bytes, index_bytes, mtp)
