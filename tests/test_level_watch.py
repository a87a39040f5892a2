"""Stopping a hopeless burst level before it drains: the projection on simulated levels,
the load generator against the emulator over real HTTP, and a study that prunes with it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.test_study import enqueue, make_search, records
from tuner import level_watch
from tuner.level_watch import LevelBar
from tuner.loadgen import run_level, run_sweep
from tuner.measurers import SimMeasurer
from tuner.metrics import summarize
from tuner.objectives import Objective
from tuner.pruning import FIRST_LEVEL_RATIO
from tuner.request_records import CUT_AT_WINDOW_END
from tuner.sim.model import PerfModel
from tuner.sim.server import EmulatorProcess
from tuner.sim.serving import ServingSimulator
from tuner.workload import Workload

#: The reference campaign's heaviest level: C=256, replies up to 2048 tokens.
HEAVY = Workload(kind="burst", levels=(256,), max_tokens=2048)
#: The reference space's best configuration (benchmarks/results/suite_best/).
BEST = [
    "--tp-size", "8", "--ep-size", "8", "--cuda-graph-max-bs-decode", "256", "--max-running-requests", "256",
    "--num-continuous-decode-steps", "8", "--mem-fraction-static", "0.94",
]  # fmt: skip
CHANNELS = {"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "16"}


def level(argv: list[str], *, launch: int = 1, noise: float = 0.02, workload: Workload = HEAVY):
    model = PerfModel.build("rtx-pro-6000-pcie-x8", "kimi-k2.6", argv, CHANNELS)
    sim = ServingSimulator(model, seed=launch, noise=noise, requests_seed=0)
    sim.warm_up(workload)
    return sim.run_level(workload, workload.levels[0])


def bar_of(reference, ratio: float = 0.75) -> LevelBar:
    m = summarize(reference)
    return LevelBar(ratio * m.output_tok_s, m.output_tokens, m.wall_s)


def test_a_hopeless_burst_stops_early_on_an_optimistic_projection():
    bar = bar_of(level(BEST, noise=0.0))
    # EPLB on PCIe: its statistics and weight moves leave it far below 75% of the best.
    whole = level(["--tp-size", "8", "--ep-size", "8", "--enable-eplb"])
    watched = level_watch.replay(whole, bar)
    full, cut = summarize(whole), summarize(watched)
    assert cut.stopped_early and not full.stopped_early
    assert full.output_tok_s < bar.bar_tok_s
    # Stopped once it may be judged, long before it would have drained...
    assert bar.judge_after_s <= cut.wall_s < full.wall_s / 3
    # ... on a projection that does not understate the level: below the bar, above its whole run.
    assert full.output_tok_s <= cut.output_tok_s < bar.bar_tok_s
    # The records are those a client had at the stop: what streamed, requests cut mid-stream.
    assert watched.window and watched.ended == pytest.approx(watched.started + cut.wall_s)
    assert cut.output_tokens < full.output_tokens
    assert any(r.error == CUT_AT_WINDOW_END for r in watched.records)


@pytest.mark.parametrize(
    "argv",
    [
        BEST,  # the best itself, on another launch
        [*BEST[:-1], "0.92"],
        ["--tp-size", "8", "--mem-fraction-static", "0.88"],  # TP8 at SGLang's usual memory
        [*BEST[:-1], "0.86"],  # KV-bound
    ],
)
def test_a_level_that_reaches_its_bar_is_never_stopped(argv):
    """Whatever a level's whole run is worth, it is stopped only when that is below the bar."""
    bar = bar_of(level(BEST, noise=0.0))
    whole = level(argv, launch=3)
    watched = level_watch.replay(whole, bar)
    full = summarize(whole)
    if summarize(watched).stopped_early:
        assert full.output_tok_s < bar.bar_tok_s
    else:
        assert watched is whole
    if full.output_tok_s >= bar.bar_tok_s:
        assert watched is whole


def test_too_early_to_judge_and_a_level_that_finished_in_time():
    whole = level(BEST, noise=0.0)
    bar = bar_of(whole, ratio=0.98)
    # Before a quarter of the reference's time nothing is judged, however slow it looks.
    early = level_watch.cut(whole, whole.started + 0.5 * bar.judge_after_s)
    assert level_watch.projected_tok_s(early, bar) is None
    # The reference level itself, held to 98% of its own value, is never hopeless on the way.
    assert level_watch.replay(whole, bar) is whole


@pytest.fixture(scope="module")
def slow_emulator():
    # A third of the reference host's speed: a burst of 8 replies of 256 tokens takes ~3 s.
    with EmulatorProcess(["--tp-size", "8"], speedup=3.0) as proc:
        yield proc


def test_the_load_generator_stops_a_hopeless_burst_over_http(slow_emulator):
    """A real sweep against the emulator: a burst that cannot reach its bar returns at the
    first check after it may be judged, with what streamed so far and its projection; one
    that can reach it runs to the end."""
    wl = Workload(kind="burst", levels=(8,), max_tokens=256, ignore_eos=True)

    def measure(bar: LevelBar | None):
        return asyncio.run(asyncio.wait_for(run_level(slow_emulator.url, wl, 8, model_name="m", bar=bar), 60))

    whole = summarize(measure(None))
    assert whole.output_tokens == 8 * 256 and whole.wall_s > 2 * level_watch.CHECK_MIN_S
    reachable = measure(LevelBar(0.5 * whole.output_tok_s, whole.output_tokens, whole.wall_s))
    assert reachable.projected_tok_s is None and summarize(reachable).output_tokens == 8 * 256
    # A bar twice what this server does (a reference as long, twice as fast: impossible).
    hopeless = LevelBar(2.0 * whole.output_tok_s, whole.output_tokens, whole.wall_s)
    stopped = measure(hopeless)
    m = summarize(stopped)
    assert m.stopped_early and stopped.projected_tok_s == m.output_tok_s < hopeless.bar_tok_s
    # Judged first after a second (a real host is checked at most once a second).
    assert level_watch.CHECK_MIN_S <= m.wall_s < 0.75 * whole.wall_s
    assert 0 < m.output_tokens < 8 * 256
    assert all(r.error in (None, CUT_AT_WINDOW_END) for r in stopped.records)


def test_a_study_stops_hopeless_levels_and_prunes_their_trials(space):
    """After three complete trials, an EPLB launch (single stream ~10x slower) is stopped
    inside its first level and pruned there; the reason says so, and the server time it
    used is a fraction of what the level takes to drain."""
    search = make_search(space, 5, noise=0.02)
    enqueue(search, {"ep_size": 8}, {"ep_size": 4}, {"ep_size": 1}, {"ep_size": 8, "enable_eplb": True})
    search.run()
    recs = records(search)
    assert [r.outcome for r in recs[:3]] == ["complete"] * 3
    eplb = recs[3]
    assert eplb.outcome == "pruned" and len(eplb.levels) == 1
    (lv,) = eplb.levels
    assert lv["concurrency"] == 1 and lv["stopped_early"] is True
    assert eplb.reason is not None and eplb.reason.startswith("pruned at level 1 (C=1, stopped after")
    # What the whole single-stream level would have taken: the same launch, not watched.
    spec = space.render(space.complete(eplb.params))
    unwatched = SimMeasurer(space.hardware, space.model, noise=0.02).measure(
        spec,
        space.workload,
        Objective(),
        trial_label="x",
        seed=0,
        on_level=lambda *_: True,
        levels=(1,),
        launch=3,
    )
    (whole,) = unwatched.levels
    assert lv["wall_s"] < whole.wall_s / 3 and eplb.server_s < unwatched.server_s
    assert whole.output_tok_s <= lv["output_tok_s"] < FIRST_LEVEL_RATIO * max(r.single or 0 for r in recs[:3])
    for r in recs[:3]:
        assert all("stopped_early" not in lv for lv in r.levels)


def test_a_sweep_goes_on_after_a_level_cut_short_and_the_server_drops_its_requests(slow_emulator):
    """A level cut short (here: it cannot reach an impossible bar) closes its streams; the
    server drops those requests (the emulator, like SGLang, aborts a request whose client
    went away) and the next level of the sweep is measured whole on an idle server."""
    wl = Workload(kind="burst", levels=(8, 4), max_tokens=256, ignore_eos=True)
    before = _emulator_stats(slow_emulator.url)
    impossible = LevelBar(1e9, 8 * 256, 1.0)
    levels = asyncio.run(
        asyncio.wait_for(
            run_sweep(
                slow_emulator.url,
                wl,
                levels=[8, 4],
                watch=lambda i, c: impossible if c == 8 else None,
                warmup=False,
            ),
            60,
        )
    )
    cut, whole = (summarize(lv) for lv in levels)
    assert cut.concurrency == 8 and cut.stopped_early and cut.output_tokens < 8 * 256
    assert whole.concurrency == 4 and not whole.stopped_early
    assert whole.output_tokens == 4 * 256 and whole.completed == 4 and not whole.errors
    after = _emulator_stats(slow_emulator.url)
    assert after["cancelled"] - before["cancelled"] == 8 - cut.completed
    assert after["open_requests"] == 0


def _emulator_stats(url: str) -> dict:
    return httpx.get(url + "/server_info", timeout=10, trust_env=False).json()["emulator"]
