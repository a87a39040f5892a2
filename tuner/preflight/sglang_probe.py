"""Ask an installed SGLang what it makes of launch command lines, without launching.

A standalone script (standard library plus the ``sglang`` package it probes), run with the
interpreter that serves: on the GPU host before a launch, in CI against the pinned
release. It does not import the tuner, so it can be copied to a host as it is.

For each command line read from standard input (one JSON object ``{"argv": [...]}`` per
line, the server's flags without the program), it runs SGLang's own parser
(``prepare_server_args``), its ``ServerArgs`` resolution (``resolve_once``),
``check_server_args`` and the topology check of the launching process, and writes one
JSON line: ``{"ok": true, "resolved": {...}}`` or ``{"ok": false, "message": "<SGLang's
own error line>"}``. No GPU work happens: resolution only reads the model's
``config.json`` and queries the devices.

Modes::

    python sglang_probe.py --version          # the installed sglang release
    python sglang_probe.py --dump-options     # every flag of its parser, as JSON
    python sglang_probe.py [--fake-host] [--model-config DIR] < argvs.jsonl

``--fake-host`` is a stand-in for a GPU host where none exists (CI): it fakes the device
queries to look like 8x RTX PRO 6000 Blackwell (96 GiB, compute capability 12.0) and stubs
the GPU-only kernel modules SGLang imports but never calls while parsing.
``--model-config DIR`` replaces every ``--model-path`` with ``DIR`` (a folder holding a
model's ``config.json`` without weights).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import sys
import types
from typing import Any

#: Top-level modules that only run on a GPU (kernel libraries, CUDA bindings); the argument
#: code imports some of them at module level, calls none of them.
GPU_ONLY_MODULES = (
    "cuda",
    "cutlass",
    "deep_ep",
    "deep_gemm",
    "flash_mla",
    "flashinfer",
    "humming",
    "nvshmem",
    "quack",
    "sgl_kernel",
    "tilelang",
    "torch_memory_saver",
    "torchvision",
    "tvm_ffi",
)

#: The stand-in host of ``--fake-host``: RTX PRO 6000 Blackwell Server Edition (datasheet:
#: 96 GB GDDR7, reported as 97,887 MiB by nvidia-smi; 188 SMs; compute capability 12.0).
FAKE_GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
FAKE_GPU_COUNT = 8
FAKE_GPU_MEMORY = 97887 * 1024 * 1024
FAKE_GPU_CAPABILITY = (12, 0)
FAKE_GPU_SMS = 188

#: Resolved settings reported back (flattened names; the graph limits come from
#: ``cuda_graph_config``). Those that shape the server's performance and identity.
RESOLVED_FIELDS = (
    "tp_size",
    "ep_size",
    "pp_size",
    "dp_size",
    "attn_dp_size",
    "enable_dp_attention",
    "moe_dense_tp_size",
    "moe_a2a_backend",
    "deepep_mode",
    "enable_eplb",
    "max_running_requests",
    "num_continuous_decode_steps",
    "mem_fraction_static",
    "chunked_prefill_size",
    "kv_cache_dtype",
    "disable_cuda_graph",
    "disable_overlap_schedule",
    "speculative_algorithm",
)


class _StubModule(types.ModuleType):
    """A GPU-only module: any attribute is a harmless placeholder (a class when the name
    is capitalised, so ``isinstance`` checks and subclassing work)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value: Any = type(name, (), {}) if name[:1].isupper() else _Placeholder()
        setattr(self, name, value)
        return value


class _Placeholder:
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Placeholder()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Placeholder()

    def __getitem__(self, key: Any) -> Any:
        return _Placeholder()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in GPU_ONLY_MODULES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def fake_host() -> None:
    """Make this process look like the stand-in GPU host (see the module docstring)."""
    import torch
    import torch.utils._triton

    # Settle what transformers and torch detect before torchvision and friends are stubbed:
    # both probe optional packages by their metadata, which a stub has none of.
    torch.utils._triton.has_triton()
    import transformers.models.auto.image_processing_auto
    import transformers.models.auto.processing_auto  # noqa: F401

    sys.meta_path.insert(0, _StubFinder())
    props = types.SimpleNamespace(
        name=FAKE_GPU_NAME,
        major=FAKE_GPU_CAPABILITY[0],
        minor=FAKE_GPU_CAPABILITY[1],
        total_memory=FAKE_GPU_MEMORY,
        multi_processor_count=FAKE_GPU_SMS,
        uuid="GPU-00000000-0000-0000-0000-000000000000",
        L2_cache_size=128 * 1024 * 1024,
        warp_size=32,
        gcnArchName="",
    )
    cuda: Any = torch.cuda  # patched with stand-ins: not the typed module any more
    cuda.is_available = lambda: True
    cuda.device_count = lambda: FAKE_GPU_COUNT
    cuda.get_device_name = lambda device=None: FAKE_GPU_NAME
    cuda.get_device_capability = lambda device=None: FAKE_GPU_CAPABILITY
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (FAKE_GPU_MEMORY - 600 * 1024 * 1024, FAKE_GPU_MEMORY)
    cuda.is_initialized = lambda: False
    cuda.current_device = lambda: 0
    torch.version.cuda = "12.8"


def _parser() -> Any:
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def dump_options() -> dict[str, Any]:
    """Every option of SGLang's parser: spellings, value count, type and choices."""
    options = []
    for action in _parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        kind = getattr(action.type, "__name__", None)
        values = action.choices
        if isinstance(values, set | frozenset):  # a set's order changes from run to run
            values = sorted(values, key=str)
        options.append(
            {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "nargs": action.nargs,
                "type": kind if kind in ("int", "float") else "str",
                "choices": None if values is None else [str(c) for c in values],
            }
        )
    return {"prog": "sglang serve", "options": options}


def _flatten(resolved: dict[str, Any]) -> dict[str, Any]:
    out = {name: resolved.get(name) for name in RESOLVED_FIELDS if name in resolved}
    graphs = resolved.get("cuda_graph_config") or {}
    for phase in ("decode", "prefill"):
        config = graphs.get(phase) or {}
        out[f"cuda_graph_{phase}_backend"] = config.get("backend")
        out[f"cuda_graph_{phase}_max_bs"] = config.get("max_bs")
    return out


def _publish_check(args: Any) -> None:
    """What the launching process does next (``publish(server_args, role="tokenizer")``):
    project the configuration into a runtime context, which checks the parallel topology
    (``tp_size == moe_ep_size * moe_dp_size * moe_tp_size`` and friends). Built as a
    separate context so this process's own stays untouched."""
    try:
        from sglang.srt.runtime_context import create_context
    except ImportError:  # a release without runtime contexts
        return
    create_context(args, role="tokenizer")


def probe(argv: list[str], model_config: str | None) -> dict[str, Any]:
    """SGLang's verdict on one command line (see the module docstring)."""
    from sglang.srt.server_args import prepare_server_args

    if model_config is not None:
        names = ("--model-path", "--model")
        argv = [model_config if i and argv[i - 1] in names else w for i, w in enumerate(argv)]
    err = io.StringIO()
    # Standard output carries the answers: whatever SGLang prints goes to standard error.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            with contextlib.redirect_stderr(err):
                args = prepare_server_args(argv)
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            return {"ok": False, "message": lines[-1] if lines else "argument parsing failed"}
        try:
            args.resolve_once()
            args.check_server_args()
            _publish_check(args)
        except Exception as exc:  # SGLang refuses with assorted exception types
            return {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        return {"ok": True, "resolved": _flatten(args.resolved_dict())}


def main(argv: list[str]) -> int:
    if "--version" in argv:
        import importlib.metadata

        print(importlib.metadata.version("sglang"))
        return 0
    if "--fake-host" in argv:
        fake_host()
    if "--dump-options" in argv:
        json.dump(dump_options(), sys.stdout, indent=1)
        print()
        return 0
    model_config = argv[argv.index("--model-config") + 1] if "--model-config" in argv else None
    import logging

    logging.disable(logging.WARNING)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        result = probe(list(request["argv"]), model_config)
        logging.disable(logging.WARNING)  # prepare_server_args reconfigures logging
        print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
