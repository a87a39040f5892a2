"""The calibration table: the simulator against numbers measured on the reference host.

Reference host: 8x RTX PRO 6000 Blackwell on PCIe, Kimi K2.6 under SGLang, launched with
``--mem-fraction-static 0.88 --max-running-requests 256 --num-continuous-decode-steps 8``
and the NCCL tuning of the reference campaign, measured with short chat prompts: C=1 at
512 max tokens, then 32/64/128/192/256 at 2048 max tokens, all requests of a level sent
at once. ``tuner calibration`` prints this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.metrics import summarize
from tuner.sim.model import PerfModel
from tuner.sim.serving import simulate_sweep
from tuner.workload import REFERENCE_LEVELS, Workload

REFERENCE_HARDWARE = "rtx-pro-6000-pcie-x8"
REFERENCE_MODEL = "kimi-k2.6"
REFERENCE_FLAGS = (
    "--model-path /models/Kimi-K2.6 --trust-remote-code "
    "--mem-fraction-static 0.88 --max-running-requests 256 --num-continuous-decode-steps 8"
)
#: The reference campaign's NCCL tuning.
REFERENCE_NCCL = {
    "NCCL_MIN_NCHANNELS": "8",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_PROTO": "LL",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
REFERENCE_WORKLOAD = Workload(kind="burst", levels=REFERENCE_LEVELS, max_tokens=2048, single_max_tokens=512)
#: Numeric cells must agree within this relative error.
TOLERANCE = 0.10


@dataclass(frozen=True)
class Row:
    """One configuration of the reference campaign and what was measured for it."""

    name: str
    flags: str
    single: float | None = None  # measured C=1 tok/s
    peak: float | None = None  # measured peak aggregate tok/s over C <= 256
    note: str = ""


ROWS: tuple[Row, ...] = (
    Row("TP8 (NCCL tuned)", "--tp-size 8", single=98, peak=1291),
    Row("TP8 + EP8", "--tp-size 8 --ep-size 8", single=65, peak=1519, note="measured 1500-1538"),
    Row(
        "TP8 + EP4",
        "--tp-size 8 --ep-size 4",
        single=69,
        peak=1530,
        note="saturates at lower concurrency than EP8",
    ),
    Row(
        "EP8 + EPLB",
        "--tp-size 8 --ep-size 8 --enable-eplb",
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
    model = PerfModel.build(
        REFERENCE_HARDWARE, REFERENCE_MODEL, f"{REFERENCE_FLAGS} {row.flags}", REFERENCE_NCCL
    )
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
        "noise off; tolerance ±10%",
        "",
        f"{'config':26s} {'C=1 model':>9s} {'meas':>6s} {'err':>6s}     {'peak model':>10s} {'meas':>6s} "
        f"{'err':>6s}      at C",
    ]
    for r in results:
        lines.append(
            f"{r.row.name:26s} {_cell(r.single, r.row.single)}   {_cell(r.peak, r.row.peak)}  "
            f"{r.peak_level:4d}"
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
