"""The tuner's SGLang launch rules against the real SGLang package.

The pinned ``sglang`` release lives in ``.venv-sglang/`` (built by ``bash
tests/sglang_env.sh``: the package without its CUDA dependency tree, a CPU torch and the
few pure-Python modules its argument code imports). A child process with that
interpreter runs SGLang's own argparse, ``ServerArgs`` resolution and
``check_server_args`` (``tuner/preflight/sglang_probe.py``). Stand-ins, because no GPU
is here: the probe's ``--fake-host`` fakes the device queries (8x RTX PRO 6000, 96 GiB,
compute capability 12.0) and stubs the GPU-only kernel modules; the model is a
Kimi-shaped ``config.json`` without weights (tests/sglang_model).

Over the reference space's structural grid (layout, expert parallelism, dense TP, EPLB,
DeepEP, CUDA graphs, and an NCCL pair that trips the space's own constraint), each
configuration is judged by the tuner (``Space.check``) and by SGLang. The counts are
printed; the tuner may never accept what SGLang refuses (a wasted launch on the GPU
host), and may refuse what SGLang accepts only for the space's own constraints. Where
both accept, the server the tuner expects (its silent rewrites: ep forced to tp by an
all-to-all backend) is the one SGLang resolves.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.engines import sglang
from tuner.engines.base import KV_CACHE_KEY, LaunchSpec
from tuner.measurers import LauncherMeasurer, SimMeasurer
from tuner.objectives import Objective
from tuner.preflight import HostPreflight, Verdict, adopt_host_release, probe
from tuner.space import Space, load_space
from tuner.study import Search

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-sglang"
PYTHON = VENV / "bin" / "python"
#: Written by tests/sglang_env.sh once the environment imports SGLang's argument code.
STAMP = VENV / ".tuner-sglang-stamp"
MODEL_CONFIG = ROOT / "tests" / "sglang_model"
SPACE_FILE = ROOT / "search_spaces" / "kimi-k2.6-8x-rtx-pro-6000.yaml"

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not STAMP.is_file(),
        reason=f"no SGLang environment at {VENV}: run `bash tests/sglang_env.sh` first (~4 minutes)",
    ),
]


def structural_space() -> Space:
    """The reference space with its structure left whole and the rest pinned to one value:
    every launch-rule question the space asks, without the batching/NCCL fan-out that
    SGLang's rules never read. The NCCL channel pair keeps one combination that breaks
    the space's own constraint (min 16 above max 8)."""
    data: dict[str, Any] = yaml.safe_load(SPACE_FILE.read_text())
    params = data["parameters"]
    params["max_running_requests"]["choices"] = [256]
    params["num_continuous_decode_steps"]["choices"] = [8]
    params["mem_fraction_static"] = {
        "flag": "--mem-fraction-static",
        "type": "categorical",
        "choices": [0.88],
    }
    for name in ("nccl_proto", "nccl_nthreads", "nccl_buffsize"):
        del params[name]
    params["nccl_min_nchannels"]["choices"] = [16]
    params["nccl_max_nchannels"]["choices"] = [None, 8]
    data["start"] = []
    return Space.from_dict(data, source=str(SPACE_FILE), base_dir=SPACE_FILE.parent)


def sglang_verdicts(argvs: list[tuple[str, ...]]) -> dict[tuple[str, ...], Verdict]:
    """SGLang's verdict per distinct command line, two probe processes side by side."""
    halves = [argvs[0::2], argvs[1::2]]
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(
            pool.map(
                lambda chunk: probe(str(PYTHON), chunk, fake_host=True, model_config=str(MODEL_CONFIG)),
                halves,
            )
        )
    out: dict[tuple[str, ...], Verdict] = {}
    for chunk, verdicts in zip(halves, answers, strict=True):
        out.update(zip(chunk, verdicts, strict=True))
    return out


def test_the_tuner_never_accepts_what_sglang_refuses(capsys: pytest.CaptureFixture[str]):
    space = structural_space()
    assert space.engine.version == "0.5.23"  # the space's engine_version
    configs = list(space.all_configs())
    rendered = [tuple(space.render(c).argv) for c in configs]
    verdicts = sglang_verdicts(sorted(set(rendered)))

    counts: Counter[str] = Counter()
    wasted: list[str] = []  # tuner accepts, SGLang refuses: a launch that fails on the GPU host
    over_strict: list[str] = []  # tuner refuses, SGLang accepts, for a reason of the tuner's rules
    different_server: list[str] = []
    resolved_servers: set[str] = set()
    for config, argv in zip(configs, rendered, strict=True):
        reasons = space.check(config)
        verdict = verdicts[argv]
        if not reasons and verdict.ok:
            counts["both accept"] += 1
            expected = space.engine.resolve(list(argv), space.gpu_count)
            got = verdict.resolved
            if (expected.tp_size, expected.ep_size, expected.pp_size) != (
                got["tp_size"],
                got["ep_size"],
                got["pp_size"],
            ):
                different_server.append(f"{' '.join(argv)}: tuner {expected.label()}, SGLang {got}")
            resolved_servers.add(json.dumps(got, sort_keys=True))
        elif reasons and not verdict.ok:
            counts["both reject"] += 1
        elif not reasons:
            counts["tuner accepts, SGLang rejects"] += 1
            wasted.append(f"{' '.join(argv)}: {verdict.message}")
        else:
            counts["tuner rejects, SGLang accepts"] += 1
            if not all(r.startswith("constraint: ") for r in reasons):
                over_strict.append(f"{' '.join(argv)}: {reasons}")
            else:
                counts["  of which the space's own constraints"] += 1

    lines = [
        f"SGLang {space.engine.version} vs the tuner's rules, {len(configs)} configurations "
        f"({len(verdicts)} distinct command lines, {len(resolved_servers)} distinct resolved servers):"
    ]
    for label in (
        "both accept",
        "both reject",
        "tuner accepts, SGLang rejects",
        "tuner rejects, SGLang accepts",
        "  of which the space's own constraints",
    ):
        lines.append(f"  {label:40s} {counts[label]:6d}")
    with capsys.disabled():  # the counts belong in the test run's output, passed or not
        print("\n" + "\n".join(lines))
    assert counts["both accept"] > 0 and counts["both reject"] > 0
    assert wasted == [], "\n".join(wasted[:10])
    assert over_strict == [], "\n".join(over_strict[:10])
    assert different_server == [], "\n".join(different_server[:10])
    assert counts["tuner rejects, SGLang accepts"] == counts["  of which the space's own constraints"] > 0


def test_sglang_refuses_the_old_graph_flag_as_the_tuner_says():
    """The spelling of an older space file: both refuse it, with SGLang's own message."""
    argv = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/Kimi-K2.6",
        "--tp-size",
        "8",
        "--cuda-graph-max-bs",
        "256",
    ]
    (verdict,) = probe(str(PYTHON), [argv], fake_host=True, model_config=str(MODEL_CONFIG))
    with pytest.raises(Exception) as tuner_says:
        sglang.ENGINE.check(argv, 8)
    assert not verdict.ok
    assert verdict.message == str(tuner_says.value).removeprefix("invalid-args: ")
    assert verdict.message.startswith(
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match"
    )


def test_the_shipped_flag_table_is_the_installed_release():
    """The tuner's table for 0.5.23 lists exactly the options the real package registers."""
    import subprocess

    from tuner.preflight import PROBE_SCRIPT

    done = subprocess.run(
        [str(PYTHON), str(PROBE_SCRIPT), "--fake-host", "--dump-options"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(done.stdout) == sglang.release_table("0.5.23")


class _SimWithRealPreflight(SimMeasurer):
    """The simulator for the measurements, with the real SGLang's pre-flight: the GPU host's
    SGLang is stood in for by the fake-host probe of ``.venv-sglang``."""

    name = "sim+preflight"

    def __init__(self, space: Space) -> None:
        super().__init__(space.hardware, space.model, noise=0.0)
        self.host = HostPreflight(fake_host=True, model_config=str(MODEL_CONFIG))
        self.measured: list[list[str]] = []

    def preflight(self, spec: LaunchSpec) -> Verdict | None:
        return self.host.verdict(spec)

    def measure(self, spec: LaunchSpec, *args: Any, **kwargs: Any) -> Any:
        self.measured.append(list(spec.argv))
        return super().measure(spec, *args, **kwargs)


def test_the_preflight_turns_sglangs_refusal_into_an_infeasible_trial(workdir: Path):
    """A refusal the tuner's rules do not know (chunked prefill not a multiple of the page
    size) costs no launch: the trial is infeasible with SGLang's own message, and the
    accepted trial carries the settings SGLang resolved."""
    path = workdir / "pages.yaml"
    path.write_text(
        textwrap.dedent(f"""
        name: pages
        engine: sglang
        engine_version: "0.5.23"
        hardware: rtx-pro-6000-pcie-x8
        model: kimi-k2.6
        launch:
          command: [{PYTHON}, -m, sglang.launch_server]
          flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8, --page-size: 64,
                  --mem-fraction-static: 0.88, --max-running-requests: 128}}
        parameters:
          chunked_prefill_size: {{flag: --chunked-prefill-size, type: categorical, choices: [8192, 100]}}
        workload: {{kind: burst, levels: [1, 64], max_tokens: 256, single_max_tokens: 64}}
        start:
          - {{chunked_prefill_size: 8192}}
          - {{chunked_prefill_size: 100}}
        """)
    )
    space = load_space(path)
    backend = _SimWithRealPreflight(space)
    search = Search(space, backend, study_name="pages", storage="sqlite:///studies/pages.db",
                    objective=Objective(), seed=0, budget=2)  # fmt: skip
    search.run()
    trials = search.study.get_trials()
    # The budget counts verdicts about configurations; a refusal before launch is no launch.
    ok = next(t for t in trials if t.params["chunked_prefill_size"] == 8192)
    refused = next(t for t in trials if t.params["chunked_prefill_size"] == 100)
    assert ok.user_attrs["outcome"] == "complete"
    assert ok.user_attrs["preflight"]["resolved"]["chunked_prefill_size"] == 8192
    # SGLang's own default for the decode graphs: the running-request cap
    assert ok.user_attrs["preflight"]["resolved"]["cuda_graph_decode_max_bs"] == 128
    assert refused.user_attrs["outcome"] == "infeasible"
    assert refused.user_attrs["reason"] == (
        "invalid-args: AssertionError: chunked_prefill_size must be divisible by page_size"
    )
    assert refused.user_attrs["server_s"] == 0.0
    assert len(backend.measured) == 1  # only the accepted configuration was launched


def test_the_release_is_asked_on_the_host(workdir: Path):
    """A space without engine_version takes the host's release; one naming another is kept
    and the user told. Asked through the local launcher's host (this machine)."""

    def space_file(version_line: str) -> Space:
        path = workdir / "asked.yaml"
        path.write_text(
            textwrap.dedent(f"""
            name: asked
            engine: sglang
            {version_line}
            hardware: rtx-pro-6000-pcie-x8
            model: kimi-k2.6
            launch:
              command: [{PYTHON}, -m, sglang.launch_server]
              flags: {{--model-path: /models/Kimi-K2.6, --tp-size: 8}}
            """)
        )
        return load_space(path)

    backend = LauncherMeasurer("local", log_dir=workdir / "logs")
    space = space_file("")
    space.engine = space.engine.for_version("0.5.22")  # as if the adapter's default were older
    assert adopt_host_release(space, backend) == (
        "the host runs SGLang 0.5.23: judging launches by the flags of 0.5.23"
    )
    assert space.engine.version == "0.5.23"
    pinned = space_file('engine_version: "0.5.22"')
    note = adopt_host_release(pinned, backend)
    assert note is not None and "engine_version is 0.5.22 but the host runs SGLang 0.5.23" in note
    assert pinned.engine.version == "0.5.22"


def _site_packages() -> Path:
    out = subprocess.run(
        [str(PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return Path(out.stdout.strip())


def _printed(source: str, marker: str, numbers: list[str]) -> str:
    """The line a ``logger.info(f"..." f"...")`` call containing ``marker`` prints: its
    f-string pieces joined, each ``{...:.2f}`` filled with the next of ``numbers`` and any
    other field with a word."""
    at = source.index(marker)
    close = re.compile(r"\n\s*\)").search(source, at)
    assert close is not None
    call = source[source.rindex("logger.info(", 0, at) : close.start()]
    text = "".join(re.findall(r'f?"((?:[^"\\]|\\.)*)"', call))
    text = re.sub(r"\{[^{}]*:\.2f\}", lambda _: numbers.pop(0), text)
    # A device switch ({'available_cpu_mem' if self.device == 'cpu' else ...}): a GPU's.
    text = re.sub(r"\{'[^']*' if [^{}]* else '([^']*)'\}", r"\1", text)
    return re.sub(r"\{[^{}]*\}", "x", text)


def test_the_memory_report_reads_the_installed_releases_own_lines():
    """The log lines in which SGLang says how much GPU memory a started server has left
    (the end of each CUDA-graph capture, the scheduler's capacity line) are taken from the
    installed release's source, printed as two ranks print them, and read by the memory
    report every launcher uses: the tightest rank's memory left, the largest rank's graphs
    (decode and prefill summed)."""
    srt = _site_packages() / "sglang" / "srt"
    setup = (srt / "model_executor" / "model_runner_components" / "cuda_graph_setup.py").read_text()
    scheduler = (srt / "managers" / "scheduler.py").read_text()
    lines = []
    for rank, decode, prefill, left in (("TP0", "1.93", "0.40", "8.16"), ("TP1", "1.95", "0.50", "7.52")):
        stamp = f"[2026-12-06 00:00:00 {rank}] "
        lines.append(stamp + _printed(setup, "{capture_name} CUDA graph end", ["3.10", prefill, "9.00"]))
        lines.append(
            stamp + _printed(setup, "{graph_backend[model_runner.device]} end", ["16.40", decode, left])
        )
        lines.append(stamp + _printed(scheduler, 'f"max_total_num_tokens=', [left]))
    report = sglang.memory_report("\n".join(lines))
    assert report == {"available_gpu_mem_gib": 7.52, "cuda_graph_mem_gib": 2.45}, lines
    # The scheduler's line alone (CUDA graphs off) still says what is left.
    assert sglang.memory_report(lines[2]) == {"available_gpu_mem_gib": 8.16}, lines[2]


def test_the_memory_report_reads_the_kv_cache_pool_from_the_installed_releases_own_lines():
    """The KV cache pool each rank allocated, as the installed release logs it (an MLA pool's
    one size, another model's K and V sizes; a draft model's pool is not the server's), and
    the size it resized the pool to after the CUDA graphs (a ``%``-formatted line): the
    smallest rank's pool, the resized one where the pool was resized."""
    srt = _site_packages() / "sglang" / "srt"
    pool = (srt / "mem_cache" / "memory_pool.py").read_text()
    resize = (srt / "model_executor" / "model_runner_components" / "kv_pool_runtime.py").read_text()

    def pool_line(rank: str, marker: str, sizes: list[str], name: str = "KV Cache") -> str:
        text = _printed(pool, marker, sizes)
        assert text.startswith("x is allocated."), text  # the pool's name is a field
        return f"[2026-12-06 00:00:00 {rank}] {name}{text[1:]}"

    mla = pool_line("TP0", "KV size: {kv_size_GB:.2f} GB", ["17.21"])
    mha = pool_line("TP1", "V size: {v_size_GB:.2f} GB", ["8.40", "8.40"])
    draft = pool_line("TP0", "KV size: {kv_size_GB:.2f} GB", ["1.00"], name="Draft KV Cache")
    assert sglang.memory_report(f"{mla}\n{mha}")[KV_CACHE_KEY] == 16.8
    assert sglang.memory_report(f"{draft}\n{mla}")[KV_CACHE_KEY] == 17.21
    at = resize.index("Post-capture KV sizing: KV cache allocated")
    close = re.compile(r"\n\s*\)").search(resize, at)
    assert close is not None
    call = resize[resize.rindex("logger.info(", 0, at) : close.start()]
    fmt = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', call))
    resized = "[2026-12-06 00:00:00 TP0] " + fmt % ("torch.bfloat16", 270000, 18.02, 3.1)
    assert sglang.memory_report(f"{mla}\n{resized}")[KV_CACHE_KEY] == 18.02
