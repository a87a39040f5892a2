"""The vLLM adapter without a vLLM: flag parsing, launch rules, log classification, spaces.

The log excerpts are vLLM 0.32's own output (CPU build), trimmed to the lines that matter;
``tests/test_vllm_e2e.py`` checks the same classification against a live server.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner import engines
from tuner.engines import vllm
from tuner.engines.base import Engine, LaunchSpec
from tuner.failures import LaunchFailure
from tuner.launchers.classify import classify_failure
from tuner.space import load_space

REPO = Path(__file__).resolve().parent.parent
MODULE = ["python3", "-m", "vllm.entrypoints.openai.api_server"]


def test_registered_engine_and_its_protocol():
    engine = engines.get("vllm")
    assert engine is vllm.ENGINE
    assert isinstance(engine, Engine)
    assert "vllm" in engines.available()
    assert (engine.health_path, engine.default_port, engine.simulated) == ("/health", 8000, False)
    assert re.search(engine.ready_pattern, "INFO:     Application startup complete.")
    assert re.search(engine.ready_pattern, "INFO:     Uvicorn running on http://127.0.0.1:8000")
    assert not re.search(engine.ready_pattern, "INFO:     Waiting for application startup.")
    spec = engine.render(MODULE, {"--max-num-seqs": 8, "--enforce-eager": True, "--x": False}, {"A": 1})
    argv = [*MODULE, "--max-num-seqs", "8", "--enforce-eager"]
    assert spec == LaunchSpec(argv=argv, env={"A": "1"}, engine="vllm")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [*MODULE, "--model", "/m", "-tp", "8", "--enable-expert-parallel"],
            {"model": "/m", "tensor_parallel_size": 8, "enable_expert_parallel": True},
        ),
        (
            ["vllm", "serve", "/m", "--pipeline-parallel-size", "2", "-dp", "2"],
            {"model": "/m", "pipeline_parallel_size": 2, "data_parallel_size": 2},
        ),
        (["/opt/venv/bin/vllm", "serve", "--model", "/m"], {"model": "/m"}),
        (
            [*MODULE, "--max_num_seqs=64", "--max-num-batched-tokens", "8k"],
            {"max_num_seqs": 64, "max_num_batched_tokens": 8000},
        ),
        (
            [*MODULE, "--max-num-batched-tokens=2K", "--max-model-len", "auto"],
            {"max_num_batched_tokens": 2048, "max_model_len": -1},
        ),
        (
            [*MODULE, "--no-enable-prefix-caching", "--enable-chunked-prefill", "--enforce-eager"],
            {"enable_prefix_caching": False, "enable_chunked_prefill": True, "enforce_eager": True},
        ),
        (
            [*MODULE, "--kv-cache-dtype", "fp8", "--dtype", "float32", "--gpu-memory-utilization", "0.9"],
            {"kv_cache_dtype": "fp8", "dtype": "float32", "gpu_memory_utilization": 0.9},
        ),
        (["python", "-m", "wrapper", "--", "--port", "9000", "--unknown-flag", "x"], {"port": 9000}),
        (MODULE, {"enable_prefix_caching": None, "enable_chunked_prefill": None, "max_num_seqs": None}),
    ],
)
def test_parse_reads_vllms_spellings(argv, expected):
    args = vllm.parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--max-num-seqs x", "api_server.py: error: argument --max-num-seqs: invalid int value: 'x'"),
        ("--kv-cache-dtype fp9", "argument --kv-cache-dtype: invalid choice: 'fp9'"),
        ("--max-num-batched-tokens 2.5K", "Decimals are not allowed with binary suffixes like K"),
        (
            "--tensor-parallel-size 0",
            "validation error for ParallelConfig: tensor_parallel_size: Input should be greater than or equal",
        ),
        (
            "--gpu-memory-utilization 1.5",
            "validation error for CacheConfig: gpu_memory_utilization: Input should be less than or equal to 1",
        ),
        ("--gpu-memory-utilization 0", "gpu_memory_utilization: Input should be greater than 0"),
        (
            "--max-num-seqs 256 --max-num-batched-tokens 128",
            "ValueError: max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256).",
        ),
        (
            "--no-enable-chunked-prefill --max-model-len 8192 --max-num-batched-tokens 4096",
            "ValueError: max_num_batched_tokens (4096) is smaller than max_model_len (8192).",
        ),
        ("-tp 8 --enable-eplb", "ValueError: enable_expert_parallel must be True to use EPLB."),
        ("--enable-expert-parallel", "tuner rule: --enable-expert-parallel needs tensor_parallel_size > 1"),
        (
            "-tp 8 -pp 2",
            "ValueError: World size (16) is larger than the number of available GPUs (8) in this node.",
        ),
        ("-dp 4 -tp 4", "the layout needs 16 GPUs (data_parallel_size 4 x tensor_parallel_size 4"),
    ],
)
def test_launch_rules_refuse_with_vllms_wording(flags, message):
    with pytest.raises(LaunchFailure) as exc:
        vllm.ENGINE.check([*MODULE, *flags.split()], 8)
    assert exc.value.reason == "invalid-args"
    assert message in exc.value.message


@pytest.mark.parametrize(
    "flags",
    [
        "-tp 8",
        "-tp 8 --enable-expert-parallel --enable-eplb",
        "-dp 8 --enable-expert-parallel",
        "-tp 4 -pp 2 --max-num-seqs 512 --max-num-batched-tokens 512",
        "--no-enable-chunked-prefill --max-num-batched-tokens 4096",  # max_model_len unknown here
        "--max-num-seqs 1024 --gpu-memory-utilization 1.0",
    ],
)
def test_launch_rules_accept_what_vllm_accepts(flags):
    vllm.ENGINE.check([*MODULE, *flags.split()], 8)


def test_labels_name_the_layout():
    assert vllm.parse_args([*MODULE, "-tp", "8"]).label() == "TP8"
    assert vllm.parse_args([*MODULE, "-dp", "8", "-ep"]).label() == "DP8 EP"
    assert vllm.parse_args([*MODULE, "-tp", "4", "-pp", "2", "--enforce-eager"]).label() == "TP4 PP2 eager"
    assert vllm.parse_args([*MODULE, "-tp", "8", "-ep", "--enable-eplb"]).label() == "TP8 EP EPLB"


ULIMIT = (
    "(APIServer pid=1) WARNING 11-29 09:09:54 [system_utils.py:255] Found ulimit of 20000 and failed to "
    "automatically increase with error current limit exceeds maximum limit. This can cause fd limit "
    "errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n\n"
)
TRACEBACK = 'Traceback (most recent call last):\n  File "arg_utils.py", line 2617, in create_engine_config\n'


@pytest.mark.parametrize(
    ("log", "reason", "line"),
    [
        (
            ULIMIT + TRACEBACK + "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SchedulerConfig\n  Value error, max_num_batched_tokens (4) must be greater than or equal to "
            "max_num_seqs (8). [type=value_error]\n",
            "invalid-args",
            "Value error, max_num_batched_tokens (4)",
        ),
        (
            ULIMIT + TRACEBACK + "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "CacheConfig\ngpu_memory_utilization\n  Input should be less than or equal to 1 "
            "[type=less_than_equal, input_value=1.5, input_type=float]\n",
            "invalid-args",
            "Input should be less than or equal to 1",
        ),
        (
            ULIMIT + "usage: api_server.py [-h] [--model MODEL]\napi_server.py: error: argument "
            "--max-num-seqs: invalid int value: 'x'\n",
            "invalid-args",
            "api_server.py: error: argument",
        ),
        (
            ULIMIT
            + "(EngineCore pid=2) ERROR [core.py:1510] EngineCore failed to start.\n"
            + TRACEBACK
            + "(EngineCore pid=2) ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.\nRuntimeError: Engine core "
            "initialization failed. See root cause above.\n",
            "oom",
            "No available memory for the cache blocks",
        ),
        (
            TRACEBACK + "ValueError: To serve at least one request with the model's max seq len (163840), "
            "(10.5 GiB KV cache is needed, which is larger than the available KV cache memory (2.1 GiB).\n",
            "oom",
            "KV cache is needed, which is larger than the available KV cache memory",
        ),
        (
            TRACEBACK + "ValueError: Free memory on device cuda:0 (20.1/139.8 GiB) on startup is less than "
            "desired GPU memory utilization (0.92, 128.6 GiB).\n",
            "oom",
            "is less than desired GPU memory",
        ),
        (
            TRACEBACK + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
            "oom",
            "CUDA out of memory",
        ),
        (
            "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already "
            "in use\n",
            "port-busy",
            "address already in use",
        ),
        (TRACEBACK + "RuntimeError: NCCL error: unhandled system error\n", "crash", None),
        (ULIMIT + "INFO:     Started server process [1]\n", None, None),
    ],
)
def test_failure_patterns_classify_vllm_logs(log, reason, line):
    got = vllm.ENGINE.classify(log)
    if reason is None or reason == "crash":
        assert got is None or got[0] == "crash"
    else:
        assert got is not None and got[0] == reason, got
        assert line in got[1]


def test_a_server_that_was_ready_and_then_died_is_a_crash_not_invalid_args():
    log = "INFO:     Application startup complete.\n" + TRACEBACK + "ValueError: something at run time\n"
    failure = classify_failure(
        returncode=1, log_text=log, patterns=vllm.FAILURE_PATTERNS, ready_pattern=vllm.READY_PATTERN
    )
    assert failure.reason == "crash"


def test_packaged_vllm_spaces_load_and_their_start_points_launch():
    gpu = load_space("vllm-deepseek-v3-8x-h200")
    assert (gpu.engine.name, gpu.gpu_count) == ("vllm", 8)
    for point in gpu.start_points():
        assert gpu.check(point) == []
    labels = [vllm.parse_args(gpu.render(p).argv).label() for p in gpu.start_points()]
    assert labels == ["TP8", "TP8 EP", "DP8 EP"]
    unit = gpu.unit(gpu.start_points()[1])
    assert "-m vllm.entrypoints.openai.api_server" in unit and "--enable-expert-parallel" in unit

    cpu = load_space("vllm-tiny-llama-cpu")
    assert (cpu.engine.name, cpu.gpu_count, cpu.grid_size()) == ("vllm", 1, 6)
    assert all(cpu.check(p) == [] for p in cpu.all_configs())
    spec = cpu.render({"max_num_seqs": 8, "prefix_caching": "off"})
    assert spec.argv[-3:] == ["--max-num-seqs", "8", "--no-enable-prefix-caching"]
    assert spec.env["HF_HUB_OFFLINE"] == "1" and spec.env["VLLM_HOST_IP"] == "127.0.0.1"
    # A tensor-parallel launch needs more devices than the CPU host profile has.
    with pytest.raises(LaunchFailure, match=r"World size \(2\) is larger"):
        cpu.engine.check([*spec.argv, "-tp", "2"], cpu.gpu_count)


def test_the_memory_report_reads_the_kv_cache_memory_from_the_installed_vllms_own_line():
    """The KV cache memory each GPU worker logs after profiling, printed from the installed
    vLLM's own source as two tensor-parallel workers print it: the smaller worker's is the
    pool the memory fraction's steps are weighed against; a log without it says nothing."""
    source = next(
        (REPO / ".venv-vllm" / "lib").glob("python3*/site-packages/vllm/v1/worker/gpu_worker.py"), None
    )
    if source is None:
        pytest.skip("no vLLM environment: run `bash tests/vllm_env.sh` first")
    text = source.read_text()
    at = text.index('"Available KV cache memory')
    fmt = re.match(r'"((?:[^"\\]|\\.)*)"', text[at:])
    assert fmt is not None
    lines = [
        f"(Worker_TP{rank} pid={100 + rank}) INFO 12-06 00:00:00 [gpu_worker.py:760] " + fmt.group(1) % size
        for rank, size in ((0, "31.42"), (1, "30.87"))
    ]
    assert vllm.ENGINE.memory_report("\n".join(lines)) == {"kv_cache_gib": 30.87}
    assert vllm.ENGINE.memory_report("INFO:     Application startup complete.") == {}
