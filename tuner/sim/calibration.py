"""The calibration table: the simulator against numbers measured on the reference host.

Reference host: 8x RTX PRO 6000 Blackwell on PCIe, Kimi K2.6 under SGLang, launched with
``--mem-fraction-static 0.88 --max-running-requests 256 --num-continuous-decode-steps 8``,
measured with short chat prompts: C=1 at 512 max tokens, then 32/64/128/192/256 at 2048
max tokens, all requests of a level sent at once. Each row runs under the NCCL settings
the reference campaign used for it: the TP8 rows with its NCCL tuning, the expert-parallel
rows at NCCL defaults (the tuning variables were absent from those launches).
``tuner calibration`` prints this table.

The second table sets the simulator against public measurements of SGLang on other hosts
(``tuner/data/calibration/public.yaml``: ``bench_serving`` runs from SGLang's own cookbook
pages), mean TPOT and mean TTFT, replayed as the same closed loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import yaml

from tuner.metrics import summarize
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.workload import REFERENCE_LEVELS, Workload

#: Public points: mean absolute relative error allowed over the table, per metric, and the
#: largest ratio any one point may be off by.
PUBLIC_TPOT_MAE = 0.12
PUBLIC_TTFT_MAE = 0.30
PUBLIC_MAX_RATIO = 2.0

REFERENCE_HARDWARE = "rtx-pro-6000-pcie-x8"
REFERENCE_MODEL = "kimi-k2.6"
REFERENCE_FLAGS = (
    "--model-path /models/Kimi-K2.6 --trust-remote-code "
    "--mem-fraction-static 0.88 --max-running-requests 256 --num-continuous-decode-steps 8"
)
#: The reference campaign's NCCL tuning (its TP8 baseline).
REFERENCE_NCCL = {
    "NCCL_MIN_NCHANNELS": "8",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_PROTO": "LL",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
REFERENCE_WORKLOAD = Workload(kind="burst", levels=REFERENCE_LEVELS, max_tokens=2048, single_max_tokens=512)
#: NCCL defaults: no NCCL_* variable set (the expert-parallel rows of the campaign).
NCCL_DEFAULTS: dict[str, str] = {}
#: Numeric cells must agree within this relative error.
TOLERANCE = 0.07


@dataclass(frozen=True)
class Row:
    """One configuration of the reference campaign and what was measured for it."""

    name: str
    flags: str
    nccl: Mapping[str, str] = field(default_factory=lambda: REFERENCE_NCCL)
    single: float | None = None  # measured C=1 tok/s
    peak: float | None = None  # measured peak aggregate tok/s over C <= 256
    note: str = ""

    @property
    def nccl_label(self) -> str:
        return "tuned" if self.nccl else "defaults"


ROWS: tuple[Row, ...] = (
    Row("TP8 (NCCL tuned)", "--tp-size 8", single=98, peak=1291),
    Row(
        "TP8 + EP8",
        "--tp-size 8 --ep-size 8",
        NCCL_DEFAULTS,
        single=65,
        peak=1519,
        note="measured 1500-1538",
    ),
    Row(
        "TP8 + EP4",
        "--tp-size 8 --ep-size 4",
        NCCL_DEFAULTS,
        single=69,
        peak=1530,
        note="saturates at lower concurrency than EP8",
    ),
    Row(
        "EP8 + EPLB",
        "--tp-size 8 --ep-size 8 --enable-eplb",
        NCCL_DEFAULTS,
        note="C=1 ~8x slower than EP8; peak ~40% below EP8",
    ),
    Row("TP8 without CUDA graphs", "--tp-size 8 --disable-cuda-graph", note="C=1 ~4x slower than TP8"),
    Row("PP8", "--pp-size 8", note="below TP8 at C=1 and at peak"),
)


@dataclass(frozen=True)
class Result:
    row: Row
    single: float
    peak: float
    peak_level: int
    levels: dict[int, float]


def simulate_row(row: Row, *, noise: float = 0.0, seed: int = 0) -> Result:
    """Run the reference sweep for one row on the simulator."""
    model = PerfModel.build(REFERENCE_HARDWARE, REFERENCE_MODEL, f"{REFERENCE_FLAGS} {row.flags}", row.nccl)
    metrics = [summarize(lv) for lv in simulate_sweep(model, REFERENCE_WORKLOAD, seed=seed, noise=noise)]
    levels = {m.concurrency: m.output_tok_s for m in metrics}
    single = levels[1]
    peak_level = max((c for c in levels if c > 1), key=levels.__getitem__)
    return Result(row, single, levels[peak_level], peak_level, levels)


def run(noise: float = 0.0, seed: int = 0) -> list[Result]:
    return [simulate_row(r, noise=noise, seed=seed) for r in ROWS]


def _cell(model: float, measured: float | None) -> str:
    if measured is None:
        return f"{model:8.1f}            "
    err = model / measured - 1
    mark = "ok" if abs(err) <= TOLERANCE else "OFF"
    return f"{model:8.1f} {measured:6.0f} {err:+5.1%} {mark:3s}"


def qualitative_checks(results: list[Result]) -> list[tuple[str, bool, str]]:
    """The reference table's qualitative rows: (claim, holds, figures)."""
    by = {r.row.name: r for r in results}
    tp8, ep8 = by["TP8 (NCCL tuned)"], by["TP8 + EP8"]
    eplb, nograph, pp8 = by["EP8 + EPLB"], by["TP8 without CUDA graphs"], by["PP8"]
    s_ratio = ep8.single / eplb.single
    p_drop = 1 - eplb.peak / ep8.peak
    g_ratio = tp8.single / nograph.single
    return [
        ("EPLB crushes single-stream ~8x (6x-10x)", 6 <= s_ratio <= 10, f"{s_ratio:.1f}x"),
        ("EPLB peak ~40% below EP8 (30%-50%)", 0.30 <= p_drop <= 0.50, f"{p_drop:.0%} below"),
        ("no CUDA graphs ~4x slower at C=1 (3x-5x)", 3 <= g_ratio <= 5, f"{g_ratio:.1f}x"),
        ("PP8 below TP8 at C=1", pp8.single < tp8.single, f"{pp8.single:.1f} < {tp8.single:.1f}"),
        ("PP8 below TP8 at peak", pp8.peak < tp8.peak, f"{pp8.peak:.0f} < {tp8.peak:.0f}"),
        (
            "TP8 wins single-stream, EP wins peak",
            tp8.single > ep8.single and ep8.peak > tp8.peak,
            f"{tp8.single:.0f}>{ep8.single:.0f}, {ep8.peak:.0f}>{tp8.peak:.0f}",
        ),
    ]


def format_table(results: list[Result]) -> str:
    """The model-vs-measured table, as printed by ``tuner calibration``."""
    lines = [
        "Calibration: simulator vs measured, reference host (8x RTX PRO 6000 PCIe, Kimi K2.6, SGLang)",
        f"sweep: C=1 @512 tokens, C={'/'.join(str(c) for c in REFERENCE_LEVELS[1:])} @2048, burst; "
        f"noise off; tolerance ±{TOLERANCE:.0%}",
        "NCCL: tuned = " + " ".join(f"{k}={v}" for k, v in REFERENCE_NCCL.items()) + "; defaults = none set",
        "",
        f"{'config':26s} {'NCCL':8s} {'C=1 model':>9s} {'meas':>6s} {'err':>6s}     {'peak model':>10s} "
        f"{'meas':>6s} {'err':>6s}      at C",
    ]
    for r in results:
        lines.append(
            f"{r.row.name:26s} {r.row.nccl_label:8s} {_cell(r.single, r.row.single)}   "
            f"{_cell(r.peak, r.row.peak)}  {r.peak_level:4d}"
        )
    lines += ["", "qualitative rows:"]
    for claim, ok, fig in qualitative_checks(results):
        lines.append(f"  [{'ok' if ok else 'OFF'}] {claim}: {fig}")
    lines += ["", "per-level aggregate tok/s (model):"]
    for r in results:
        lines.append(f"  {r.row.name:26s} " + "  ".join(f"C={c}:{v:.0f}" for c, v in r.levels.items()))
    return "\n".join(lines)


def all_within_tolerance(results: list[Result]) -> bool:
    """True when every numeric cell is within TOLERANCE and every qualitative row holds."""
    for r in results:
        for model, measured in ((r.single, r.row.single), (r.peak, r.row.peak)):
            if measured is not None and abs(model / measured - 1) > TOLERANCE:
                return False
    return all(ok for _, ok, _ in qualitative_checks(results))


# --- public points ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PublicPoint:
    """One public ``bench_serving`` run (see ``tuner/data/calibration/public.yaml``)."""

    id: str
    hardware: str
    model: str
    flags: str
    concurrency: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    ttft_ms: float | None
    tpot_ms: float | None


@dataclass(frozen=True)
class PublicResult:
    point: PublicPoint
    ttft_ms: float
    tpot_ms: float

    def errors(self) -> dict[str, float]:
        """Relative error of each measured metric (model / measured - 1)."""
        out = {}
        for name, model, measured in (
            ("tpot", self.tpot_ms, self.point.tpot_ms),
            ("ttft", self.ttft_ms, self.point.ttft_ms),
        ):
            if measured:
                out[name] = model / measured - 1
        return out


def public_points() -> list[PublicPoint]:
    """The public points of the data file (excluded ones are not in this list)."""
    path = resources.files("tuner") / "data" / "calibration" / "public.yaml"
    data = yaml.safe_load(path.read_text())
    fields = PublicPoint.__dataclass_fields__
    return [PublicPoint(**{k: v for k, v in p.items() if k in fields}) for p in data["points"]]


def simulate_point(point: PublicPoint) -> PublicResult:
    """Replay one public run: ``concurrency`` clients in a closed loop for the run's duration,
    every request with the run's mean prompt and reply lengths; noise off."""
    model = PerfModel.build(point.hardware, point.model, point.flags, {})
    wl = Workload(
        kind="closed-loop",
        levels=(point.concurrency,),
        max_tokens=point.output_tokens,
        single_max_tokens=point.output_tokens,
        prompt_tokens=point.input_tokens,
        ignore_eos=True,
        duration_s=point.duration_s,
        ramp_s=0.0,
    )
    (level,) = simulate_sweep(model, wl, noise=0.0)
    done = [r for r in level.records if r.ok and r.first_token is not None and r.end is not None]
    ttft = float(np.mean([r.first_token - r.start for r in done]))  # type: ignore[operator]
    tpot = float(np.mean([(r.end - r.first_token) / (r.output_tokens - 1) for r in done]))  # type: ignore[operator]
    return PublicResult(point, ttft * 1e3, tpot * 1e3)


def run_public() -> list[PublicResult]:
    return [simulate_point(p) for p in public_points()]


def public_summary(results: list[PublicResult]) -> dict[str, float]:
    """Mean absolute relative error of TPOT and TTFT, and the worst ratio (>= 1) of any cell."""
    tpot = [abs(e["tpot"]) for r in results if "tpot" in (e := r.errors())]
    ttft = [abs(e["ttft"]) for r in results if "ttft" in (e := r.errors())]
    worst = max(max(1 + e, 1 / (1 + e)) for r in results for e in r.errors().values())
    return {"tpot_mae": float(np.mean(tpot)), "ttft_mae": float(np.mean(ttft)), "worst_ratio": worst}


def public_within_tolerance(results: list[PublicResult]) -> bool:
    s = public_summary(results)
    return (
        s["tpot_mae"] <= PUBLIC_TPOT_MAE
        and s["ttft_mae"] <= PUBLIC_TTFT_MAE
        and s["worst_ratio"] <= PUBLIC_MAX_RATIO
    )


def _pcell(model: float, measured: float | None) -> str:
    if measured is None:
        return f"{model:7.1f}       -      -"
    return f"{model:7.1f} {measured:7.1f} {model / measured - 1:+6.1%}"


def format_public_table(results: list[PublicResult]) -> str:
    """The public-points table, as printed by ``tuner calibration``."""
    s = public_summary(results)
    lines = [
        "Public points: simulator vs published SGLang bench_serving runs "
        "(tuner/data/calibration/public.yaml)",
        "closed loop at the run's concurrency, mean prompt/reply lengths, noise off; "
        f"limits: MAE TPOT <= {PUBLIC_TPOT_MAE:.0%}, TTFT <= {PUBLIC_TTFT_MAE:.0%}, "
        f"no cell beyond {PUBLIC_MAX_RATIO:g}x",
        "",
        f"{'point':32s} {'in/out':>10s}   {'TPOT ms':>7s} {'meas':>7s} {'err':>6s}   "
        f"{'TTFT ms':>7s} {'meas':>7s} {'err':>6s}",
    ]
    for r in results:
        p = r.point
        lines.append(
            f"{p.id:32s} {p.input_tokens:>5d}/{p.output_tokens:<4d}   {_pcell(r.tpot_ms, p.tpot_ms)}   "
            f"{_pcell(r.ttft_ms, p.ttft_ms)}"
        )
    lines += [
        "",
        f"mean absolute error: TPOT {s['tpot_mae']:.1%}, TTFT {s['ttft_mae']:.1%}; "
        f"worst cell {s['worst_ratio']:.2f}x  [{'ok' if public_within_tolerance(results) else 'OFF'}]",
    ]
    return "\n".join(lines)
