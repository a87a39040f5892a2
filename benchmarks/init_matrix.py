"""``tuner init`` and a 20-trial search for every fixture model on every fixture host.

    python benchmarks/init_matrix.py [--budget 20] [--predictions 120]

For each model (tests/fixtures/model_configs) and host (tests/fixtures/nvidia_smi, the
four of the test matrix and B200): profile both with the CLI, write the space with ``tuner init``,
then run ``tuner search --space FILE --budget N`` on the simulator and record the best
trial's peak and layout; a model that fits no layout of the host records init's message.
The tests run a representative subset (tests/test_init.py); this runs all of them.

Results: benchmarks/results/init_matrix.json.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import machine, write_result
from _tables import format_table

ROOT = Path(__file__).parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
#: Every fixture model (the seven of the test matrix plus the INT4 and FP8 variants).
MODELS = tuple(sorted(p.parent.name for p in (FIXTURES / "model_configs").glob("*/config.json")))
HOSTS = ("8x-h100-sxm", "8x-h200-sxm", "8x-rtx-pro-6000", "4x-l40s", "8x-b200")


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True, cwd=cwd)


#: Flags that name a layout, as they appear in the best trial's launch command.
LAYOUT_FLAGS = ("--tp-size", "--pp-size", "--ep-size", "--dp-size")


def _layout(flags_line: str) -> str:
    words = shlex.split(flags_line.partition("flags:")[2])
    return " ".join(f"{w} {words[i + 1]}" for i, w in enumerate(words[:-1]) if w in LAYOUT_FLAGS)


def run(budget: int, predictions: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for hw in HOSTS:
            d = FIXTURES / "nvidia_smi" / hw
            saved = {"--query-file": d / "query-gpu.csv", "--topo-file": d / "topo-m.txt"}
            done = tuner(
                "profile", "host", *(str(x) for kv in saved.items() for x in kv), "-o", f"{hw}.yaml", cwd=work
            )
            assert done.returncode == 0, done.stderr
        for model in MODELS:
            for hw in HOSTS:
                start = time.monotonic()
                space = f"{model}-{hw}.space.yaml"
                init = tuner(
                    "init",
                    "--model",
                    str(FIXTURES / "model_configs" / model),
                    "--host",
                    f"{hw}.yaml",
                    "--predictions",
                    str(predictions),
                    "--name",
                    f"{model}-{hw}",
                    "-o",
                    space,
                    cwd=work,
                )
                row: dict[str, Any] = {"model": model, "host": hw}
                if init.returncode != 0:
                    row.update(outcome="does not fit", detail=init.stderr.strip().splitlines()[-1])
                else:
                    search = tuner("search", "--space", space, "--budget", str(budget), "--quiet", cwd=work)
                    best = next((ln for ln in search.stdout.splitlines() if ln.startswith("best:")), "")
                    flags = next((ln for ln in search.stdout.splitlines() if "flags:" in ln), "")
                    layout = _layout(flags)
                    row.update(
                        outcome="searched"
                        if search.returncode == 0 and f"{budget} trials" in search.stdout
                        else f"search failed ({search.returncode})",
                        detail=best.removeprefix("best: ") + (f" [{layout}]" if layout else ""),
                    )
                row["seconds"] = round(time.monotonic() - start, 1)
                rows.append(row)
                print(f"{model:18s} {hw:16s} {row['outcome']}: {row['detail']}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--predictions", type=int, default=120)
    args = ap.parse_args()
    rows = run(args.budget, args.predictions)
    print(
        format_table(
            ["model", "host", "outcome", "s"],
            [[r["model"], r["host"], r["outcome"], r["seconds"]] for r in rows],
        )
    )
    path = write_result(
        "init_matrix",
        {"machine": machine(), "budget": args.budget, "predictions": args.predictions, "rows": rows},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
