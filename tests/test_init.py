"""``tuner init`` for every fixture model on four hosts: the space loads, every start point
launches on the simulator (or the model is reported as not fitting, with the numbers), and
``tuner search`` takes the file as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner import profiles
from tuner.cli import main
from tuner.engines import sglang
from tuner.failures import LaunchFailure
from tuner.sim.model import PerfModel
from tuner.space import load_space

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = (
    "deepseek-v3",
    "kimi-k2-instruct",
    "qwen3-235b-a22b",
    "qwen3-32b",
    "llama-3.1-70b",
    "glm-4.5",
    "gpt-oss-120b",
)
HOSTS = ("8x-h100-sxm", "8x-h200-sxm", "8x-rtx-pro-6000", "4x-l40s")
#: What is known about these pairs: the weights alone exceed the GPUs' memory (FP8 DeepSeek-V3
#: ~673 GB and BF16 GLM-4.5 ~705 GB on 8x 80 GB; FP8 Kimi K2 ~1 TB on 8x 96 GB; ...).
DOES_NOT_FIT = {
    ("deepseek-v3", "8x-h100-sxm"),
    ("deepseek-v3", "4x-l40s"),
    ("kimi-k2-instruct", "8x-h100-sxm"),
    ("kimi-k2-instruct", "8x-rtx-pro-6000"),
    ("kimi-k2-instruct", "4x-l40s"),
    ("qwen3-235b-a22b", "4x-l40s"),
    ("glm-4.5", "8x-h100-sxm"),
    ("glm-4.5", "4x-l40s"),
}


@pytest.fixture(scope="module")
def host_profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("hosts")
    paths = {}
    for name in HOSTS:
        paths[name] = out / f"{name}.yaml"
        d = FIXTURES / "nvidia_smi" / name
        assert (
            main(
                [
                    "profile",
                    "host",
                    "--query-file",
                    str(d / "query-gpu.csv"),
                    "--topo-file",
                    str(d / "topo-m.txt"),
                    "-o",
                    str(paths[name]),
                ]
            )
            == 0
        )
    return paths


@pytest.mark.parametrize("hw", HOSTS)
@pytest.mark.parametrize("model", MODELS)
def test_init_matrix(model: str, hw: str, host_profiles: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "space.yaml"
    code = main(
        [
            "init",
            "--model",
            str(FIXTURES / "model_configs" / model),
            "--host",
            str(host_profiles[hw]),
            "--predictions",
            "0",
            "-o",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    if (model, hw) in DOES_NOT_FIT:
        assert code == 2
        assert "does not fit" in err and "GiB" in err and "GB of weights" in err
        assert not list(tmp_path.iterdir())  # neither the space nor the model profile
        return
    assert code == 0, err
    space = load_space(out)
    starts = space.start_points()
    assert starts
    for point in starts:
        assert space.check(point) == []
        spec = space.render(point)
        try:
            PerfModel(space.hardware_profile, space.model_profile, sglang.parse_args(spec.argv), spec.env)
        except LaunchFailure as exc:  # pragma: no cover - the assertion message
            pytest.fail(f"start point {point} does not launch: {exc}")
    doc = yaml.safe_load(out.read_text())
    has_experts = space.model_profile.moe is not None
    assert ("ep_size" in doc["parameters"]) == has_experts
    nvlink = space.hardware_profile.interconnect.kind == "nvlink"
    assert ("nccl_algo" in doc["parameters"]) == nvlink
    assert ("nccl_nthreads" in doc["parameters"]) == (not nvlink)
    # DP attention is a candidate for MLA models only (kept where its replicated attention fits).
    if space.model_profile.attention.kind != "mla":
        assert not any("_dpattn" in name for name in doc["parameters"]["layout"]["choices"])
    elif hw == "8x-h200-sxm":
        assert "tp8_dpattn8" in doc["parameters"]["layout"]["choices"]


@pytest.mark.parametrize(
    ("model", "hw"),
    [("qwen3-235b-a22b", "8x-h100-sxm"), ("llama-3.1-70b", "4x-l40s"), ("deepseek-v3", "8x-rtx-pro-6000")],
)
def test_search_takes_the_space_as_written(
    model: str, hw: str, host_profiles: dict[str, Path], workdir: Path
) -> None:
    assert (
        main(
            [
                "init",
                "--model",
                str(FIXTURES / "model_configs" / model),
                "--host",
                str(host_profiles[hw]),
                "--predictions",
                "30",
                "-o",
                "space.yaml",
            ]
        )
        == 0
    )
    space = load_space(workdir / "space.yaml")
    assert len(space.spec.start) > 1  # engine defaults, then the simulator's predictions
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "search", "--space", "space.yaml", "--budget", "20", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "20 trials" in done.stdout and "best: trial #" in done.stdout


def test_vllm_space_loads(host_profiles: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "vllm.yaml"
    assert (
        main(
            [
                "init",
                "--engine",
                "vllm",
                "--model",
                str(FIXTURES / "model_configs" / "gpt-oss-120b"),
                "--host",
                str(host_profiles["8x-h200-sxm"]),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    space = load_space(out)
    assert space.spec.engine == "vllm"
    assert "tp8_ep" in space.parameters["layout"].bundles
    for point in space.start_points():
        assert space.check(point) == []


def test_packaged_profiles_and_profile_files(tmp_path: Path) -> None:
    out = tmp_path / "space.yaml"
    assert (
        main(
            ["init", "--model", "deepseek-v3", "--host", "h200-sxm-x8", "--predictions", "0", "-o", str(out)]
        )
        == 0
    )
    space = load_space(out)
    assert space.model_profile == profiles.model("deepseek-v3")
    assert space.hardware == "h200-sxm-x8"


def test_unknown_profile_exits_2(capsys) -> None:
    assert main(["init", "--model", "no-such-model", "--host", "h200-sxm-x8"]) == 2
    assert "unknown models profile 'no-such-model'" in capsys.readouterr().err
