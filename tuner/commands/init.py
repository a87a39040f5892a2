"""``tuner init``: write a search space for one model on one host.

``--model`` takes a model profile (a packaged id or a YAML file) or a checkpoint directory
/ config.json, whose profile is then written beside the space; ``--host`` takes a hardware
profile (id or file, e.g. from ``tuner profile host``). The space references the profiles
by absolute path, so ``tuner search --space FILE`` runs it from any directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner import init_space, profiles
from tuner.errors import UsageError
from tuner.profiles import HardwareProfile, ModelProfile
from tuner.profiling.model_config import read_model
from tuner.space import SPACE_SUFFIXES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a search space that fits a model on a host",
        description="Write a commented search space for a model on a host: only layouts whose weights "
        "fit, the knobs of the model (experts, MLA) and of the fabric (NCCL), ranges from the KV "
        "capacity, the engine's defaults and the simulator's best predictions as start points.",
    )
    p.add_argument(
        "--model", required=True, help="model profile (id or YAML) or model directory / config.json"
    )
    p.add_argument(
        "--host", required=True, help="hardware profile (id or YAML, e.g. from `tuner profile host`)"
    )
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--objective", choices=("peak", "single", "goodput", "pareto"), default="peak")
    p.add_argument("--workload", choices=("burst", "closed-loop", "poisson"), default="burst")
    p.add_argument("--model-path", help="--model-path of the launch command (default: the model directory)")
    p.add_argument("--name", help="space and study name (default: MODEL-HOST)")
    p.add_argument(
        "--predictions",
        type=int,
        default=init_space.DEFAULT_PREDICTIONS,
        help="simulator predictions spent on the warm start (0: engine defaults only)",
    )
    p.add_argument("-o", "--output", type=Path, help="write the space here (default: print it)")
    p.set_defaults(handler=run)


def _is_profile_file(ref: str) -> bool:
    return ref.endswith(SPACE_SUFFIXES) and Path(ref).is_file()


def _model(ref: str, out_dir: Path) -> tuple[ModelProfile, str, str | None, str | None]:
    """(profile, reference for the space, model directory for --model-path, profile text to
    write at the reference when ``ref`` is a checkpoint rather than a profile)."""
    path = Path(ref)
    if _is_profile_file(ref):
        return _load(profiles.model, str(path.resolve())), str(path.resolve()), None, None
    if path.is_dir() or path.suffix == ".json":
        reading = read_model(path)
        target = (out_dir / f"{reading.profile.id}.model.yaml").resolve()
        folder = path if path.is_dir() else path.parent
        return reading.profile, str(target), str(folder.resolve()), reading.yaml_text()
    return _load(profiles.model, ref), ref, None, None


def _write(path: Path, text: str, what: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the {what}: {exc.strerror or exc}") from exc


def _load(loader, ref: str):
    try:
        return loader(ref)
    except profiles.ProfileError as exc:
        raise UsageError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    if args.predictions < 0:
        raise UsageError("--predictions must be >= 0")
    out_dir = args.output.parent if args.output else Path.cwd()
    hw_ref = str(Path(args.host).resolve()) if _is_profile_file(args.host) else args.host
    hw: HardwareProfile = _load(profiles.hardware, hw_ref)
    model, model_ref, model_dir, model_text = _model(args.model, out_dir)
    options = init_space.InitOptions(
        engine=args.engine,
        objective=args.objective,
        workload=args.workload,
        model_path=args.model_path or model_dir,
        name=args.name,
        predictions=args.predictions,
    )
    draft = init_space.draft(model, hw, model_ref=model_ref, hardware_ref=hw_ref, options=options)
    if model_text is not None:  # the model fits this host: its profile goes beside the space
        _write(Path(model_ref), model_text, "model profile")
        print(f"wrote {model_ref}", file=sys.stderr)
    init_space.finish(draft, predictions=args.predictions)
    text = draft.yaml_text()
    if args.output is None:
        sys.stdout.write(text)
    else:
        _write(args.output, text, "space")
        fit = ", ".join(lay.name for lay in draft.layouts)
        print(
            f"wrote {args.output} ({len(draft.doc['start'])} start points; layouts that fit: {fit})",
            file=sys.stderr,
        )
    return 0
