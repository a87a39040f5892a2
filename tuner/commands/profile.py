"""``tuner profile model|host``: profiles of a person's own model and host.

``profile model PATH`` reads a checkpoint's config.json (no network: the model is on
disk); ``profile host`` reads nvidia-smi on the GPU host, here or over ssh. Both write
the YAML profiles ``tuner init``, ``tuner simulate --model/--hardware`` and search spaces
take.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.errors import UsageError
from tuner.profiling import host as host_profile
from tuner.profiling.model_config import read_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="write a model profile from config.json, or a hardware profile from nvidia-smi",
        description="Write the profiles the simulator, `tuner init` and search spaces read.",
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND")
    m = kinds.add_parser(
        "model",
        help="model profile from a checkpoint directory or its config.json",
        description="Read a model directory (config.json, and model.safetensors.index.json when present "
        "to check the derived weight bytes) and write a model profile.",
    )
    m.add_argument("path", type=Path, help="model directory or its config.json")
    m.add_argument("--id", help="profile id (default: from the directory name)")
    m.add_argument("-o", "--output", type=Path, help="write the profile here (default: print it)")
    m.set_defaults(handler=run_model)
    h = kinds.add_parser(
        "host",
        help="hardware profile from nvidia-smi, here or over ssh",
        description="Run `nvidia-smi --query-gpu=...` and `nvidia-smi topo -m` on the GPU host (this "
        "machine, or --host over ssh) and write a hardware profile; or read saved outputs.",
    )
    h.add_argument("--host", help="ssh destination of the GPU host (default: this machine)")
    h.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi binary on the host")
    h.add_argument(
        "--query-file", type=Path, help="saved output of nvidia-smi --query-gpu (with --topo-file)"
    )
    h.add_argument("--topo-file", type=Path, help="saved output of nvidia-smi topo -m (with --query-file)")
    h.add_argument("--id", help="profile id (default: GPU, link and count, e.g. h100-nvlink-x8)")
    h.add_argument("-o", "--output", type=Path, help="write the profile here (default: print it)")
    h.set_defaults(handler=run_host)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise UsageError(f"{output}: cannot write: {exc.strerror or exc}") from exc
    print(f"wrote {output}", file=sys.stderr)


def run_model(args: argparse.Namespace) -> int:
    reading = read_model(args.path, ident=args.id)
    p = reading.profile
    summary = (
        f"{p.name}: {p.total_params / 1e9:.1f}B parameters ({p.active_params / 1e9:.1f}B active), "
        f"{p.attention.kind.upper()}, {'MoE' if p.moe else 'dense'}, {reading.weight_format.name}, "
        f"~{reading.checkpoint_bytes / 1e9:.1f} GB of weights"
    )
    if reading.index_bytes and reading.index_error is not None:
        summary += f" (index {reading.index_bytes / 1e9:.1f} GB, {reading.index_error:+.1%})"
    print(summary, file=sys.stderr)
    _emit(reading.yaml_text(), args.output)
    return 0


def run_host(args: argparse.Namespace) -> int:
    if (args.query_file is None) != (args.topo_file is None):
        raise UsageError("--query-file and --topo-file go together")
    if args.query_file is not None:
        try:
            query, topo = args.query_file.read_text(), args.topo_file.read_text()
        except OSError as exc:
            raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}") from exc
    else:
        query = host_profile.run_nvidia_smi(
            host_profile.QUERY_ARGS, host=args.host, nvidia_smi=args.nvidia_smi
        )
        topo = host_profile.run_nvidia_smi(host_profile.TOPO_ARGS, host=args.host, nvidia_smi=args.nvidia_smi)
    reading = host_profile.read_host(query, topo, ident=args.id)
    print(reading.profile.name, file=sys.stderr)
    _emit(reading.yaml_text(), args.output)
    return 0
