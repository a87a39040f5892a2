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


def test_qualitative_rows_hold(results):
    failed = [(claim, fig) for claim, ok, fig in calibration.qualitative_checks(results) if not ok]
    assert not failed


def test_table_is_printed_by_the_command(capsys):
    from tuner.cli import main

    assert main(["calibration"]) == 0
    out = capsys.readouterr().out
    assert "TP8 + EP8" in out and "qualitative rows" in out and "OFF" not in out
