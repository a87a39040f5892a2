"""Workloads: trace files (their errors name file and line), length distributions, and the
per-level plan every backend sends."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tuner.trace import TraceError, load_trace
from tuner.workload import LengthDistribution, Workload

SAMPLE = Path(__file__).resolve().parent.parent / "search_spaces" / "traces" / "chat-sample.jsonl"


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sample_trace_loads_in_arrival_order():
    trace = load_trace(SAMPLE)
    assert len(trace.requests) >= 100 and trace.timed
    assert np.all(np.diff(trace.arrivals) >= 0)
    assert trace.prompt_tokens.min() >= 1 and trace.output_tokens.min() >= 1


@pytest.mark.parametrize(
    ("lines", "line", "words"),
    [
        (['{"prompt_tokens": 10, "output_tokens": 5}', "{not json"], 2, "not valid JSON"),
        (['{"prompt_tokens": 10}'], 1, "output_tokens is missing"),
        (['{"output_tokens": 10}'], 1, "needs prompt_tokens or prompt"),
        (['{"prompt_tokens": -3, "output_tokens": 5}'], 1, "between 1 and"),
        (['{"prompt_tokens": 2.5, "output_tokens": 5}'], 1, "whole number"),
        (["# header", "", '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": -1}'], 3, "must be >= 0"),
        (["[1, 2]"], 1, "must be a JSON object"),
        (['{"prompt_tokens": 1, "output_tokens": 1, "input_len": 3}'], 1, "unknown field(s) input_len"),
    ],
)
def test_bad_trace_lines_name_file_and_line(tmp_path, lines, line, words):
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert f"{path}:{line}:" in str(err.value)
    assert words in str(err.value)


def test_trace_file_level_errors(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        load_trace(tmp_path / "missing.jsonl")
    with pytest.raises(TraceError, match="no requests"):
        load_trace(write(tmp_path, ["# only a comment"]))
    mixed = [
        '{"prompt_tokens": 1, "output_tokens": 1, "arrival_s": 0}',
        '{"prompt_tokens": 1, "output_tokens": 1}',
    ]
    with pytest.raises(TraceError, match="for all or none"):
        load_trace(write(tmp_path, mixed))


def test_prompt_text_counts_tokens_and_is_kept(tmp_path):
    row = {"prompt": "x" * 400, "output_tokens": 7}
    trace = load_trace(write(tmp_path, [json.dumps(row)]))
    assert trace.requests[0].prompt_tokens == 100
    assert trace.requests[0].prompt == "x" * 400


def test_open_trace_plan_replays_timestamps_scaled_and_faster_per_level(tmp_path):
    rows = [
        {"prompt_tokens": 10 * (i + 1), "output_tokens": 5 + i, "arrival_s": 2.0 * i + 1} for i in range(4)
    ]
    path = write(tmp_path, [json.dumps(r) for r in rows])
    wl = Workload(kind="trace", trace=str(path), trace_mode="open", time_scale=0.5, levels=(1, 2))
    plan = wl.plan(1, np.random.default_rng(0))
    assert plan.mode == "open"
    assert plan.arrivals.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert wl.plan(2, np.random.default_rng(0)).arrivals.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert plan.output_tokens.tolist() == [5, 6, 7, 8] and plan.ignore_eos
    assert plan.prompt_tokens.tolist() == [10, 20, 30, 40]


def test_trace_workload_resolves_relative_to_the_space_and_fails_early(tmp_path):
    write(tmp_path, ['{"prompt_tokens": 3, "output_tokens": 4}'])
    wl = Workload(kind="trace", trace="trace.jsonl").resolved(tmp_path)
    assert Path(wl.trace).is_absolute()
    assert wl.plan(8, np.random.default_rng(0)).mode == "closed-loop"
    with pytest.raises(TraceError, match="not found"):
        Workload(kind="trace", trace="other.jsonl").resolved(tmp_path)
    with pytest.raises(ValueError, match="kind trace needs trace"):
        Workload(kind="trace")


def test_length_distributions_sample_within_bounds_and_fix_replies():
    rng = np.random.default_rng(1)
    dist = LengthDistribution(kind="lognormal", median=500, sigma=1.0, low=10, high=4000)
    draws = dist.sample(rng, 5000)
    assert draws.min() >= 10 and draws.max() <= 4000
    assert 400 < np.median(draws) < 600
    hist = LengthDistribution(kind="histogram", bins=((100, 1.0), (1000, 3.0)))
    assert hist.mean() == pytest.approx(775.0)
    wl = Workload(lengths={"output": {"kind": "uniform", "low": 50, "high": 60}})
    plan = wl.plan(16, rng)
    assert plan.ignore_eos and ((plan.output_tokens >= 50) & (plan.output_tokens <= 60)).all()
    assert (plan.max_tokens == plan.output_tokens).all()
    with pytest.raises(ValueError, match="needs median"):
        LengthDistribution(kind="lognormal")
