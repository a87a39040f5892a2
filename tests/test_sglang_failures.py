"""SGLang's real failure wording lands in the right failure class.

Each log below is SGLang 0.5.23's own wording (the message templates of its source:
``server_args.py``, ``utils/network.py``, ``entrypoints/engine.py``,
``distributed/bootstrap.py``, ``model_executor/...``), filled in as a failing launch on
the reference host prints them, and run through the classifier every launcher uses.
"""

from __future__ import annotations

import pytest

from tuner.engines.sglang import ENGINE
from tuner.launchers.classify import classify_failure

TRACEBACK = 'Traceback (most recent call last):\n  File "/opt/sglang/sglang/launch_server.py", line 32\n'

CASES = [
    pytest.param(
        2,
        "usage: sglang serve [-h] [--model-path MODEL_PATH] [--tokenizer-path TOKENIZER_PATH]\n"
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n",
        "invalid-args",
        id="argparse-ambiguous-prefix",
    ),
    pytest.param(
        2,
        "usage: sglang serve [-h] ...\nsglang serve: error: unrecognized arguments: --enable-turbo\n",
        "invalid-args",
        id="argparse-unknown-flag",
    ),
    pytest.param(
        2,
        "usage: sglang serve [-h] ...\nsglang serve: error: argument --kv-cache-dtype: invalid choice: "
        "'fp4' (choose from 'auto', 'fp8_e5m2', 'fp8_e4m3', 'mxfp8', 'bf16', 'bfloat16', 'nvfp4', "
        "'fp4_mx_block16')\n",
        "invalid-args",
        id="argparse-bad-choice",
    ),
    pytest.param(
        1,
        "[2026-11-30 10:00:01] Port is already in use. dist_init_port=30006 port_base=30001 "
        "detokenizer_port=30002 nccl_port=30003 scheduler_input_port=30004\n"
        + TRACEBACK
        + "ValueError: dist_init_port at 30006 is not available in 30 seconds. dist_init_port at 30006 "
        "is not available\n",
        "port-busy",
        id="port-args-busy",
    ),
    pytest.param(
        1,
        "[2026-11-30 10:00:12] port 30001 is in use. Waiting for 15 seconds for port_base to be "
        "available. port_base is used by a process already. process.name()='python3'\n"
        + TRACEBACK
        + "ValueError: port_base at 30001 is not available in 30 seconds. port_base is used by a "
        "process already. process.name()='python3'\n",
        "port-busy",
        id="dp-attention-port-base-busy",
    ),
    pytest.param(
        -9,
        TRACEBACK + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
        "total capacity of 95.59 GiB of which 1.02 GiB is free.\n"
        "Exception: Fail when using backend: breakable for prefill runner.\nPossible suggestions:\n"
        "1. set --mem-fraction-static to a smaller value\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n",
        "cuda-graph-oom",
        id="prefill-graph-capture-oom",
    ),
    pytest.param(
        -9,
        TRACEBACK + "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)\n",
        "cuda-graph-oom",
        id="decode-graph-capture-oom",
    ),
    pytest.param(
        -9,
        TRACEBACK + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.8\n",
        "oom",
        id="kv-pool-no-room",
    ),
    pytest.param(
        1,
        TRACEBACK + "RuntimeError: Rank 3 scheduler died during initialization (exit code: -9). If exit "
        "code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to "
        "check.\n",
        "oom",
        id="scheduler-oom-killed",
    ),
    pytest.param(
        -9,
        TRACEBACK + "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes. pre_model_load_memory=60.1, local_gpu_memory=94.2, local_gpu_memory * 0.9=84.78\n",
        "oom",
        id="gpu-memory-held-elsewhere",
    ),
    pytest.param(
        -9,
        TRACEBACK + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.\n",
        "oom",
        id="plain-cuda-oom",
    ),
    pytest.param(
        1,
        TRACEBACK + "ValueError: parallel topology is inconsistent (set by override_permanently):\n"
        "tp_size == moe_ep_size * moe_dp_size * moe_tp_size\n  1 != 2 * 1 * 0 (= 0)\n",
        "invalid-args",
        id="ep-above-tp-topology",
    ),
    pytest.param(
        1,
        TRACEBACK + "AssertionError: moe_dense_tp_size only supports None, 1, or tp_size currently\n",
        "invalid-args",
        id="moe-dense-tp-assert",
    ),
    pytest.param(
        1,
        TRACEBACK + "RuntimeError: Rank 0 scheduler died during initialization (exit code: 1). If exit "
        "code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to "
        "check.\n",
        "crash",
        id="scheduler-died-not-oom",
    ),
]


@pytest.mark.parametrize(("returncode", "log", "expected"), CASES)
def test_sglang_failure_lines_land_in_their_class(returncode: int, log: str, expected: str):
    failure = classify_failure(
        returncode=returncode,
        log_text="[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/models/Kimi-K2.6', ...)\n" + log,
        patterns=ENGINE.failure_patterns,
        ready_pattern=ENGINE.ready_pattern,
    )
    assert failure.reason == expected, failure.message


def test_the_failure_message_is_sglangs_own_line():
    """The trial's reason quotes the line that decided the class, not the traceback header."""
    failure = classify_failure(
        returncode=2,
        log_text="usage: sglang serve ...\nsglang serve: error: unrecognized arguments: --enable-turbo\n",
        patterns=ENGINE.failure_patterns,
        ready_pattern=ENGINE.ready_pattern,
    )
    assert failure.message.startswith("sglang serve: error: unrecognized arguments: --enable-turbo")
