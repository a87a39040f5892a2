"""The simulator reproduces the reference host's measured table (DESIGN calibration targets)."""

from __future__ import annotations

import pytest

from tuner.sim import calibration


@pytest.fixture(scope="module")
def results():
    return calibration.run()


def test_numeric_cells_within_ten_percent(results):
    for r in results:
        if r.row.single is not None:
            assert r.single == pytest.approx(r.row.single, rel=0.10), r.row.name
        if r.row.peak is not None:
            assert r.peak == pytest.approx(r.row.peak, rel=0.10), r.row.name


def test_every_seed_cell_within_seven_percent_under_the_seeds_nccl_settings(results):
    by = {r.row.name: r for r in results}
    # The seeds ran TP8 with their NCCL tuning and the expert-parallel rows at NCCL defaults.
    assert by["TP8 (NCCL tuned)"].row.nccl == calibration.REFERENCE_NCCL
    assert by["TP8 + EP8"].row.nccl == {} and by["TP8 + EP4"].row.nccl == {}
    for name in ("TP8 (NCCL tuned)", "TP8 + EP8", "TP8 + EP4"):
        r = by[name]
        assert r.single == pytest.approx(r.row.single, rel=0.07), name
        assert r.peak == pytest.approx(r.row.peak, rel=0.07), name


def test_qualitative_rows_hold(results):
    failed = [(claim, fig) for claim, ok, fig in calibration.qualitative_checks(results) if not ok]
    assert not failed


@pytest.fixture(scope="module")
def public():
    return calibration.run_public()


def test_public_points_within_their_limits(public):
    s = calibration.public_summary(public)
    assert s["tpot_mae"] <= 0.12
    assert s["ttft_mae"] <= 0.30
    assert s["worst_ratio"] <= 2.0
    # Both metrics are checked on points of more than one host, model and load.
    assert {r.point.hardware for r in public} >= {"h200-sxm-x8", "b200-x8"}
    assert sum(1 for r in public if r.point.ttft_ms) >= 8
    assert any(r.point.concurrency >= 64 for r in public)


def test_ttft_rises_with_load_as_measured(public):
    by = {r.point.id: r for r in public}
    c1, c16, c100 = (by[f"deepseek-r1 b200 1k/1k C={c}"] for c in (1, 16, 100))
    assert c1.ttft_ms < c16.ttft_ms < c100.ttft_ms


def test_table_is_printed_by_the_command(capsys):
    from tuner.cli import main

    assert main(["calibration"]) == 0
    out = capsys.readouterr().out
    assert "TP8 + EP8" in out and "qualitative rows" in out and "OFF" not in out
    assert "Public points" in out and "deepseek-r1 b200 1k/1k C=100" in out and "defaults" in out
