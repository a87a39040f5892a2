"""``tuner profile host``: nvidia-smi outputs of several systems read into hardware profiles,
here and over a real sshd on loopback.

There is no GPU here: the fixtures are nvidia-smi's output in the exact layout it prints,
and a stand-in ``nvidia-smi`` script prints them where the command has to run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures_launchers import sshd  # noqa: F401 - fixture
from tuner import profiles
from tuner.profiling import host
from tuner.profiling.host import HostError, read_host

SMI = Path(__file__).parent / "fixtures" / "nvidia_smi"


def _read(name: str):
    return read_host((SMI / name / "query-gpu.csv").read_text(), (SMI / name / "topo-m.txt").read_text())


@pytest.mark.parametrize(
    ("name", "gpus", "memory_gib", "kind", "path", "bandwidth"),
    [
        ("8x-h100-sxm", 8, 79.65, "nvlink", "NVL", 3350),
        ("8x-h200-sxm", 8, 140.4, "nvlink", "NVL", 4800),
        ("8x-b200", 8, 179.06, "nvlink", "NVL", 8000),
        ("8x-rtx-pro-6000", 8, 95.59, "pcie", "SYS", 1792),
        ("4x-l40s", 4, 44.99, "pcie", "PHB", 864),
    ],
)
def test_profiles_from_nvidia_smi(
    name: str, gpus: int, memory_gib: float, kind: str, path: str, bandwidth: float
) -> None:
    p = _read(name).profile
    assert p.gpu_count == gpus
    assert p.gpu.memory_gib == pytest.approx(memory_gib, abs=0.01)
    assert p.interconnect.kind == kind
    assert p.interconnect.topology_path == path
    assert p.gpu.memory_bandwidth_gbs == bandwidth


def test_link_figures_follow_the_generation() -> None:
    h100, b200 = _read("8x-h100-sxm").profile, _read("8x-b200").profile
    assert b200.interconnect.busbw_max_gbs == 2 * h100.interconnect.busbw_max_gbs  # NVLink 5 vs 4
    rtx, l40s = _read("8x-rtx-pro-6000").profile, _read("4x-l40s").profile
    assert l40s.interconnect.busbw_max_gbs == rtx.interconnect.busbw_max_gbs / 2  # PCIe Gen4 vs Gen5
    # The reference host's measured figures for the same GPU and link.
    assert rtx.interconnect == profiles.hardware("rtx-pro-6000-pcie-x8").interconnect


def test_unknown_gpu_names_the_fields_to_fill_in() -> None:
    with pytest.raises(HostError, match="Tesla V100-SXM2-32GB") as exc:
        _read("4x-v100")
    assert "gpu.memory_bandwidth_gbs" in str(exc.value) and "interconnect" in str(exc.value)


def test_malformed_output_is_an_error() -> None:
    with pytest.raises(HostError, match="expected a CSV header"):
        read_host("GPU 0: NVIDIA H100", (SMI / "8x-h100-sxm" / "topo-m.txt").read_text())
    with pytest.raises(HostError, match="nvidia-smi lists 8 GPUs but topo -m shows 4"):
        read_host(
            (SMI / "8x-h100-sxm" / "query-gpu.csv").read_text(), (SMI / "4x-l40s" / "topo-m.txt").read_text()
        )


def _standin(tmp_path: Path, name: str) -> Path:
    """A stand-in ``nvidia-smi`` (no GPU here) that prints a fixture system's outputs."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = topo ]; then cat {SMI / name / "topo-m.txt"}; '
        f"else cat {SMI / name / 'query-gpu.csv'}; fi\n"
    )
    script.chmod(0o755)
    return script


def test_cli_runs_nvidia_smi_and_writes_a_loadable_profile(tmp_path: Path) -> None:
    out = tmp_path / "host.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "profile",
            "host",
            "--nvidia-smi",
            str(_standin(tmp_path, "4x-l40s")),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert profiles.hardware(str(out)) == _read("4x-l40s").profile
    assert "# Datasheet figures: NVIDIA L40S datasheet" in out.read_text()


def test_cli_unknown_gpu_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "profile",
            "host",
            "--query-file",
            str(SMI / "4x-v100" / "query-gpu.csv"),
            "--topo-file",
            str(SMI / "4x-v100" / "topo-m.txt"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "is not in the table of known GPUs" in done.stderr


def test_over_ssh(sshd, tmp_path: Path) -> None:  # noqa: F811 - fixture
    smi = str(_standin(tmp_path, "8x-h200-sxm"))
    transport = sshd.transport()
    query = host.run_nvidia_smi(host.QUERY_ARGS, host="localhost", nvidia_smi=smi, transport=transport)
    topo = host.run_nvidia_smi(host.TOPO_ARGS, host="localhost", nvidia_smi=smi, transport=transport)
    assert read_host(query, topo).profile == _read("8x-h200-sxm").profile
    with pytest.raises(HostError, match="exit 127"):
        host.run_nvidia_smi(
            host.QUERY_ARGS, host="localhost", nvidia_smi="/nonexistent/nvidia-smi", transport=transport
        )
