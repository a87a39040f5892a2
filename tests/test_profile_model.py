"""``tuner profile model``: the real config.json of seven model families read into profiles
whose parameter totals match the published counts, and weight formats read from
``quantization_config``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import profiles
from tuner.profiling.model_config import ConfigError, read_model

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"

#: Published total parameters (served model, without MTP layers), from the model cards:
#: DeepSeek-V3 "671B total parameters, 37B activated" (685B with the 14B MTP module);
#: Kimi K2 "1T total, 32B activated" (1.03T in the Hub's safetensors count);
#: Qwen3-235B-A22B "235B total, 22B activated"; Qwen3-32B "32.8B"; Llama-3.1-70B "70.6B";
#: GLM-4.5 "355B total, 32B active"; gpt-oss-120b "116.8B total, 5.1B active".
PUBLISHED = {
    "deepseek-v3": (671e9, 37e9),
    "kimi-k2-instruct": (1.03e12, 32e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    "qwen3-32b": (32.8e9, None),
    "llama-3.1-70b": (70.6e9, None),
    "glm-4.5": (355e9, 32e9),
    "gpt-oss-120b": (116.8e9, 5.1e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_totals_match_the_published_counts(name: str) -> None:
    total, active = PUBLISHED[name]
    p = read_model(CONFIGS / name).profile
    assert p.total_params == pytest.approx(total, rel=0.02)
    if active is not None:
        # Published active counts are rounded to two digits.
        assert p.active_params == pytest.approx(active, rel=0.05)


def test_weight_bytes_match_the_safetensors_index() -> None:
    reading = read_model(CONFIGS / "llama-3.1-70b")
    assert reading.index_bytes == 141_107_412_992
    assert abs(reading.index_error) < 0.03


@pytest.mark.parametrize(
    ("name", "kind", "fmt", "expert_bytes", "other_bytes"),
    [
        ("deepseek-v3", "mla", "fp8-block", 1.0 + 4 / 128**2, 1.0 + 4 / 128**2),
        ("kimi-k2.5", "mla", "int4-w4a16", 0.5 + 2 / 32, 2.0),
        ("gpt-oss-120b", "gqa", "mxfp4", 0.5 + 1 / 32, 2.0),
        ("qwen3-32b-fp8", "gqa", "fp8-block", 1.0 + 4 / 128**2, 1.0 + 4 / 128**2),
        ("llama-3.1-70b", "gqa", "bf16", 2.0, 2.0),
    ],
)
def test_attention_kind_and_weight_format(
    name: str, kind: str, fmt: str, expert_bytes: float, other_bytes: float
) -> None:
    p = read_model(CONFIGS / name).profile
    assert p.attention.kind == kind
    assert p.precision.weight_format == fmt
    assert p.precision.routed_expert_bytes_per_param == pytest.approx(expert_bytes)
    assert p.precision.other_bytes_per_param == pytest.approx(other_bytes)
    assert p.precision.embedding_bytes == 2.0  # quantization leaves embedding and head in BF16


def test_architecture_fields() -> None:
    ds = read_model(CONFIGS / "deepseek-v3").profile
    assert (ds.first_dense_layers, ds.moe.routed_experts, ds.moe.shared_experts) == (3, 256, 1)
    assert ds.mtp_layers == 1
    assert ds.kv_elements_per_gpu(8) == 512 + 64  # MLA latent, replicated on every TP rank
    qwen = read_model(CONFIGS / "qwen3-235b-a22b").profile
    assert (qwen.attention.kv_heads, qwen.moe.experts_per_token, qwen.moe.shared_experts) == (4, 8, 0)
    assert qwen.kv_elements_per_gpu(2) == 2 * 2 * 128
    assert qwen.kv_elements_per_gpu(8) == 2 * 1 * 128  # more ranks than KV heads: one replicated head
    llama = read_model(CONFIGS / "llama-3.1-70b").profile
    assert llama.moe is None and llama.first_dense_layers == llama.layers == 80
    oss = read_model(CONFIGS / "gpt-oss-120b").profile
    assert oss.attention.sliding_window_layers == 18 and oss.attention.qkv_bias
    k25 = read_model(CONFIGS / "kimi-k2.5").profile  # the language model nested in text_config
    assert k25.moe.routed_experts == 384 and k25.vocab_size == 163840


def test_written_profile_loads_and_drives_the_simulator(workdir: Path) -> None:
    out = workdir / "qwen3-32b.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "profile", "model", str(CONFIGS / "qwen3-32b"), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "32.8B parameters" in done.stderr
    loaded = profiles.model(str(out))
    assert loaded == read_model(CONFIGS / "qwen3-32b").profile
    sim = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "simulate",
            "--hardware",
            "h200-sxm-x8",
            "--model",
            str(out),
            "--levels",
            "1,32",
            "--max-tokens",
            "64",
            "--single-max-tokens",
            "32",
            "--json",
            "--",
            "--tp-size",
            "8",
        ],
        capture_output=True,
        text=True,
    )
    assert sim.returncode == 0, sim.stderr
    levels = json.loads(sim.stdout)["levels"]
    assert levels[-1]["output_tok_s"] > levels[0]["output_tok_s"] > 0


def _write(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def _qwen(**changes: object) -> dict:
    config = json.loads((CONFIGS / "qwen3-32b" / "config.json").read_text())
    config.update(changes)
    return {k: v for k, v in config.items() if v is not None}


@pytest.mark.parametrize(
    ("quant", "fmt", "bytes_per_param"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq", 0.5 + 2.5 / 128),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq", 0.5 + 2.5 / 128),
        ({"quant_method": "fp8", "activation_scheme": "static"}, "fp8-tensor", 1.0),
    ],
)
def test_quantized_dense_formats(tmp_path: Path, quant: dict, fmt: str, bytes_per_param: float) -> None:
    p = read_model(_write(tmp_path, _qwen(quantization_config=quant))).profile
    assert p.precision.weight_format == fmt
    assert p.precision.other_bytes_per_param == pytest.approx(bytes_per_param)


def test_missing_field_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num_attention_heads: missing"):
        read_model(_write(tmp_path, _qwen(num_attention_heads=None)))


def test_unknown_format_and_architecture_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="quant_method: 'bitsandbytes' is not a known weight format"):
        read_model(_write(tmp_path, _qwen(quantization_config={"quant_method": "bitsandbytes"})))
    with pytest.raises(ConfigError, match="layer type 'linear_attention' is not supported"):
        read_model(_write(tmp_path, _qwen(layer_types=["linear_attention", "full_attention"])))


def test_cli_error_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    folder = _write(tmp_path, _qwen(hidden_size=None))
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "profile", "model", str(folder)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert f"{folder / 'config.json'}: hidden_size: missing" in done.stderr
    assert done.stdout == ""
