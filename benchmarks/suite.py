"""The benchmark suite: the tuner and its peers on many spaces, tuned on some, judged on the rest.

    python benchmarks/suite.py [--seeds 20] [--budget 40] [--spaces a,b] [--strategies tuner,gp]
        [--jobs 2] [--fresh] [--markdown] [--readme]

Spaces: the two project spaces that are suite members (the reference space and its trace
variant, in search_spaces/) and the suite's own (benchmarks/spaces/*.yaml), split once
and for good into :data:`TUNE` (spaces the sampler's constants may be fitted on) and
:data:`JUDGED` (spaces it is only judged on); see benchmarks/spaces/SPLIT.md. Every table
reports both.

Strategies (:data:`STRATEGIES`): the tuner and its peers, each a study of ``tuner search``'s
own trial logic with only the sampler swapped (benchmarks/studies.py, ``PEER_SAMPLERS``):
random search, TPE (defaults), multivariate TPE, Optuna's GP sampler and CMA-ES (only on
spaces with a numeric parameter). Noise is on, as in a real study; each recommendation (what
``tuner best`` would pick) is scored noise-free against the space's best, established once
by benchmarks/space_best.py and stored in benchmarks/results/suite_best/<space>.json.

Per space and strategy: the share of seeds whose recommendation is within 2% / 5% of the
best; the share of seeds that launched a configuration within 2% of the best at all (where
it is far above the first share, the search found the region and the recommendation missed
it under the noise; where both are low, the search never got there); the median and worst
recommendation as a share of the best; the median budget used (trials with a verdict,
tuner/budget.py) until the recommendation is within 2% ("> budget" when half the seeds
never get there); studies whose recommendation is worth nothing noise-free (none, or one
that misses the space's floor on the host though its launches met it on average);
the share of all trials that were proposals the engine rules or the space's constraints
rejected; the mean time spent in the sampler per trial. Then the aggregate over TUNE and
over JUDGED, and the targets of the suite as met / NOT MET lines.

Each study's result is cached on disk (benchmarks/results/suite_cache/), keyed by its job,
the space's content and a hash of the code it ran: the peers' key covers every tuner
module a study loads (the trial logic, the pruner, the objectives, the simulator, the
engine rules) but the sampler, and the host and model profiles; the tuner's key adds its
sampler (tuner/sampler.py), so changing the sampler re-runs the tuner alone.
``--fresh`` ignores the cache. Results: benchmarks/results/suite.json.

The cache is local and lost with the checkout; the studies behind the README's table are
kept with the repository (``--readme`` writes them to benchmarks/results/suite_studies.json.gz,
by the same keys) and served as the cache is, so a fresh clone re-runs only the studies its
changes touch: after a change to the sampler, the tuner's, not all of them.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import RESULTS, WITHIN_2, load_best, machine, share_text, space_named, write_result
from _tables import format_table, format_targets, markdown_table

from studies import Job, StudyResult, applies, median_or_none, run_jobs

ROOT = Path(__file__).resolve().parents[1]

#: Spaces the sampler's constants may be fitted on, decided before any sampler tuning
#: (benchmarks/spaces/SPLIT.md): the reference space, its trace variant, and two suite
#: spaces that bring what the reference lacks to tuning: a small space without start
#: points (DeepSeek-V3 chat on H200) and a goodput objective on long prompts (Kimi on B200).
TUNE: tuple[str, ...] = (
    "kimi-k2.6-8x-rtx-pro-6000",
    "kimi-k2.6-8x-rtx-pro-6000-trace",
    "deepseek-v3-8x-h200-chat",
    "kimi-k2.6-8x-b200-longprompt",
)
#: Spaces the sampler is only judged on; no constant may be fitted on them. The first two
#: are the two spaces of issue 15 (goodput on H200; the reference parameters without start
#: points, long prompts and a single-stream floor).
JUDGED: tuple[str, ...] = (
    "deepseek-v3-8x-h200-goodput",
    "kimi-k2.6-8x-rtx-pro-6000-floor",
    "kimi-k2.6-8x-h200-single",
    "deepseek-v3-8x-b200-longout",
    "deepseek-v3-8x-rtx-pro-6000-floor",
)
SPACES: tuple[str, ...] = TUNE + JUDGED
#: The reference space (its own target: no loss against today).
REFERENCE = "kimi-k2.6-8x-rtx-pro-6000"

#: The suite's strategies: name in the tables -> strategy of benchmarks/studies.py.
STRATEGIES: dict[str, str] = {
    "tuner": "tuner",
    "random": "peer-random",
    "tpe": "peer-tpe",
    "tpe-mv": "peer-tpe-mv",
    "gp": "peer-gp",
    "cmaes": "peer-cmaes",
}

#: Targets of issue 15 ("Must show").
TARGET_JUDGED_WITHIN_2 = 0.90
TARGET_REFERENCE_WITHIN_2 = 0.95
TARGET_TRIALS_RATIO = 1 / 3
TARGET_OVERHEAD_MS = 300.0
TARGET_REJECTED_SHARE = 0.10

#: What each study's result depends on besides its job, its space and the tuner's modules
#: it runs (:func:`study_modules`): the host and model profiles and the benchmark harness.
SHARED_DATA = (
    "tuner/data/hardware",
    "tuner/data/models",
    "benchmarks/studies.py",
    "benchmarks/space_best.py",
    "benchmarks/_common.py",
)
#: ...and what the tuner's studies alone depend on.
TUNER_CODE = ("tuner/sampler.py",)
CACHE = RESULTS / "suite_cache"
#: The results of the studies behind the README's table, by cache key (tracked).
ARCHIVE = RESULTS / "suite_studies.json.gz"

#: Markers of the README's generated aggregate (``--readme`` rewrites what lies between).
README_BEGIN = "<!-- suite:begin (generated by benchmarks/suite.py --readme) -->"
README_END = "<!-- suite:end -->"


# --- cache ---------------------------------------------------------------------------------
def _hash_files(files: Iterable[tuple[str, Path]]) -> str:
    """One hash of (name, file) pairs: each name, then the file's bytes."""
    h = hashlib.sha256()
    for name, f in files:
        h.update(name.encode())
        h.update(f.read_bytes() if f.exists() else b"<missing>")
    return h.hexdigest()


def _hash_paths(paths: Sequence[str]) -> str:
    """:func:`_hash_files` of the files at ``paths`` (from the repository's root; a folder's
    Python and YAML files), each named by its path."""
    files = []
    for rel in paths:
        path = ROOT / rel
        found = (
            sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml"))
            if path.is_dir()
            else [path]
        )
        files += [(str(f.relative_to(ROOT)), f) for f in found]
    return _hash_files(files)


def _space_hash(name: str) -> str:
    """The space's content as loaded (``extends`` resolved), and its trace file if any."""
    space = space_named(name)
    h = hashlib.sha256(space.spec.model_dump_json().encode())
    if space.workload.trace:
        h.update(Path(space.workload.trace).read_bytes())
    return h.hexdigest()


def cache_key(job: Job, code: dict[str, str], spaces: dict[str, str]) -> str:
    kind = "tuner" if job.strategy == "tuner" else "peer"
    payload = json.dumps([list(job.key), code[kind], spaces[job.space]], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def study_modules() -> dict[str, Path]:
    """The tuner's modules a study runs, by name, with the files they were loaded from:
    every one loaded once the study harness (benchmarks/studies.py) is, the sampler's left
    out (:data:`TUNER_CODE`). Read from what is loaded rather than listed by hand, so that a
    change to any of them (the pruner, the objectives, the workload) re-runs the studies
    instead of serving results of the code before it."""
    sampler = {rel.removesuffix(".py").replace("/", ".") for rel in TUNER_CODE}
    return {
        name: Path(file)
        for name, module in sorted(sys.modules.items())
        if name.partition(".")[0] == "tuner"
        and name not in sampler
        and (file := getattr(module, "__file__", None))
    }


def code_hashes(modules: dict[str, Path] | None = None) -> dict[str, str]:
    """The code keys of the peers' and the tuner's studies (``modules``: the study's
    modules, :func:`study_modules` by default)."""
    shared = _hash_files((study_modules() if modules is None else modules).items()) + _hash_paths(SHARED_DATA)
    return {"peer": shared, "tuner": shared + _hash_paths(TUNER_CODE)}


def cache_keys(jobs: Sequence[Job]) -> dict[tuple, str]:
    """Each job's cache key (by :attr:`Job.key`) under the code and spaces as they are now."""
    code = code_hashes()
    spaces = {name: _space_hash(name) for name in {j.space for j in jobs}}
    return {j.key: cache_key(j, code, spaces) for j in jobs}


def read_archive(path: Path = ARCHIVE) -> dict[str, dict[str, Any]]:
    """The archived study results (:data:`ARCHIVE`) by cache key; {} without an archive."""
    if not path.exists():
        return {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        found: dict[str, dict[str, Any]] = json.load(f)
    return found


def write_archive(results: dict[str, StudyResult], path: Path = ARCHIVE) -> None:
    """Keep ``results`` (by cache key) as the archive, replacing the one before. The gzip
    header carries no time stamp, so the same results give the same bytes (no change for
    git to record)."""
    payload = json.dumps({key: results[key].to_json() for key in sorted(results)}, separators=(",", ":"))
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(payload.encode("utf-8"))


def run_cached(
    jobs: list[Job],
    n_jobs: int,
    fresh: bool,
    archive: dict[str, dict[str, Any]] | None = None,
    keys: dict[tuple, str] | None = None,
) -> list[StudyResult]:
    """Each job's result from the cache or from ``archive`` (:func:`read_archive`), running
    (and caching) the missing ones; ``keys``: the jobs' :func:`cache_keys`, computed here
    when not given."""
    keys = cache_keys(jobs) if keys is None else keys
    done: dict[tuple, StudyResult] = {}
    if not fresh:
        for j in jobs:
            path = CACHE / f"{keys[j.key]}.json"
            if path.exists():
                done[j.key] = StudyResult.from_json(json.loads(path.read_text()))
            elif archive and keys[j.key] in archive:
                done[j.key] = StudyResult.from_json(archive[keys[j.key]])
    todo = [j for j in jobs if j.key not in done]
    print(f"{len(jobs)} studies: {len(jobs) - len(todo)} cached, {len(todo)} to run on {n_jobs} workers")
    if todo:
        CACHE.mkdir(parents=True, exist_ok=True)

        def keep(r: StudyResult) -> None:
            # Written as each study finishes: a run stopped part-way keeps what it measured.
            done[r.job.key] = r
            (CACHE / f"{keys[r.job.key]}.json").write_text(json.dumps(r.to_json()))

        run_jobs(todo, n_jobs, log=_log, on_result=keep)
    return [done[j.key] for j in jobs]


def _log(line: str) -> None:
    print(line, flush=True)


# --- scoring -------------------------------------------------------------------------------
def score(results: list[StudyResult], best: float, budget: int) -> dict[str, Any]:
    """One strategy on one space (see the module docstring)."""
    finals = [r.final() for r in results]
    shares = [v / best for v in finals]
    to2 = [r.launches_to(WITHIN_2 * best) for r in results]
    trials = sum(sum(r.outcomes.values()) for r in results)
    rejected = sum(r.outcomes.get("infeasible", 0) for r in results)
    return {
        "seeds": len(results),
        "within_2": sum(s >= WITHIN_2 for s in shares) / len(results),
        "within_5": sum(s >= 0.95 for s in shares) / len(results),
        "launched_2": _launched_share(results, WITHIN_2 * best),
        "median_share": float(statistics.median(shares)),
        "worst_share": min(shares),
        "median_trials_to_2": median_or_none(to2),
        "reached_2": sum(t is not None for t in to2),
        "trials_to_2": to2,
        "no_feasible": sum(v <= 0 for v in finals),
        "stopped": sum(r.stopped is not None for r in results),
        "stopped_why": sorted({r.stopped for r in results if r.stopped is not None}),
        "rejected_share": rejected / trials if trials else 0.0,
        "sampler_ms": statistics.fmean(r.sampler_ms_per_trial() for r in results),
        "wall_ms": statistics.fmean(1e3 * r.wall_s / max(len(r.rec_value), 1) for r in results),
        "trials_mean": trials / len(results),
        "budget": budget,
        "shares": shares,
        # Per seed, in the order of "shares": what benchmarks/suite_compare.py pairs on.
        "seed_ids": [r.job.seed for r in results],
        "server_h": [r.server_h() for r in results],
        "top_launch": max((max(r.trial_value, default=0.0), r.job.seed) for r in results),
    }


def _launched_share(results: list[StudyResult], target: float) -> float | None:
    """Share of studies that launched a configuration worth ``target``; None when a result
    was stored without trial values."""
    found = [r.launched_within(target) for r in results]
    return None if any(f is None for f in found) else sum(map(bool, found)) / len(found)


def aggregate(per_space: dict[str, dict[str, Any]], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each strategy over a set of spaces: seeds pooled, and its weakest space."""
    out: dict[str, dict[str, Any]] = {}
    for strategy in STRATEGIES:
        rows = [
            per_space[s]["rows"][strategy]
            for s in names
            if s in per_space and strategy in per_space[s]["rows"]
        ]
        if not rows:
            continue
        shares = [x for r in rows for x in r["shares"]]
        trials = sum(r["trials_mean"] * r["seeds"] for r in rows)
        out[strategy] = {
            "spaces": len(rows),
            "seeds": sum(r["seeds"] for r in rows),
            "within_2": sum(s >= WITHIN_2 for s in shares) / len(shares),
            "within_5": sum(s >= 0.95 for s in shares) / len(shares),
            "launched_2": None
            if any(r.get("launched_2") is None for r in rows)
            else sum(r["launched_2"] * r["seeds"] for r in rows) / sum(r["seeds"] for r in rows),
            "weakest_within_2": min(r["within_2"] for r in rows),
            "median_share": float(statistics.median(shares)),
            "worst_share": min(shares),
            "median_trials_to_2": median_or_none(t for r in rows for t in r["trials_to_2"]),
            "reached_2": sum(r["reached_2"] for r in rows),
            "no_feasible": sum(r["no_feasible"] for r in rows),
            "rejected_share": sum(r["rejected_share"] * r["trials_mean"] * r["seeds"] for r in rows) / trials
            if trials
            else 0.0,
            "sampler_ms": statistics.fmean(r["sampler_ms"] for r in rows),
        }
    return out


def _ahead(t: dict[str, Any], p: dict[str, Any]) -> bool:
    """The tuner is ahead of a peer on a space: more seeds within 2%, or as many and a median
    budget to get there no larger (not reached counts as infinite)."""
    if t["within_2"] != p["within_2"]:
        return t["within_2"] > p["within_2"]
    inf = float("inf")
    tm, pm = t["median_trials_to_2"], p["median_trials_to_2"]
    return (inf if tm is None else tm) <= (inf if pm is None else pm)


def targets(per_space: dict[str, dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The suite's must-show lines (issue 15), over the spaces and strategies that ran."""
    rows = {s: v["rows"] for s, v in per_space.items() if "tuner" in v["rows"]}
    judged = [s for s in JUDGED if s in rows]
    out = []
    if judged:
        low = [s for s in judged if rows[s]["tuner"]["within_2"] < TARGET_JUDGED_WITHIN_2]
        out.append(
            {
                "target": f"judged: tuner within 2% in >= {TARGET_JUDGED_WITHIN_2:.0%} of seeds on every "
                "judged space",
                "met": not low,
                "figures": ", ".join(
                    f"{s} {share_text(rows[s]['tuner']['within_2'], rows[s]['tuner']['seeds'])}"
                    for s in judged
                ),
            }
        )
    behind = [
        f"{peer} on {s}"
        for s, r in rows.items()
        for peer in r
        if peer != "tuner" and not _ahead(r["tuner"], r[peer])
    ]
    out.append(
        {
            "target": "tuner ahead of every peer on every space (more seeds within 2%, ties by median "
            "trials to 2%)",
            "met": not behind,
            "figures": "behind or tied: " + ", ".join(behind) if behind else "ahead everywhere",
        }
    )
    ratio_figures, ratio_ok = [], True
    for s in judged:
        if "random" not in rows[s]:
            continue
        tm, rm = rows[s]["tuner"]["median_trials_to_2"], rows[s]["random"]["median_trials_to_2"]
        bound = rm if rm is not None else budget  # random's median is beyond the budget
        ok = tm is not None and tm <= TARGET_TRIALS_RATIO * bound
        ratio_ok &= ok
        tm_s = "-" if tm is None else f"{tm:g}"
        ratio_figures.append(f"{s} {tm_s} vs {'>' if rm is None else ''}{bound:g}")
    if ratio_figures:
        out.append(
            {
                "target": "judged: tuner's median trials to 2% at most a third of random search's",
                "met": ratio_ok,
                "figures": ", ".join(ratio_figures),
            }
        )
    if REFERENCE in rows:
        w = rows[REFERENCE]["tuner"]["within_2"]
        out.append(
            {
                "target": f"reference space: tuner within 2% in >= {TARGET_REFERENCE_WITHIN_2:.0%} of seeds",
                "met": w >= TARGET_REFERENCE_WITHIN_2,
                "figures": share_text(w, rows[REFERENCE]["tuner"]["seeds"]),
            }
        )
    floors = [s for s in rows if per_space[s]["floor"] and not per_space[s]["start_points"]]
    if floors:
        empty = {s: rows[s]["tuner"]["no_feasible"] for s in floors}
        out.append(
            {
                "target": "spaces without start points and with a single-stream floor: no tuner study ends "
                "without a feasible recommendation",
                "met": not any(empty.values()),
                "figures": ", ".join(f"{s} {n} of {rows[s]['tuner']['seeds']}" for s, n in empty.items()),
            }
        )
    rej = {s: r["tuner"]["rejected_share"] for s, r in rows.items()}
    most = max(rej, key=lambda s: rej[s])
    out.append(
        {
            "target": f"tuner's trials that were rule-rejected proposals < {TARGET_REJECTED_SHARE:.0%} on "
            "every space",
            "met": all(v < TARGET_REJECTED_SHARE for v in rej.values()),
            "figures": f"worst {rej[most]:.0%} ({most})",
        }
    )
    ms = {s: r["tuner"]["sampler_ms"] for s, r in rows.items()}
    worst = max(ms, key=lambda s: ms[s])
    out.append(
        {
            "target": f"tuner's sampler overhead < {TARGET_OVERHEAD_MS:.0f} ms per trial on every space",
            "met": ms[worst] < TARGET_OVERHEAD_MS,
            "figures": f"worst {ms[worst]:.0f} ms ({worst})",
        }
    )
    gp = [r["gp"]["sampler_ms"] for r in rows.values() if "gp" in r]
    if gp:
        out.append(
            {
                "target": "(for reference) Optuna's GPSampler overhead per trial",
                "met": True,
                "figures": f"mean {statistics.fmean(gp):.0f} ms, worst {max(gp):.0f} ms",
            }
        )
    return out


def analyse(results: list[StudyResult], bests: dict[str, float], budget: int, seeds: int) -> dict[str, Any]:
    per_space: dict[str, dict[str, Any]] = {}
    for name in bests:
        space = space_named(name)
        rows = {}
        for label, strategy in STRATEGIES.items():
            mine = [r for r in results if r.job.space == name and r.job.strategy == strategy]
            if mine:
                rows[label] = score(mine, bests[name], budget)
        per_space[name] = {
            "split": "TUNE" if name in TUNE else "JUDGED",
            "best": bests[name],
            "hardware": space.hardware,
            "model": space.model,
            "objective": space.objective.model_dump(exclude_none=True),
            "floor": space.objective.min_single_stream is not None,
            "parameters": len(space.distributions()),
            "start_points": len(space.start_points()),
            "rows": rows,
        }
    return {
        "budget": budget,
        "seeds": seeds,
        "tune": list(TUNE),
        "judged": list(JUDGED),
        "spaces": per_space,
        "aggregate": {
            "TUNE": aggregate(per_space, TUNE),
            "JUDGED": aggregate(per_space, JUDGED),
        },
        "targets": targets(per_space, budget),
        "machine": machine(),
    }


# --- tables --------------------------------------------------------------------------------
SPACE_HEADER = [
    "strategy",
    "within 2%",
    "launched 2%",
    "within 5%",
    "median",
    "worst",
    "trials to 2%",
    "no rec.",
    "rejected",
    "sampler ms",
]
AGG_HEADER = [SPACE_HEADER[0], "spaces", *SPACE_HEADER[1:3], "weakest space", *SPACE_HEADER[3:]]


def _med(row: dict[str, Any], budget: int) -> str:
    m = row["median_trials_to_2"]
    seeds = row["seeds"]
    return (f"> {budget}" if m is None else f"{m:g}") + f" ({row['reached_2']}/{seeds})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def space_rows(entry: dict[str, Any], budget: int) -> list[list[str]]:
    return [
        [
            label,
            f"{r['within_2']:.0%}",
            _share(r.get("launched_2")),
            f"{r['within_5']:.0%}",
            f"{r['median_share']:.1%}",
            f"{r['worst_share']:.1%}",
            _med(r, budget),
            str(r["no_feasible"]),
            f"{r['rejected_share']:.0%}",
            f"{r['sampler_ms']:.0f}",
        ]
        for label, r in entry["rows"].items()
    ]


def agg_rows(agg: dict[str, Any], budget: int) -> list[list[str]]:
    return [
        [
            label,
            str(r["spaces"]),
            f"{r['within_2']:.0%}",
            _share(r.get("launched_2")),
            f"{r['weakest_within_2']:.0%}",
            f"{r['within_5']:.0%}",
            f"{r['median_share']:.1%}",
            f"{r['worst_share']:.1%}",
            _med(r, budget),
            str(r["no_feasible"]),
            f"{r['rejected_share']:.0%}",
            f"{r['sampler_ms']:.0f}",
        ]
        for label, r in agg.items()
    ]


def _stopped_note(entry: dict[str, Any]) -> list[str]:
    """A line naming the strategies whose studies stopped before their budget."""
    stopped = {label: r["stopped"] for label, r in entry["rows"].items() if r.get("stopped")}
    if not stopped:
        return []
    what = ", ".join(f"{label} {n} of {entry['rows'][label]['seeds']}" for label, n in stopped.items())
    why = sorted({w for r in entry["rows"].values() for w in r.get("stopped_why", [])})
    return [f"  studies stopped before their budget: {what} ({'; '.join(why)})"]


#: A launch scoring above the stored best by more than this share says the best is not the
#: space's best (a noise-free value is exact: only rounding separates equal ones).
BEST_BEATEN = 0.0005


def _best_note(name: str, entry: dict[str, Any]) -> list[str]:
    """A line when a study launched a configuration above the space's stored best: every
    share of the space is then measured against too low a bar."""
    bar = entry["best"] * (1 + BEST_BEATEN)
    beaten = [(*r["top_launch"], label) for label, r in entry["rows"].items() if r["top_launch"][0] > bar]
    if not beaten:
        return []
    value, seed, label = max(beaten)
    return [
        f"  NOTE: {label} seed {seed} launched a configuration worth {value:.1f} tok/s noise-free, "
        f"{value / entry['best']:.1%} of the stored best: re-establish it with "
        f"python benchmarks/space_best.py --space {name} --start '<that configuration as JSON>'"
    ]


def _space_title(name: str, e: dict[str, Any]) -> str:
    obj = e["objective"]
    what = obj["name"]
    if obj.get("min_single_stream") is not None:
        what += f", single-stream >= {obj['min_single_stream']:g}"
    if obj["name"] == "goodput":
        what += f", TTFT <= {obj['ttft_s']:g} s, TPOT <= {obj['tpot_ms']:g} ms"
    return (
        f"{name} [{e['split']}]: {e['model']} on {e['hardware']}, {what}; {e['parameters']} parameters, "
        f"{e['start_points'] or 'no'} start points; best {e['best']:.1f} tok/s"
    )


def _seeds_text(summary: dict[str, Any]) -> str:
    """How many seeds each strategy ran per space (the peers may run fewer than the tuner)."""
    counts = sorted(
        {(label, row["seeds"]) for e in summary["spaces"].values() for label, row in e["rows"].items()}
    )
    tuner = {n for label, n in counts if label == "tuner"}
    peers = {n for label, n in counts if label != "tuner"}
    if not peers or peers == tuner:
        return f"{', '.join(map(str, sorted(tuner)))} seeds per strategy and space"
    return (
        f"{', '.join(map(str, sorted(tuner)))} seeds per space for the tuner, "
        f"{', '.join(map(str, sorted(peers)))} for each peer"
    )


def text(summary: dict[str, Any]) -> str:
    b = summary["budget"]
    lines = [
        f"Benchmark suite: budget {b}, {_seeds_text(summary)}, noise on; recommendations "
        "scored noise-free against each space's best. Columns: seeds within 2% of the best, seeds that "
        "launched a configuration within 2% of it at all, seeds within 5%, median and "
        "worst recommendation (share of best), median trials (with a verdict) until within 2% (seeds that "
        "got there), studies whose recommendation is worth nothing noise-free (none, or one below the "
        "floor), share of trials that were rule-rejected "
        "proposals, mean ms per trial in the sampler.",
        f"TUNE: {', '.join(summary['tune'])}",
        f"JUDGED: {', '.join(summary['judged'])}",
        "",
    ]
    for name, e in summary["spaces"].items():
        lines += [
            _space_title(name, e),
            format_table(SPACE_HEADER, space_rows(e, b)),
            *_stopped_note(e),
            *_best_note(name, e),
            "",
        ]
    for split, agg in summary["aggregate"].items():
        if agg:
            lines += [
                f"Aggregate over {split} (seeds pooled):",
                format_table(AGG_HEADER, agg_rows(agg, b)),
                "",
            ]
    lines.append(format_targets(summary["targets"]))
    return "\n".join(lines)


def markdown(summary: dict[str, Any]) -> str:
    """The aggregate over TUNE and over JUDGED and the targets, as Markdown (the README's)."""
    b = summary["budget"]
    lines = [f"Budget {b}, {_seeds_text(summary)}, noise on ({summary['machine']}).", ""]
    for split, agg in summary["aggregate"].items():
        if agg:
            names = summary["tune"] if split == "TUNE" else summary["judged"]
            lines += [
                f"**{split}** ({', '.join(f'`{n}`' for n in names)}):",
                "",
                markdown_table(AGG_HEADER, agg_rows(agg, b)),
                "",
            ]
    lines.append(format_targets(summary["targets"], markdown=True))
    return "\n".join(lines)


def write_readme(md: str, readme: Path = ROOT / "README.md") -> None:
    """Replace the README's generated aggregate (between :data:`README_BEGIN` and :data:`README_END`)."""
    text_ = readme.read_text()
    pattern = re.compile(re.escape(README_BEGIN) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text_):
        raise SystemExit(f"{readme} has no {README_BEGIN} ... {README_END} section")
    readme.write_text(pattern.sub(lambda _: f"{README_BEGIN}\n{md}\n{README_END}", text_))


# --- main ----------------------------------------------------------------------------------
def gp_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "scipy"))


def jobs(
    spaces: Sequence[str], strategies: Sequence[str], seeds: int, budget: int, peer_seeds: int | None = None
) -> list[Job]:
    """The studies of a run: ``seeds`` per space for the tuner, ``peer_seeds`` (default the
    same) for each peer."""
    out = []
    for name in spaces:
        space = space_named(name)
        for label in strategies:
            strategy = STRATEGIES[label]
            n = seeds if label == "tuner" or peer_seeds is None else min(seeds, peer_seeds)
            if applies(strategy, space):
                out += [Job(strategy, seed, budget, space=name) for seed in range(n)]
    return out


def _csv(text_: str) -> list[str]:
    return [x.strip() for x in text_.split(",") if x.strip()]


def spaces_arg(ap: argparse.ArgumentParser, value: str) -> list[str]:
    """The suite's spaces a ``--spaces a,b`` value names, in its order; an argparse error
    (exit 2) naming the ones the suite does not know."""
    names = _csv(value)
    unknown = sorted(set(names) - set(SPACES))
    if unknown:
        ap.error(f"unknown spaces: {', '.join(unknown)} (known: {', '.join(SPACES)})")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--peer-seeds", type=int, default=None, help="seeds per space for each peer (default: --seeds)"
    )
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--spaces", default=",".join(SPACES), help="comma-separated subset of the suite's spaces")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--fresh", action="store_true", help="ignore the cache of study results")
    ap.add_argument("--markdown", action="store_true", help="also print the aggregate as Markdown")
    ap.add_argument(
        "--readme",
        action="store_true",
        help="write the Markdown aggregate into README.md and keep its studies in "
        "benchmarks/results/suite_studies.json.gz",
    )
    args = ap.parse_args(argv)
    spaces, strategies = _csv(args.spaces), _csv(args.strategies)
    for kind, given, known in (("spaces", spaces, SPACES), ("strategies", strategies, STRATEGIES)):
        unknown = sorted(set(given) - set(known))
        if unknown:
            ap.error(f"unknown {kind}: {', '.join(unknown)} (known: {', '.join(known)})")
    if "gp" in strategies and not gp_available():
        print("gp left out: Optuna's GPSampler needs torch and scipy (pip install -e '.[bench]')")
        strategies.remove("gp")
    if "tuner" not in strategies:
        strategies.insert(0, "tuner")
    bests = {name: load_best(name, suite=True)["value"] for name in spaces}
    todo = jobs(spaces, strategies, args.seeds, args.budget, args.peer_seeds)
    # Once, before any study runs: the code key reads the tuner modules loaded so far.
    keys = cache_keys(todo)
    # --fresh serves nothing stored: the archive is not even read then.
    results = run_cached(todo, args.jobs, args.fresh, None if args.fresh else read_archive(), keys)
    summary = analyse(results, bests, args.budget, args.seeds)
    write_result("suite", summary)
    print(text(summary))
    if args.markdown or args.readme:
        md = markdown(summary)
        if args.markdown:
            print("\n" + md)
        if args.readme:
            write_readme(md)
            write_archive({keys[r.job.key]: r for r in results})
    return summary


if __name__ == "__main__":
    main()
